"""CUDA backend, forward: :func:`forward` on CuPy arrays and the checked, cached launch behind it
(:func:`forward_launch`): the mma.sync kernel of ``gpu/fwd.cu`` or, on Hopper, ``gpu/fwd_sm90.cu``, split-KV with its
combine kernel (:func:`num_splits_for`, :func:`tail_splits_for`), GQA packing and run-time key counts (``key_lens``).
"""

from __future__ import annotations

import collections
import ctypes
import math

import numpy as np

from ...plan import BlockMask
from .kernels import (MASK_MODES, MAX_SPLITS, SM90_SMEM_OPTIN, combine_kernel, fwd_configs, fwd_kernel, import_cupy,
                      multiprocessors, sm90_enabled, sm90_kernel, sm90_threads, sources_key, uses_sm90)
from .launch import Launcher, check_launch, element_strides
from .plans import device_plan, rebind
from .tma import MAP_BYTES, TensorMap


def num_splits_for(ctas: int, longest_row: int, smem: int, multiprocessors: int, per_sm: int | None = None) -> int:
    """How many slices to split each query block's key blocks into, when ``ctas`` CTAs cannot fill the GPU.

    ``longest_row``: the most key blocks any query block visits; ``smem``: shared memory per CTA, which sets the
    CTAs an SM holds unless ``per_sm`` does (fwd_sm90's take one: their registers). As
    FlashAttention's heuristic: among 1 .. MAX_SPLITS splits (at most one per key block, with at least two key
    blocks per split), take the fewest whose wave efficiency (waves / whole waves) is within 85% of the best;
    none when the CTAs already fill 80% of one wave.
    """
    slots = multiprocessors * (per_sm or max(1, (SM90_SMEM_OPTIN + 1024) // (smem + 1024)))
    if ctas >= 0.8 * slots or longest_row < 4:
        return 1
    candidates = range(1, min(MAX_SPLITS, longest_row // 2) + 1)
    efficiency = {s: (ctas * s / slots) / math.ceil(ctas * s / slots) for s in candidates}
    best = max(efficiency.values())
    return next(s for s in candidates if efficiency[s] >= 0.85 * best)


# The wave model of tail_splits_for, in units of one key block of a CTA's row:
# - a CTA's fixed cost (start, plan reads, first copies, epilogue): 4-5 us against 1.6-1.75 us a 128 x 128 block of
#   fwd_sm90 (H100, docs/performance.md 2026-11-28, "where a forward CTA's time goes");
# - a split piece's float32 partials (written by the piece, read by the combine kernel: 8 bytes a row and column at
#   about 3 TB/s) against the 4 flops a row, column and key of the tensor cores (about 650 TFLOP/s over 132 SMs):
#   the time of PIECE_KEYS keys of its row;
# - the combine kernel's launch (the backward's merge alike);
# and the least fraction of the forward's time a split must save to be taken, with the slack within which fewer
# pieces are preferred to the soonest end.
CTA_FIXED_BLOCKS = 2.5
PIECE_KEYS = 3.3
COMBINE_LAUNCH_BLOCKS = 2.0
TAIL_MIN_GAIN = 0.01
TAIL_SLACK = 0.01


def tail_splits_for(ctas: int, row_len: int, slots: int, piece_blocks: float) -> tuple[int, int]:
    """How to split the last CTAs of a launch whose CTAs all visit ``row_len`` blocks (the forward's key blocks, the
    backward's query blocks), one CTA a slot at a time: ``(num_splits, split_from)``, the CTAs from ``split_from`` on
    split ``num_splits`` ways (split_cta in gpu/common.cuh), or ``(1, ctas)`` for none. ``piece_blocks``: what a
    piece's partials cost beyond its share of the row, in blocks (:func:`forward_piece_blocks`).

    Equal CTAs run in waves of ``slots``, so a last wave of few CTAs leaves most SMs idle as long as a whole one
    (FlashAttention's kernels take the same waves: 2048 CTAs of the dense 16k forward at D = 128 on 132 SMs are
    15.5 waves and run as 16). Splitting the CTAs from the last whole wave or the one before into s slices each,
    every slice with its own fixed cost and partials to merge, can end sooner; where the wave model says a split
    saves at least TAIL_MIN_GAIN, this takes the one with the fewest pieces among those within TAIL_SLACK of the
    soonest end.
    """
    waves, rest = divmod(ctas, slots)
    whole = row_len + CTA_FIXED_BLOCKS  # a CTA's time, in key blocks
    base = (waves + (rest > 0)) * whole
    candidates = []  # (time, pieces, splits, split_from)
    for back in range(min(waves, 2)):  # the tail: the last partial wave, and maybe the whole one before it
        tail = rest + back * slots
        for splits in range(2, min(MAX_SPLITS, row_len // 2) + 1):
            pieces = tail * splits
            time = ((waves - back) * whole + math.ceil(pieces / slots) * (row_len / splits + CTA_FIXED_BLOCKS)
                    + pieces * piece_blocks + COMBINE_LAUNCH_BLOCKS)
            if time <= base * (1 - TAIL_MIN_GAIN):
                candidates.append((time, pieces, splits, ctas - tail))
    if not candidates:
        return 1, ctas
    best = min(c[0] for c in candidates)
    _, _, splits, split_from = min((c for c in candidates if c[0] <= best + TAIL_SLACK * base), key=lambda c: c[1])
    return splits, split_from


def forward_piece_blocks(tile_n: int) -> float:
    """A forward piece's partials in key blocks of ``tile_n`` keys: the time of PIECE_KEYS keys of its row."""
    return PIECE_KEYS / tile_n


def forward(q, k, v, plan: BlockMask, scale: float, out=None, *, num_splits: int | None = None, pack: int = 1,
            key_lens=None, split_from: int | None = None):
    """Block-sparse attention forward on CuPy arrays: softmax(scale * q k^T, masked by the plan) v.

    Parameters
    ----------
    q : cupy.ndarray (B, H, n_q, D), float16 or bfloat16
    k, v : cupy.ndarray (B, Hk, n_k, D), same dtype; H % Hk == 0 (query head h reads KV head h // (H // Hk))
        Any strides with the last dimension contiguous; base pointers and strides 16-byte aligned.
    plan : BlockMask
        Of shape (1 or B, 1 or H, n_q, n_k), compiled with ``tile_for(D, dtype)`` or the decode tile
        ``tile_for(D, dtype, rows=...)``. A graph plan's node order (``plan.perm``) is the kernels' to follow:
        q, k, v, out and lse stay in the caller's order, the kernels gather and scatter rows through it.
    scale : float
        Positive score scale (usually D ** -0.5).
    out : cupy.ndarray (B, H, n_q, D), optional
        Written in place (any aligned strides, e.g. a "bnhd" view); allocated when None.
    num_splits : int, optional
        Split each query block's key blocks over this many CTAs (1 to MAX_SPLITS) and merge the float32 partials
        exactly; default :func:`num_splits_for` the plan and the device, or on Hopper :func:`tail_splits_for` (the
        last CTAs only) where the plan's rows are of one length.
    split_from : int, optional
        With ``num_splits``: split only the CTAs from this one on in the plan's CTA order (0 to B * H / pack *
        n_mblocks; default 0, every CTA).
    pack : int
        GQA packing: each CTA serves ``pack`` query heads of one KV head, rows token-major; the plan must then be
        of shape (1 or B, 1, n_q * pack, n_k): the mask's rows each repeated ``pack`` times.
    key_lens : cupy.ndarray (B,) int32, optional
        Per batch the number of keys to see: keys ``j >= key_lens[b]`` are masked besides the plan (a KV cache's
        valid lengths; values past n_k count as n_k). Key blocks past the bound are not read. Runs the mma.sync
        kernel (``fwd_kernel``), on Hopper too; not for plans with a node order.

    Returns
    -------
    out : cupy.ndarray (B, H, n_q, D), q's dtype
    lse : cupy.ndarray (B, H, n_q), float32
        Natural-log log-sum-exp of the scaled, masked scores; -inf (with out 0) where a row sees no key.
    """
    cupy = import_cupy()
    if key_lens is not None:
        _check_key_lens(key_lens, q)
    launch = forward_launch(q, k, v, plan, scale, out, num_splits=num_splits, pack=pack,
                            bounded=key_lens is not None, split_from=split_from)
    with launch.device:
        if out is None:
            out = cupy.empty(launch.out_shape, dtype=launch.dtype)
        lse = cupy.empty(launch.lse_shape, dtype=np.float32)
        parts = [cupy.empty(shape, dtype=np.float32) for shape in launch.part_shapes]
        launch(cupy.cuda.get_current_stream().ptr, q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, lse.data.ptr,
               *(p.data.ptr for p in parts), key_lens=0 if key_lens is None else key_lens.data.ptr)
    return out, lse


def _check_key_lens(key_lens, q):
    """key_lens must be the (B,) int32 CuPy array the forward kernels read, on q's device."""
    cupy = import_cupy()
    if type(key_lens) is not cupy.ndarray or key_lens.dtype != np.int32 or key_lens.shape != (q.shape[0],):
        raise ValueError(f"key_lens must be an int32 array of shape ({q.shape[0]},) (one length per batch); got "
                         f"{type(key_lens).__name__} {getattr(key_lens, 'dtype', '')} {getattr(key_lens, 'shape', '')}")
    if not key_lens.flags.c_contiguous or key_lens.device.id != q.device.id:
        raise ValueError(f"key_lens must be contiguous and on q's device {q.device.id}; got device "
                         f"{key_lens.device.id}, strides {key_lens.strides}")


def forward_launch(q, k, v, plan: BlockMask, scale: float, out=None, *, num_splits: int | None = None,
                   pack: int = 1, bounded: bool = False, split_from: int | None = None) -> "_ForwardLaunch":
    """The checked launch of :func:`forward` for these arrays' shapes, strides, dtype and device (cached): call it
    with a stream and the data pointers of q, k, v, out, lse and the split partials (``part_shapes``), which the
    caller allocates (q, k, v and out with the strides given here), and with ``bounded`` that of ``key_lens``."""
    key = _launch_key(q, k, v, out, plan, scale, num_splits, split_from, pack, bounded)
    launch = _LAUNCHES.get(key) if key is not None else None
    if launch is None or launch.plan is not plan:
        launch = _ForwardLaunch(q, k, v, plan, scale, out, num_splits, pack, bounded, split_from)
        if key is not None:
            _LAUNCHES[key] = launch
            while len(_LAUNCHES) > 64:
                _LAUNCHES.popitem(last=False)
    return launch


_LAUNCHES: "collections.OrderedDict[tuple, _ForwardLaunch]" = collections.OrderedDict()


def _launch_key(q, k, v, out, plan, scale, num_splits, split_from, pack, bounded):
    """What a checked launch depends on besides the data pointers, or None where the full checks must run (not
    CuPy arrays, pointers off 16 bytes) or where nothing should be kept (a transient plan)."""
    cupy = import_cupy()
    arrays = (q, k, v) if out is None else (q, k, v, out)
    if not all(type(x) is cupy.ndarray for x in arrays) or any(x.data.ptr % 16 for x in arrays) or plan.transient:
        return None
    return ((id(plan), scale, num_splits, split_from, pack, bounded, sm90_enabled(), sources_key())
            + tuple((x.shape, x.strides, x.dtype, x.device.id) for x in arrays))


class _ForwardLaunch:
    """One forward configuration, checked once (check_launch, strides, splits): the kernels, their grids and every
    argument but the arrays. Calls are then a few allocations and one or two launches, cheap enough for decode.
    ``bounded``: calls pass per-batch key counts (``key_lens``)."""

    def __init__(self, q, k, v, plan, scale, out, num_splits, pack, bounded=False, split_from=None):
        cupy = import_cupy()
        pack = int(pack)
        if pack < 1:
            raise ValueError(f"pack must be a positive integer; got {pack}")
        ctype, tile, scale = check_launch(plan, scale, q, k, v, pack=pack, forward=True, out=out)
        B, H, n_q, head_dim = q.shape
        Hk, n_k = k.shape[1], k.shape[2]
        B_mask, H_mask = plan.shape[:2]
        if out is not None and out.shape != q.shape:
            raise ValueError(f"out has shape {out.shape}; expected q's {q.shape}")
        if bounded and plan.perm is not None:
            raise ValueError("per-batch key counts (cache_seqlens) need a plan without a node order (perm): they count "
                             "keys in the caller's order")
        self.plan, self.device_id, self.device = plan, q.device.id, cupy.cuda.Device(q.device.id)
        with q.device:
            self.sm90 = uses_sm90(head_dim, tile, self.device_id)
            if self.sm90:
                self.kernel, self.smem, _ = sm90_kernel(ctype, head_dim, MASK_MODES[plan.payload], self.device_id,
                                                        plan.perm is not None, tuple(tile))
                threads = sm90_threads(tile[0])
            else:
                config = fwd_configs(head_dim, self.device_id)[tile]
                threads = config[2] * 32
                self.kernel, self.smem = fwd_kernel(ctype, head_dim, config, MASK_MODES[plan.payload],
                                                    self.device_id, plan.perm is not None)
            ctas = plan.n_mblocks * B * (H // pack)
            if split_from is not None and num_splits is None:
                raise ValueError("split_from needs num_splits: the CTAs from split_from on are split num_splits ways")
            split_from = 0 if split_from is None else int(split_from)
            if not 0 <= split_from <= ctas:
                raise ValueError(f"split_from must lie in [0, {ctas}] (the launch's CTAs); got {split_from}")
            if num_splits is None:
                # a plan built on the device is not read back for this: its rows are at most n_nblocks long
                lengths = np.diff(plan.row_ptr, axis=-1) if plan.on_host and plan.nnz else None
                longest = plan.n_nblocks if not plan.on_host else 0 if lengths is None else int(lengths.max())
                num_splits = num_splits_for(ctas, longest, self.smem, multiprocessors(self.device_id),
                                            1 if self.sm90 else None)
                # rows of one length (dense plans) in waves of one CTA an SM (fwd_sm90's 384 or 512 threads and
                # their registers): split the last wave's CTAs; rows cut at run time (bounded) are not known here
                if (num_splits == 1 and self.sm90 and not bounded and lengths is not None
                        and lengths.min() == longest):
                    num_splits, split_from = tail_splits_for(ctas, longest, multiprocessors(self.device_id),
                                                             forward_piece_blocks(tile[1]))
            self.num_splits = int(num_splits)
            if not 1 <= self.num_splits <= MAX_SPLITS:
                raise ValueError(f"num_splits must lie in [1, {MAX_SPLITS}]; got {num_splits}")
            # CTAs from split_from on are split (split_cta, gpu/common.cuh): all of them, a tail or none
            self.split_from = ctas if self.num_splits == 1 else split_from
            self.tail = ctas - self.split_from
            out_like = cupy.empty(q.shape, dtype=q.dtype) if out is None else out
            strides = [element_strides(x, name, plan.perm is not None)
                       for name, x in (("q", q), ("k", k), ("v", v), ("out", out_like))]
            dp = device_plan(plan)
        self.out_shape, self.dtype = q.shape, q.dtype
        self.lse_shape = (B, H, n_q)
        # float32 partial O and LSE of each split CTA's tile rows; none without splits
        part_rows = self.num_splits * self.tail * tile[0]
        self.part_shapes = ((part_rows, head_dim), (part_rows,)) if self.tail else ()
        i32, i64 = np.int32, np.int64
        self.grid, self.block = (self.split_from + self.tail * self.num_splits, 1, 1), (threads, 1, 1)
        group_strides = (i32(H_mask if B_mask > 1 else 0), i32(1 if H_mask > 1 else 0))
        self.args = (
            *(i64(s) for triple in strides for s in triple),
            i32(H), i32(H // Hk), i32(pack), i32(B), i32(self.num_splits), i32(self.split_from), i32(n_q), i32(n_k),
            *group_strides, i32(plan.n_mblocks), i32(plan.n_nblocks),
            dp["row_ptr"], dp["col_idx"], dp["kind"], dp["m_order"], dp["m_levels"],
            dp["payload_idx"], dp["bit_pool"], dp["intervals"], dp["interval_minmax"], dp["perm"],
            np.float32(scale * math.log2(math.e)),
        )
        # fwd_sm90_kernel's tensor maps of K, V, Q and O (tma.cuh), in that order: plans with a node order gather
        # rows and take none, and Q's and O's rows go by the copy engine only where they are a head's tokens (pack 1;
        # O in 64-row boxes, a consumer's rows)
        self.maps = ()
        if self.sm90:
            if plan.perm is None:
                self.maps = (TensorMap(k.shape, strides[1], tile[1]), TensorMap(v.shape, strides[2], tile[1]))
                if pack == 1:
                    self.maps += (TensorMap(q.shape, strides[0], tile[0]), TensorMap(q.shape, strides[3], 64))
            self.args += (*(m.slot for m in self.maps), *((ctypes.c_uint8 * MAP_BYTES)(),) * (4 - len(self.maps)))
        with q.device:
            self.fwd = Launcher(self.kernel, self.grid, self.block, self.smem, 8, self.args)  # 8 arrays a call
            if self.tail:
                rows, warps = self.tail * tile[0], 4  # the split CTAs' tile rows; COMBINE_WARPS in fwd.cu
                self.combine = Launcher(
                    combine_kernel(ctype, head_dim, self.device_id), ((rows + warps - 1) // warps, 1, 1),
                    (warps * 32, 1, 1), 0, 4,
                    (*(i64(s) for s in strides[3]), i32(H), i32(pack), i32(self.num_splits), i32(self.split_from),
                     i32(self.tail), i32(tile[0]), i32(n_q), *group_strides, i32(plan.n_mblocks), dp["m_order"],
                     dp["m_levels"], dp["perm"]))

    def rebind(self, plan):
        """Run ``plan``, laid out as this launch's plan (``plans.rebind``), from now on."""
        rebind([self.fwd] + ([self.combine] if self.tail else []), self.plan, plan)
        self.plan = plan

    def __call__(self, stream: int, q: int, k: int, v: int, out: int, lse: int, o_part: int = 0, lse_part: int = 0,
                 key_lens: int = 0):
        """Launch on ``stream`` over the arrays at these device addresses (the split partials only when
        CTAs are split, ``part_shapes``; key_lens, 0 for none, only on a ``bounded`` launch)."""
        with self.device:
            for tensor_map, address in zip(self.maps, (k, v, q, out)):
                tensor_map.point_at(address)
            self.fwd(stream, q, k, v, out, lse, o_part, lse_part, key_lens)
            if self.tail:
                self.combine(stream, o_part, lse_part, out, lse)
