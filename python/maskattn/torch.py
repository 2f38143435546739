"""maskattn for torch: attention as a ``torch.library`` custom op with autograd and a fake implementation, so
it runs eagerly, under ``torch.compile(fullgraph=True)`` and in gradient checks.

The mask travels into the op as a *handle*: a CPU int64 scalar tensor naming a mask spec or plan held in a
registry here. A tensor input means torch.compile never specialises on the mask: a new mask of the same shape
reuses the compiled graph. Eager callers can pass the spec itself; under ``torch.compile`` pass
``mask_handle(spec)`` made outside the compiled function.

>>> import torch, maskattn
>>> q, k, v = (torch.randn(1, 2, 64, 16, dtype=torch.float64, requires_grad=True) for _ in range(3))
>>> out = maskattn.torch.attention(q, k, v, maskattn.masks.causal(64))
>>> out.sum().backward()
>>> q.grad.shape
torch.Size([1, 2, 64, 16])
"""

from __future__ import annotations

import collections
import itertools
import math
import threading

import torch

from . import api
from .masks import MaskSpec
from .plan import BlockMask

__all__ = ["attention", "mask_handle"]

_REGISTRY_SIZE = 4096
_registry: "collections.OrderedDict[int, object]" = collections.OrderedDict()
_lock = threading.Lock()
_ids = itertools.count(1)


def mask_handle(mask) -> torch.Tensor:
    """The handle of a mask spec or plan (0 for None): a CPU int64 scalar tensor to pass to :func:`attention`.

    The same mask object always gets the same handle. The registry keeps the last 4096 masks alive; a handle
    older than that raises when used.
    """
    if mask is None:
        return torch.zeros((), dtype=torch.int64)
    if not isinstance(mask, (MaskSpec, BlockMask)):
        raise api.mask_type_error(mask)
    with _lock:
        key = getattr(mask, "_torch_handle", None)
        if key is None:
            key = next(_ids)
            mask._torch_handle = key
        _registry[key] = mask
        _registry.move_to_end(key)
        while len(_registry) > _REGISTRY_SIZE:
            _registry.popitem(last=False)
    return torch.tensor(key, dtype=torch.int64)


def _lookup(handle: torch.Tensor):
    key = int(handle)
    if key == 0:
        return None
    with _lock:
        mask = _registry.get(key)
    if mask is None:
        raise KeyError(f"mask handle {key} is unknown or expired; make handles with maskattn.torch.mask_handle")
    return mask


def _lse_dtype(q: torch.Tensor) -> torch.dtype:
    return torch.float32 if q.device.type == "cuda" else q.dtype


@torch.library.custom_op("maskattn::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, handle: torch.Tensor, scale: float,
                  layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, v = (x.detach() for x in (q, k, v))  # DLPack refuses tensors that require grad
    out, lse = api.attention(q, k, v, _lookup(handle), scale=scale, layout=layout, return_lse=True,
                             check_finite=False)
    return out, lse


@_attention_op.register_fake
def _(q, k, v, handle, scale, layout):
    B, H, n_q = (q.shape[0], q.shape[1], q.shape[2]) if layout == "bhnd" else (q.shape[0], q.shape[2], q.shape[1])
    return torch.empty_like(q), q.new_empty((B, H, n_q), dtype=_lse_dtype(q))


@torch.library.custom_op("maskattn::attention_backward", mutates_args=())
def _attention_backward_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                           lse: torch.Tensor, handle: torch.Tensor, scale: float,
                           layout: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    do, q, k, v, out, lse = (x.detach() for x in (do, q, k, v, out, lse))
    return api.attention_backward(do, q, k, v, out, lse, _lookup(handle), scale=scale, layout=layout,
                                  check_finite=False)


@_attention_backward_op.register_fake
def _(do, q, k, v, out, lse, handle, scale, layout):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, handle, scale, layout = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, handle)
    ctx.scale, ctx.layout = scale, layout


def _backward(ctx, d_out, d_lse):
    q, k, v, out, lse, handle = ctx.saved_tensors
    dq, dk, dv = _attention_backward_op(d_out.contiguous(), q, k, v, out, lse, handle, ctx.scale, ctx.layout)
    return dq, dk, dv, None, None, None


_attention_op.register_autograd(_backward, setup_context=_setup_context)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask=None, *, scale: float | None = None,
              layout: str = "bhnd") -> torch.Tensor:
    """Masked attention with autograd: ``maskattn.attention`` as a torch op (gradients for q, k and v).

    Parameters
    ----------
    q, k, v : torch.Tensor
        CUDA float16 / bfloat16 (the kernels) or CPU float32 / float64 (the exact reference); shapes as
        :func:`maskattn.attention`.
    mask : spec, BlockMask, handle tensor or None
        Under ``torch.compile`` pass ``mask_handle(spec)``; a different mask of the same shapes then reuses the
        compiled graph.
    scale : float, optional
        Default ``1 / sqrt(D)``.
    layout : {"bhnd", "bnhd"}

    Returns
    -------
    torch.Tensor like q. The log-sum-exp is not differentiable through this op.
    """
    if isinstance(mask, torch.Tensor) and (mask.dim() != 0 or mask.dtype != torch.int64):
        raise TypeError(f"a mask tensor must be a handle from maskattn.torch.mask_handle (an int64 scalar); got "
                        f"{mask.dtype} {tuple(mask.shape)}; for a boolean mask use "
                        f"mask_handle(maskattn.masks.from_dense(mask))")
    handle = mask if isinstance(mask, torch.Tensor) else mask_handle(mask)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    out, _ = _attention_op(q, k, v, handle, scale, layout)
    return out
