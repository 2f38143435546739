"""maskattn for torch: attention as a ``torch.library`` custom op with autograd and a fake implementation, so
it runs eagerly, under ``torch.compile(fullgraph=True)`` and in gradient checks (eager calls run the same code
through an ``autograd.Function``, without the op's dispatch: ``_op_pair``); and
:func:`scaled_dot_product_attention`, a drop-in for torch's with a boolean mask planned inside the op on each call.

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
import functools
import itertools
import math
import threading
from typing import Optional

import numpy as np
import torch
from torch._C._functorch import is_functorch_wrapped_tensor
from torch.autograd.function import once_differentiable
from torch.utils._python_dispatch import _get_current_dispatch_mode

from . import api, masks
from ._arrays import cupy_or_none, torch_view
from .backends.cuda import plans as cuda_plans
from .backends.cuda import tile_for
from .masks import MaskSpec
from .plan import BlockMask

__all__ = ["attention", "mask_handle", "scaled_dot_product_attention"]

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


def _op_pair(name, forward, forward_fake, backward, backward_fake, setup_context, formula):
    """The custom op ``name`` running ``forward`` and the op ``name + "_backward"`` running ``backward``, with their
    fake implementations and the autograd formula ``formula(backward, ctx, *output_grads)`` after ``setup_context``:
    what torch.compile, export and fake tensors see. Returns the call to make: the ops where torch traces, and in
    eager calls an ``autograd.Function`` that runs the same functions and formula without the ops' dispatch (on a
    CUDA tensor that dispatch cost up to ~0.4 ms of host time per forward+backward step, 0-0.3 ms in measured full
    steps, where a sparse mask's kernels take ~1 ms: performance.md). Outputs after the first are not
    differentiable."""
    forward_op = torch.library.custom_op(name, forward, mutates_args=())
    forward_op.register_fake(forward_fake)
    backward_op = torch.library.custom_op(name + "_backward", backward, mutates_args=())
    backward_op.register_fake(backward_fake)
    forward_op.register_autograd(functools.partial(formula, backward_op), setup_context=setup_context)

    def eager_setup_context(ctx, inputs, output):
        setup_context(ctx, inputs, output)
        ctx.mark_non_differentiable(*output[1:])
        ctx.set_materialize_grads(False)  # no zeros for the outputs that take no gradient (the plan's buffer)

    def eager_backward(ctx, d_out, *rest):
        if d_out is None:  # the output took no gradient
            return (None,) * len(ctx.needs_input_grad)
        return formula(backward, ctx, d_out, *rest)

    # grad_fn reads e.g. "maskattn_attentionBackward"
    eager = type(name.replace("::", "_"), (torch.autograd.Function,), {
        "forward": staticmethod(forward), "setup_context": staticmethod(eager_setup_context),
        "backward": staticmethod(once_differentiable(eager_backward))})

    def call(*inputs):
        traced = torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None or any(
            isinstance(x, torch.Tensor) and (type(x) is not torch.Tensor or is_functorch_wrapped_tensor(x))
            for x in inputs)
        return forward_op(*inputs) if traced else eager.apply(*inputs)

    return call


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, handle: torch.Tensor, scale: float,
               layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, v = (x.detach() for x in (q, k, v))  # DLPack refuses tensors that require grad
    out, lse = api.attention(q, k, v, _lookup(handle), scale=scale, layout=layout, return_lse=True,
                             check_finite=False)
    return out, lse


def _attention_fake(q, k, v, handle, scale, layout):
    B, H, n_q = (q.shape[0], q.shape[1], q.shape[2]) if layout == "bhnd" else (q.shape[0], q.shape[2], q.shape[1])
    return torch.empty_like(q), q.new_empty((B, H, n_q), dtype=_lse_dtype(q))


def _attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                        lse: torch.Tensor, handle: torch.Tensor, scale: float,
                        layout: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    do, q, k, v, out, lse = (x.detach() for x in (do, q, k, v, out, lse))
    return api.attention_backward(do, q, k, v, out, lse, _lookup(handle), scale=scale, layout=layout,
                                  check_finite=False, deterministic=torch.are_deterministic_algorithms_enabled())


def _attention_backward_fake(do, q, k, v, out, lse, handle, scale, layout):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _attention_setup_context(ctx, inputs, output):
    q, k, v, handle, scale, layout = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, handle)
    ctx.scale, ctx.layout = scale, layout


def _attention_formula(backward, ctx, d_out, d_lse):
    q, k, v, out, lse, handle = ctx.saved_tensors
    dq, dk, dv = backward(d_out.contiguous(), q, k, v, out, lse, handle, ctx.scale, ctx.layout)
    return dq, dk, dv, None, None, None


_attention_op = _op_pair("maskattn::attention", _attention, _attention_fake, _attention_backward,
                         _attention_backward_fake, _attention_setup_context, _attention_formula)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask=None, *, scale: float | None = None,
              layout: str = "bhnd") -> torch.Tensor:
    """Masked attention with autograd: ``maskattn.attention`` as a torch op (gradients for q, k and v).

    Parameters
    ----------
    q, k, v : torch.Tensor
        CUDA float16 / bfloat16 (the kernels) or CPU float32 / float64 (the CPU kernels); shapes as
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


# scaled_dot_product_attention -------------------------------------------------------------------------------------
#
# The mask is a tensor input of the op, planned inside it on every call (its contents may change from call to call
# without torch.compile noticing): on the GPU by backends.cuda.plans.dense_plan into a buffer torch allocates, which
# the op returns so that the backward reads the same plan; on the CPU (the CPU kernels) by maskprep, in the
# forward and again in the backward.


@functools.lru_cache(maxsize=64)
def _causal_top_left(n_q: int, n_k: int) -> MaskSpec:
    """SDPA's ``is_causal``: query i sees keys j <= i, aligned top-left (maskattn's ``masks.causal`` aligns
    bottom-right, as FlashAttention): column j is masked in rows [0, min(j, n_q))."""
    j = np.arange(n_k)
    columns = np.stack([np.full(n_k, n_q), np.full(n_k, n_q), np.zeros(n_k), np.minimum(j, n_q)], axis=-1)
    return masks.from_intervals(columns.astype(np.int32)[None, None], n_q=n_q)


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _plan_bytes(q: torch.Tensor, n_k: int, attn_mask: Optional[torch.Tensor]) -> int:
    """Bytes of the plan buffer the op returns: a GPU plan's (``cuda_plans.dense_layout``), else none."""
    if attn_mask is None or q.device.type != "cuda":
        return 0
    tile = tile_for(q.shape[3], _dtype_name(q), q.device.index)
    return cuda_plans.dense_layout(attn_mask.shape[0] * attn_mask.shape[1], q.shape[2], n_k, tile)[1]


def _sdpa_mask(q, k, attn_mask, is_causal, plan=None):
    """The mask argument of ``api.attention`` for SDPA's (attn_mask, is_causal), and the plan buffer (empty where
    no plan is built on the GPU). ``plan``: the forward's buffer, which the backward wraps instead of planning."""
    n_q, n_k = q.shape[2], k.shape[2]
    empty = q.new_empty(0, dtype=torch.uint8)
    if attn_mask is None:
        return (_causal_top_left(n_q, n_k) if is_causal else None), empty
    dense = attn_mask.expand(attn_mask.shape[0], attn_mask.shape[1], n_q, n_k)  # broadcast rows, keys: stride 0
    if q.device.type != "cuda":
        return masks.from_dense(dense), empty
    cupy = cupy_or_none()
    tile = tile_for(q.shape[3], _dtype_name(q), q.device.index)
    if plan is not None:
        return cuda_plans.wrap_dense_plan(torch_view(cupy, plan), dense.shape, tile, transient=True), plan
    buffer = torch.empty(_plan_bytes(q, n_k, attn_mask), dtype=torch.uint8, device=q.device)
    # built on torch's stream, behind the work that made the mask, in memory torch owns
    plan = cuda_plans.dense_plan(torch_view(cupy, dense), tile, buffer=torch_view(cupy, buffer),
                                 stream=torch.cuda.current_stream(q.device).cuda_stream, transient=True)
    return plan, buffer


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Optional[torch.Tensor], is_causal: bool,
          scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v = (x.detach() for x in (q, k, v))
    mask, plan = _sdpa_mask(q, k, attn_mask, is_causal)
    out, lse = api.attention(q, k, v, mask, scale=scale, return_lse=True, check_finite=False)
    return out, lse, plan


def _sdpa_fake(q, k, v, attn_mask, is_causal, scale):
    plan = q.new_empty(_plan_bytes(q, k.shape[2], attn_mask), dtype=torch.uint8)
    return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=_lse_dtype(q)), plan


def _sdpa_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, attn_mask: Optional[torch.Tensor], plan: torch.Tensor, is_causal: bool,
                   scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    do, q, k, v, out, lse = (x.detach() for x in (do, q, k, v, out, lse))
    mask, _ = _sdpa_mask(q, k, attn_mask, is_causal, plan=plan if plan.numel() else None)
    return api.attention_backward(do, q, k, v, out, lse, mask, scale=scale, check_finite=False,
                                  deterministic=torch.are_deterministic_algorithms_enabled())


def _sdpa_backward_fake(do, q, k, v, out, lse, attn_mask, plan, is_causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _sdpa_setup_context(ctx, inputs, output):
    q, k, v, attn_mask, is_causal, scale = inputs
    out, lse, plan = output
    ctx.save_for_backward(q, k, v, out, lse, plan, attn_mask)
    ctx.is_causal, ctx.scale = is_causal, scale


def _sdpa_formula(backward, ctx, d_out, d_lse, d_plan):
    q, k, v, out, lse, plan, attn_mask = ctx.saved_tensors
    dq, dk, dv = backward(d_out.contiguous(), q, k, v, out, lse, attn_mask, plan, ctx.is_causal, ctx.scale)
    return dq, dk, dv, None, None, None


_sdpa_op = _op_pair("maskattn::sdpa", _sdpa, _sdpa_fake, _sdpa_backward, _sdpa_backward_fake, _sdpa_setup_context,
                    _sdpa_formula)


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """``torch.nn.functional.scaled_dot_product_attention`` for boolean masks: the same arguments and results, with
    only the tiles the mask touches computed.

    Parameters
    ----------
    query : torch.Tensor (B, H, L, E) or (H, L, E)
    key, value : torch.Tensor (B, Hk, S, E) or (Hk, S, E)
        CUDA float16 / bfloat16 (the kernels) or CPU float32 / float64 (the CPU kernels); head dims as
        :func:`maskattn.attention`, value's the same as query's. Batch sizes of 1 broadcast, as in SDPA. ``Hk`` may
        be 1 (broadcast, as in SDPA) or, with ``enable_gqa``, any divisor of ``H``.
    attn_mask : bool torch.Tensor, optional
        Broadcastable to (B, H, L, S), True = attend, on the query's device: ``(L, S)``, ``(B, 1, 1, S)`` (key
        padding), ``(B, H, L, S)``, ... It is planned anew on every call (on the GPU, where it lives, in about the
        time it takes to read it), so its contents may change between calls, under ``torch.compile`` too.
        Float masks (additive biases) are not supported.
    dropout_p : float
        Must be 0: maskattn has no dropout.
    is_causal : bool
        Query i sees keys j <= i (top-left aligned, as SDPA's); not together with ``attn_mask``, as SDPA.
    scale : float, optional
        Default ``1 / sqrt(E)``.
    enable_gqa : bool
        Let ``key`` and ``value`` have fewer heads than ``query`` (grouped-query attention).

    Returns
    -------
    torch.Tensor like query. Rows whose mask is all False give 0 (and no gradient), as torch's CPU SDPA does: an
    empty softmax has no value, and 0 keeps NaN out of the next layer.

    Examples
    --------
    >>> import torch, maskattn
    >>> q, k, v = (torch.randn(1, 2, 64, 16, dtype=torch.float64) for _ in range(3))
    >>> mask = torch.rand(64, 64) < 0.3
    >>> out = maskattn.torch.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    >>> ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    >>> bool(torch.allclose(out, ref))
    True
    """
    if dropout_p != 0.0:
        raise ValueError(f"dropout_p={dropout_p}: maskattn has no dropout; pass dropout_p=0.0")
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool:
            raise TypeError(f"attn_mask has dtype {attn_mask.dtype}; maskattn supports boolean masks (True = attend) "
                            f"and is_causal, not additive float biases")
        if is_causal:
            raise ValueError("attn_mask and is_causal=True are both set (SDPA refuses that too): fold the causal part "
                             "into the mask")
        if attn_mask.device != query.device:
            raise ValueError(f"attn_mask is on {attn_mask.device}; query is on {query.device}")
    if not (query.dim() == key.dim() == value.dim() and query.dim() in (3, 4)):
        raise ValueError(f"query, key and value must all be (B, H, L, E) or (H, L, E); got {tuple(query.shape)}, "
                         f"{tuple(key.shape)}, {tuple(value.shape)}")
    unbatched = query.dim() == 3
    q, k, v = (x.unsqueeze(0) for x in (query, key, value)) if unbatched else (query, key, value)
    if value.shape[-1] != query.shape[-1] or key.shape[-1] != query.shape[-1]:
        raise ValueError(f"query, key and value must share their last dimension; got {query.shape[-1]}, "
                         f"{key.shape[-1]}, {value.shape[-1]}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"key and value must have the same batch, heads and length; got {tuple(key.shape)} and "
                         f"{tuple(value.shape)}")
    B = max(q.shape[0], k.shape[0])
    if {q.shape[0], k.shape[0]} - {1, B}:
        raise ValueError(f"query has batch {q.shape[0]} and key {k.shape[0]}: they must match or be 1")
    H, Hk, L, S = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    if Hk != H and Hk != 1 and not enable_gqa:
        raise ValueError(f"query has {H} heads and key {Hk}: pass enable_gqa=True for grouped-query attention")
    if H % Hk:
        raise ValueError(f"query has {H} heads and key {Hk}: the query heads must be a multiple of the key heads")
    q, k, v = q.expand(B, -1, -1, -1), k.expand(B, -1, -1, -1), v.expand(B, -1, -1, -1)
    mask = None if attn_mask is None else _sdpa_mask_4d(attn_mask, (B, H, L, S))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    out, _, _ = _sdpa_op(q, k, v, mask, bool(is_causal), scale)
    return out[0] if unbatched else out


def _sdpa_mask_4d(attn_mask: torch.Tensor, target) -> torch.Tensor:
    """attn_mask as (1 or B, 1 or H, 1 or L, 1 or S), as SDPA broadcasts it to ``target`` (B, H, L, S); a batch or
    head dimension that is only broadcast (stride 0) is cut to 1, so that the plan has one group for it."""
    if not 2 <= attn_mask.dim() <= 4:
        raise ValueError(f"attn_mask must have 2 to 4 dimensions, broadcastable to (B, H, L, S) = {tuple(target)}; "
                         f"got shape {tuple(attn_mask.shape)}")
    mask = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape))
    if any(m not in (1, t) for m, t in zip(mask.shape, target)):
        raise ValueError(f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to (B, H, L, S) = "
                         f"{tuple(target)}")
    for dim in (0, 1):
        if mask.shape[dim] > 1 and mask.stride(dim) == 0:
            mask = mask.narrow(dim, 0, 1)
    return mask
