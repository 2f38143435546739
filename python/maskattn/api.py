"""The public calls: compile a mask (:func:`compile_mask`), run attention and its backward: validate, pick the
backend by where the arrays live, run, hand results back.

NumPy (or CPU DLPack) inputs run on the CPU kernels (``backends.cpu``; ``backends.reference`` where
MASKATTN_CPU_BACKEND=reference); CuPy (or CUDA DLPack, e.g. torch) inputs run
on the CUDA kernels. Layouts, GQA packing and mask compilation are handled here once for both; each backend
follows a plan's token order (``plan.perm``) itself (the arrays stay in the caller's order). This is the top of the
core: it imports masks, plans and backends; the integrations (torch, Flex) import it.
"""

from __future__ import annotations

import functools
import math
import os

import numpy as np

from . import masks as _masks
from ._arrays import cupy_or_none, ingest, require_finite
from ._maskprep import default_threads
from .backends.cuda.io import CupyIO, io_for
from .plan import DEFAULT_TILE, BlockMask, check_tile

LAYOUTS = ("bhnd", "bnhd")
CUDA_HEAD_DIMS = (32, 64, 96, 128, 192, 256)


class _Backend:
    """What differs between the CPU reference and the CUDA kernels."""

    def __init__(self, device: str):
        self.device = device
        self.cuda = device != "cpu"
        if self.cuda:
            from .backends import cuda

            self.forward_launch, self.backward_launch = cuda.forward_launch, cuda.backward_launch
            device_id = int(device.split(":")[1])
            self.tile_for = lambda head_dim, dtype, rows=None: cuda.tile_for(head_dim, dtype, device_id, rows)
            self.forward_tile = lambda head_dim, dtype, rows: cuda.tile_for(head_dim, dtype, device_id, rows,
                                                                            training=False)
            self.forward_plan_pays = cuda.kernels.forward_plan_pays
            self.forward_plan_may_pay = cuda.kernels.forward_plan_may_pay
            self.decode_rows = cuda.DECODE_ROWS
            self.xp = cupy_or_none()
            self.dtypes = ("float16", "bfloat16")
        else:
            from .backends import cpu

            # the C++ kernels (backends.cpu), or the exact reference where MASKATTN_CPU_BACKEND=reference; both
            # deterministic, neither has splits to make, and both check their inputs for inf and NaN themselves
            # (check_finite=: the kernels as they read them)
            self.forward = lambda *args, **kwargs: cpu.chosen().forward(*args, **kwargs)
            self.backward = lambda *args, deterministic, **kwargs: cpu.chosen().backward(*args, **kwargs)
            self.tile_for = lambda head_dim, dtype, rows=None: cpu.TILE  # any tile works; this one runs fastest
            self.forward_tile = self.tile_for
            self.decode_rows = 0  # no GQA packing: pack is always 1 here
            self.xp = np
            self.dtypes = ("float32", "float64")

    def wants_finite_check(self, check_finite) -> bool:
        return not self.cuda if check_finite is None else bool(check_finite)


@functools.lru_cache(maxsize=None)
def _backend(device: str) -> _Backend:
    return _Backend(device)


@functools.lru_cache(maxsize=32)
def _no_mask(n_q: int, n_k: int):
    return _masks.full(n_q, n_k)


def _bhnd(x, layout):
    return x if layout == "bhnd" else x.transpose(0, 2, 1, 3)


def _check_inputs(backend, layout, q, k, v, extra=()):
    """Shapes (B, H, n_q, D) / (B, Hk, n_k, D) in bhnd order after the layout view; dtypes; finiteness."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")
    named = {"q": q, "k": k, "v": v, **dict(extra)}
    for name, x in named.items():
        if x.ndim != 4:
            dims = "(B, H, n, D)" if layout == "bhnd" else "(B, n, H, D)"
            raise ValueError(f"{name} must have 4 dimensions {dims} for layout {layout!r}; got shape {x.shape}")
    q, k, v = (_bhnd(x, layout) for x in (q, k, v))
    B, H, n_q, D = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape; got k {k.shape}, v {v.shape} (bhnd order)")
    Bk, Hk, n_k, Dk = k.shape
    if Bk != B or Dk != D:
        raise ValueError(f"k has batch {Bk} and head_dim {Dk}; q has batch {B} and head_dim {D} (bhnd order)")
    if H % Hk:
        raise ValueError(f"q has {H} heads and k/v {Hk}; the query heads must be a multiple of the KV heads (GQA)")
    dtypes = {name: str(x.dtype) for name, x in named.items()}
    if len(set(dtypes.values())) > 1:
        raise TypeError(f"inputs must share one dtype; got {dtypes}")
    dtype = dtypes["q"]
    if dtype not in backend.dtypes:
        where = "the CUDA backend" if backend.cuda else "the CPU backend"
        raise TypeError(f"q has dtype {dtype}; {where} supports {', '.join(backend.dtypes)}")
    if backend.cuda and D not in CUDA_HEAD_DIMS:
        raise ValueError(f"q has head_dim {D}; supported: {', '.join(map(str, CUDA_HEAD_DIMS))}")
    if D < 1 or n_q < 1 or n_k < 1:
        raise ValueError(f"empty inputs: q {q.shape}, k {k.shape} (bhnd order)")
    return B, H, Hk, n_q, n_k, D, dtype


def _check_cache_seqlens(backend, lens, B: int, n_k: int):
    """cache_seqlens as the backend reads it: (B,) integers; int32 on the GPU (checked for range on the CPU only,
    where reading the values costs no synchronisation)."""
    if lens.shape != (B,) or lens.dtype.kind not in "iu":
        raise ValueError(f"cache_seqlens must be an integer array of shape ({B},) (one length per sample); got "
                         f"{lens.dtype} {tuple(lens.shape)}")
    if backend.cuda:
        if lens.dtype != np.int32 or (B > 1 and lens.strides != (4,)):
            raise ValueError("cache_seqlens must be a contiguous int32 array on the GPU (as "
                             f"flash_attn_with_kvcache's); got {lens.dtype} with strides {lens.strides}")
        return lens
    if lens.size and (lens.min() < 0 or lens.max() > n_k):
        raise ValueError(f"cache_seqlens must lie in [0, n_k={n_k}]; got [{lens.min()}, {lens.max()}]")
    return lens


def compile_mask(spec, tile=None, *, threads: int | None = None) -> BlockMask:
    """Compile a mask spec into a :class:`BlockMask` for tiles of ``tile = (tile_m, tile_n)``.

    Parameters
    ----------
    spec : maskattn.masks.MaskSpec
    tile : (int, int), optional
        Multiples of 16 from 16 to 256; default (128, 128). The GPU backend compiles for its own tile.
    threads : int, optional
        Worker threads for dense and sparse masks (default: the machine's cores, at most 8).

    Returns
    -------
    BlockMask
        Cached on the spec: compiling the same spec for the same tile again returns the same plan.

    Examples
    --------
    >>> import maskattn
    >>> plan = maskattn.compile_mask(maskattn.masks.causal(256), tile=(64, 64))
    >>> plan.stats()["active_blocks"], plan.stats()["partial_blocks"]
    (10, 4)
    """
    if isinstance(spec, BlockMask):
        raise TypeError("compile_mask takes a mask spec; this is already a compiled BlockMask")
    if not isinstance(spec, _masks.MaskSpec):
        raise TypeError(f"compile_mask takes a mask spec from maskattn.masks; got {type(spec).__name__}")
    tile = check_tile(DEFAULT_TILE if tile is None else tile)
    plan = spec._plans.get(tile)
    if plan is None:
        if isinstance(spec, _masks.DenseMask) and spec.on_device:  # planned on its GPU, where the plan stays
            from .backends import cuda

            plan = cuda.dense_plan(spec.mask, tile)
        else:  # planned on the host by maskprep
            arrays = spec._tiles(tile, default_threads() if threads is None else int(threads))
            plan = BlockMask(spec.shape, tile, arrays, perm=spec.perm)
        spec._plans[tile] = plan
    return plan


def _resolve_plan(mask, B, H, n_q, n_k, tile) -> BlockMask:
    """The plan for these shapes: compiled (and cached on the spec) for the backend's tile."""
    if mask is None:
        mask = _no_mask(n_q, n_k)
    if isinstance(mask, BlockMask):
        plan = mask  # the backend checks its tile
    elif isinstance(mask, _masks.MaskSpec):
        plan = compile_mask(mask, tile)
    else:
        raise mask_type_error(mask)
    _check_mask_shape(plan.shape, B, H, n_q, n_k)
    return plan


def _forward_plan(backend, mask, B, H, n_q, n_k, D, dtype) -> BlockMask:
    """The forward's plan. For a spec (or None), compiled for the training or decode tile, or for the backend's
    forward-only tile (Hopper's 192 rows at D <= 96, 112 keys at D = 96 and 192, 176 at 128, 80 at 256) where the
    mask lists little more work (kernels.forward_plan_pays; both plans are cached on the spec, and the backward
    compiles the training one; kernels.forward_plan_may_pay says where the second is not worth compiling). A plan is
    taken as given, and so is a dense GPU mask's (planned on the device, its work is not read back)."""
    plan = _resolve_plan(mask, B, H, n_q, n_k, backend.tile_for(D, dtype, rows=n_q))
    tile = backend.forward_tile(D, dtype, rows=n_q)
    if (tile == plan.tile or isinstance(mask, BlockMask) or not plan.on_host
            or not backend.forward_plan_may_pay(plan, D)):
        return plan
    forward_plan = _resolve_plan(mask, B, H, n_q, n_k, tile)
    return forward_plan if backend.forward_plan_pays(plan, forward_plan, D) else plan


def mask_type_error(mask) -> TypeError:
    """The error for a mask argument that is not None, a spec or a plan; arrays get the builder that takes them."""
    hint = ""
    if hasattr(mask, "shape") and hasattr(mask, "dtype"):
        hint = ("; for a boolean array use maskattn.masks.from_dense(mask), for FlashMask's startend_row_indices "
                "maskattn.masks.from_intervals(...)")
    return TypeError(f"mask must be None, a spec from maskattn.masks or a BlockMask; got {type(mask).__name__}{hint}")


def _check_mask_shape(shape, B, H, n_q, n_k):
    Bm, Hm, mq, mk = shape
    if (mq, mk) != (n_q, n_k) or Bm not in (1, B) or Hm not in (1, H):
        raise ValueError(f"mask has shape (B={Bm}, H={Hm}, n_q={mq}, n_k={mk}); attention has B={B}, H={H}, "
                         f"n_q={n_q}, n_k={n_k} (mask B and H may be 1)")


def _gqa_pack(backend, mask, H, Hk, n_q) -> int:
    """How many query heads of a KV head share one CTA: all of them (H // Hk) when so few query rows would leave
    a tile mostly empty (decode, tree verification) and the mask is the same for every head; else 1."""
    if H == Hk or n_q * (H // Hk) > 2 * backend.decode_rows:
        return 1
    if mask is None:
        return H // Hk
    if isinstance(mask, _masks.MaskSpec) and mask.shape[1] == 1 and mask.repeat_rows(H // Hk) is not None:
        return H // Hk
    return 1


def _scale(scale, D) -> float:
    if scale is None:
        return 1.0 / math.sqrt(D)
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite; got {scale}")
    return scale


def attention(q, k, v, mask=None, *, scale=None, layout="bhnd", return_lse=False, check_finite=None,
              num_splits=None, cache_seqlens=None):
    """Exact softmax attention restricted to a mask: ``softmax(q k^T * scale + mask) v``.

    Parameters
    ----------
    q : array (B, H, n_q, D) for layout "bhnd", (B, n_q, H, D) for "bnhd"
    k, v : arrays (B, Hk, n_k, D) / (B, n_k, Hk, D); ``H % Hk == 0`` (GQA / MQA)
        NumPy (float32 / float64: the CPU kernels, threads as ``backends.cpu.threads``), CuPy or CUDA DLPack tensors
        such as torch (float16 / bfloat16: the CUDA kernels; torch in, torch out, no copies). All on one device, one
        dtype.
    mask : maskattn.masks spec, BlockMask or None
        True = attend. A spec is compiled on first use for the backend's tile and cached on the spec; None is
        full attention. Queries and keys align bottom-right when n_q != n_k. On Hopper a spec's forward takes a
        larger tile (``tile_for(..., training=False)``: 192 x 128, 192 x 112, 128 x 176, 128 x 112, 128 x 80 at
        D <= 64, 96, 128, 192, 256) where its plan there lists at most 10% more work than the training tile's (at
        128: without partial tiles; at 256: without bit tiles; at both without a node order); a BlockMask runs at
        its own tile.
    scale : float, optional
        Default ``1 / sqrt(D)``.
    return_lse : bool
        Also return the log-sum-exp per row, (B, H, n_q) (float32 on CUDA; the input dtype on the CPU).
    check_finite : bool, optional
        Raise ValueError if q, k or v hold inf or NaN. Default: on for NumPy inputs (the CPU kernels check each
        element as they read it), off on the GPU (the check would synchronise the device).
    num_splits : int, optional
        GPU: split each query block's key blocks over this many CTAs (1 to 32), merging the partial results
        exactly. Default: chosen from the plan and the GPU's size, so that few query rows over a long KV cache
        still fill the GPU, and (Hopper, rows of one length) so that the last wave of CTAs splits over the SMs
        that would otherwise idle. The CPU ignores it.
    cache_seqlens : integer array (B,), optional
        Per sample the number of valid keys (a KV cache's lengths, as ``flash_attn_with_kvcache``'s): keys
        ``j >= cache_seqlens[b]`` are masked besides ``mask``, at run time, so one mask and plan serve every step of
        a decode loop whose cache grows (write the new tokens' K and V into the cache first). Same array type and
        device as q; int32 on the GPU, whose values are not checked there (past n_k counts as n_k). The mask keeps
        its columns: for single-token decode ``mask=None`` gives FlashAttention's causal decode; for several new
        tokens per sample at ragged lengths build :func:`maskattn.masks.kv_cache` instead. Not for masks with a
        node order (graphs, dilated Longformer).

    With few query rows over many keys (decode, tree verification: ``n_q * H / Hk <= 128``) and a mask that is
    the same for every head, the query heads that share a KV head run in one CTA (GQA packing), over a plan of
    the mask with each row repeated ``H / Hk`` times.

    Returns
    -------
    out : array like q; with ``return_lse``, ``(out, lse)``
        Rows that see no key give 0 (and lse -inf).

    Examples
    --------
    >>> import numpy as np, maskattn
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((1, 2, 300, 64)) for _ in range(3))
    >>> out = maskattn.attention(q, k, v, maskattn.masks.causal(300))
    >>> out.shape
    (1, 2, 300, 64)
    """
    given = (q, k, v) if cache_seqlens is None else (q, k, v, cache_seqlens)
    key = None if check_finite else _call_key(given, mask, "forward", scale, layout, num_splits)
    call = _CALLS.get(key) if key is not None else None
    if call is not None:
        call.rebind(mask)
        result = call(*given)
        if result is not None:  # None: a pointer off 16 bytes, which the checks below name
            return result if return_lse else result[0]
    given_mask = mask
    views, device, export = ingest(q=q, k=k, v=v, **({} if cache_seqlens is None else {"cache_seqlens": cache_seqlens}))
    backend = _backend(device)
    q, k, v = views["q"], views["k"], views["v"]
    B, H, Hk, n_q, n_k, D, dtype = _check_inputs(backend, layout, q, k, v)
    lens = None if cache_seqlens is None else _check_cache_seqlens(backend, views["cache_seqlens"], B, n_k)
    finite = backend.wants_finite_check(check_finite)
    if finite and backend.cuda:
        require_finite(backend.xp, q=q, k=k, v=v)
    pack = _gqa_pack(backend, mask, H, Hk, n_q)
    if pack > 1:
        mask = _no_mask(n_q, n_k) if mask is None else mask
        _check_mask_shape(mask.shape, B, H, n_q, n_k)
        mask = mask.repeat_rows(pack)
    plan = _forward_plan(backend, mask, B, H, n_q * pack, n_k, D, dtype)
    if lens is not None and plan.perm is not None:
        raise ValueError("cache_seqlens needs a mask without a node order (this plan has a perm: a graph or a dilated "
                         "Longformer); build the per-sample mask instead")
    if backend.cuda:
        io = io_for(given[0])
        call = _ForwardCall(backend.forward_launch, io or CupyIO(), given_mask, plan, layout, _scale(scale, D),
                            num_splits=num_splits, pack=pack, bounded=lens is not None)
        out, lse = _run_prepared(call, key, io, export, given, (q, k, v) + (() if lens is None else (lens,)))
        return (out, lse) if return_lse else out
    out, lse = backend.forward(*(_bhnd(x, layout) for x in (q, k, v)), plan, _scale(scale, D), key_lens=lens,
                               check_finite=finite)
    out = np.ascontiguousarray(_bhnd(out, layout))
    return (export(out), export(lse)) if return_lse else export(out)


# Prepared CUDA calls by _call_key: a call with the arguments of an earlier one (same array type, shapes, strides,
# dtype, device, mask object, options, kernel switch) skips ingestion, checks and plan lookup.
_CALLS: dict = {}
_CALLS_KEPT = 128


def _call_key(arrays, mask, *options):
    """What a CUDA call depends on besides the data, or None (not CuPy / CUDA torch, mixed types, an option of a
    type that is not a plain hashable value)."""
    io = io_for(arrays[0])
    if io is None or any(type(x) is not type(arrays[0]) for x in arrays):
        return None
    if not all(o is None or type(o) in (str, int, float, bool) for o in options):
        return None
    # a transient plan serves one call: it is named by its geometry, and the prepared call of that geometry runs it
    # after moving its launches' plan pointers (such plans are laid out alike: _PreparedCall.rebind)
    transient = isinstance(mask, BlockMask) and mask.transient
    name = ("transient", mask.shape, mask.tile, mask.payload) if transient else id(mask)
    # MASKATTN_SM90 picks the kernels on Hopper (maskattn._cuda): a prepared launch holds them
    return (*(io.signature(x) for x in arrays), name, *options, os.environ.get("MASKATTN_SM90"))


def _run_prepared(call, key, io, export, given, views):
    """Run a new prepared call on the caller's arrays (or, for a DLPack producer other than CuPy and torch, on the
    CuPy views, exporting the results back) and keep it under key."""
    results = call(*(given if io is not None else views))
    if io is None:
        return tuple(export(x) for x in results)
    if key is not None:
        while len(_CALLS) >= _CALLS_KEPT:
            _CALLS.pop(next(iter(_CALLS)))
        _CALLS[key] = call
    return results


class _PreparedCall:
    """A CUDA call for one configuration of arguments, prepared on its first call: the plan and the checked launch,
    built from the first arrays (a plan's token order, ``perm``, is the kernels' to follow: they gather and scatter rows
    through it). A call allocates its outputs like the inputs (torch in, torch out) and launches on the caller's
    current stream; it returns None when a data pointer is off 16 bytes (the launch checks, on the full path, name
    it)."""

    def __init__(self, make_launch, io, mask, plan, layout, scale, **options):
        self.make_launch, self.io, self.plan, self.layout, self.scale = make_launch, io, plan, layout, scale
        self.options = options
        self.mask = mask  # alive while cached: the key names it by id (a transient plan by its geometry)
        self.launch = None

    def prepare(self, inputs, outputs):
        """Build the launch from views of the first call's arrays (bhnd order; (B, H, n) arrays as they are)."""
        views = [self.io.view(x) for x in (*inputs, *outputs)]
        views = [_bhnd(x, self.layout) if x.ndim == 4 else x for x in views]
        self.launch = self.make_launch(*views[:len(inputs)], self.plan, self.scale, *views[len(inputs):],
                                       **self.options)

    def aligned(self, arrays) -> bool:
        return self.launch is None or not any(self.io.address(x) & 15 for x in arrays)

    def rebind(self, mask):
        """Run ``mask`` from now on: this call's own mask, or another transient plan of its geometry, which its key
        names (plans built on the device for one call: the launch's plan pointers move to the new plan's buffer)."""
        if mask is not self.mask:
            self.launch.rebind(mask)
            self.mask = self.plan = mask


class _ForwardCall(_PreparedCall):
    """``attention`` on the GPU: (out, lse)."""

    def __call__(self, q, k, v, cache_seqlens=None):
        io = self.io
        if not self.aligned((q, k, v)):
            return None
        out = io.empty(q.shape, q)
        if self.launch is None:
            self.prepare((q, k, v), (out,))
        lse = io.empty(self.launch.lse_shape, q, float32=True)
        parts = [io.empty(shape, q, float32=True) for shape in self.launch.part_shapes]
        key_lens = 0 if cache_seqlens is None else io.address(cache_seqlens)
        self.launch(io.stream(q), *(io.address(x) for x in (q, k, v, out, lse, *parts)), key_lens=key_lens)
        return out, lse


class _BackwardCall(_PreparedCall):
    """``attention_backward`` on the GPU: (dq, dk, dv)."""

    def __call__(self, do, q, k, v, out, lse):
        io = self.io
        if not self.aligned((do, q, k, v, out, lse)):
            return None
        grads = io.empty(q.shape, q), io.empty(k.shape, k), io.empty(k.shape, k)
        if self.launch is None:
            self.prepare((do, q, k, v, out, lse), grads)
        scratch = [io.empty(shape, q, float32=True) for shape in self.launch.scratch_shapes]
        self.launch(io.stream(q), *(io.address(x) for x in (do, q, k, v, out, lse, *grads, *scratch)))
        return tuple(grads)


def attention_backward(do, q, k, v, out, lse, mask=None, *, scale=None, layout="bhnd", check_finite=None,
                       deterministic=False):
    """Gradients of :func:`attention` with respect to q, k and v.

    Parameters
    ----------
    do : array like q
        Gradient of the loss with respect to ``out``.
    q, k, v, mask, scale, layout, check_finite :
        As given to :func:`attention`.
    out, lse :
        What :func:`attention` returned (with ``return_lse=True``).
    deterministic : bool
        On the GPU, False (the default, the faster path) adds dQ into a float32 accumulator from the kernel that
        computes dK and dV (on Hopper one pass over the plan whose dQ goes by bulk reductions, elsewhere float32
        atomics), so its rounding varies from run to run. True is bit-identical on every run: on Hopper the same one
        pass sums dQ in 32-bit fixed point (each row scaled by a power of two from a bound on its sums; exact, so
        independent of the order of the additions), elsewhere dQ is computed by its own kernel over the forward block
        lists, at the cost of computing S and dP twice. ``maskattn.torch`` passes
        ``torch.are_deterministic_algorithms_enabled()``. The CPU backends are always deterministic.

    Returns
    -------
    dq, dk, dv : arrays like q, k, v
        dk and dv sum over the query heads that share a KV head. Masked-out rows and columns get 0.
    """
    key = None if check_finite else _call_key((do, q, k, v, out, lse), mask, "backward", scale, layout,
                                              bool(deterministic))
    call = _CALLS.get(key) if key is not None else None
    if call is not None:
        call.rebind(mask)
        result = call(do, q, k, v, out, lse)
        if result is not None:  # None: a pointer off 16 bytes, which the checks below name
            return result
    given = do, q, k, v, out, lse
    views, device, export = ingest(do=do, q=q, k=k, v=v, out=out, lse=lse)
    backend = _backend(device)
    do, q, k, v, out, lse = (views[n] for n in ("do", "q", "k", "v", "out", "lse"))
    B, H, Hk, n_q, n_k, D, dtype = _check_inputs(backend, layout, q, k, v, extra=(("do", do), ("out", out)))
    if do.shape != q.shape or out.shape != q.shape:
        raise ValueError(f"do and out must have q's shape {q.shape}; got do {do.shape}, out {out.shape}")
    if lse.shape != (B, H, n_q):
        raise ValueError(f"lse must have shape (B, H, n_q) = {(B, H, n_q)}; got {lse.shape}")
    finite = backend.wants_finite_check(check_finite)
    if finite and backend.cuda:
        require_finite(backend.xp, do=do, q=q, k=k, v=v, out=out)
    plan = _resolve_plan(mask, B, H, n_q, n_k, backend.tile_for(D, dtype))
    if backend.cuda:
        io = io_for(given[0])
        call = _BackwardCall(backend.backward_launch, io or CupyIO(), mask, plan, layout, _scale(scale, D),
                             deterministic=bool(deterministic))
        return _run_prepared(call, key, io, export, given, (do, q, k, v, out, lse))
    dob, qb, kb, vb, ob = (_bhnd(x, layout) for x in (do, q, k, v, out))
    dq, dk, dv = backend.backward(dob, qb, kb, vb, ob, lse, plan, _scale(scale, D), deterministic=deterministic,
                                  check_finite=finite)
    return tuple(export(np.ascontiguousarray(_bhnd(g, layout))) for g in (dq, dk, dv))
