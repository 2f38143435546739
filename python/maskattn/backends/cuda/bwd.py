"""CUDA backend, backward: the kernels of ``gpu/bwd.cu`` (and ``gpu/bwd_sm90.cu``) through CuPy, and their typed
launch wrapper.

This module owns the backward kernels' configurations (:func:`bwd_config`, :func:`bwd_smem_bytes`) and
:func:`backward`, which checks what CuPy would pass blindly (dtypes, shapes, strides, alignment, devices), allocates
the outputs and float32 scratch, and launches, in order: the preprocess (delta = rowsum(dO * O), LSE in log2 units),
the column-parallel dK/dV kernel over the plan's backward CSR, and either the deterministic dQ kernel over the
forward CSR (default) or, with ``deterministic=False``, float32 atomics into a dQ accumulator from the dK/dV kernel
followed by a conversion. On Hopper (compute capability 9.0), wherever the forward runs ``fwd_sm90.cu`` (every head
dim of the training tile: 128 x 128 up to 128, 128 x 64 at 192 and 256), ``bwd_sm90.cu``'s one pass runs instead
(wgmma, a producer warpgroup fed by the copy engine and two consumers, compiled for ``sm_90a`` by
:func:`.kernels.sm90_function`): its dK/dV kernel also adds each step's dQ into an accumulator by bulk reductions,
then the conversion. The accumulator holds float32 with ``deterministic=False``; deterministic, it holds 32-bit
integers, each row scaled by a power of two from a bound on its partial sums (``bwd_kv_bound_kernel`` bounds K and V
first, the preprocess each row), so that their exact sum does not depend on the order of the additions.
``MASKATTN_SM90=0`` in the environment keeps the mma.sync kernels, as for the forward.

The backward reads the same plan as the forward (``kernels.tile_for``): it steps through the plan's query blocks BM rows
at a time and through its key blocks BN keys at a time, so no second plan is compiled. Plans, sources, dtype rules,
stride checks and the device's shared-memory limit come from :mod:`.kernels` and :mod:`.launch`.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ...plan import BlockMask
from .fwd import tail_splits_for
from .kernels import (MASK_MODES, cached_per_sources, import_cupy, kernel_source, nvrtc_options, multiprocessors,
                      sm90_function, sm90_tile, sm90_tile_n, smem_optin, source_dir, sw128_columns)
from .kernels import uses_sm90 as forward_uses_sm90
from .launch import Launcher, check_launch, element_strides
from .plans import device_plan, rebind
from .tma import MAP_BYTES, TensorMap

# A one-pass piece's dK and dV partials (float32, written by the piece and read by the merge: 16 bytes a key and
# column at about 3 TB/s) against one block of its walk (a query block of 128 rows: five products, 1280 flops a key
# and column, at about 475 TFLOP/s over 132 SMs), for tail_splits_for
BWD_PIECE_BLOCKS = 0.015

__all__ = ["bwd_config", "bwd_smem_bytes", "bwd_sm90_smem_bytes", "uses_sm90", "backward"]

_PRE_ROWS = 64          # rows per CTA of bwd_preprocess_kernel (PRE_ROWS in bwd.cu)
_CONVERT_THREADS = 256  # CONVERT_THREADS in bwd_common.cuh
_SM90_THREADS = 384     # sm90_bwd::THREADS in bwd_sm90.cu (both kernels): one producer, two consumer warpgroups


def bwd_config(head_dim: int, tile, deterministic: bool = True) -> dict:
    """The backward kernels' step sizes for a head dim and the plan's tile.

    Returns
    -------
    dict with
        ``bm``: query rows per step of the dK/dV kernel (it keeps dK and dV of its keys in registers; with atomics
        and head dims from 128 it also holds the dQ product and takes 32-row steps to stay within 255 registers);
        ``dsplit``: warps that share 16 keys, splitting dK and dV by columns (head dims over 128);
        ``bn``: keys per step of the dQ kernel;
        ``dkdv_threads``, ``dq_threads``.
        Registers from ``nvcc -arch=sm_90 -Xptxas -v`` (deterministic dK/dV, atomic dK/dV, dQ), no spills in any
        configuration: d=64: 194-198 / 199-202 / 167-176, d=128: 248-255 / 225-240 / 202-207, d=256: 255 / 238-240 /
        241-244.
    """
    tile_m, tile_n = tile
    dsplit = 2 if head_dim > 128 else 1
    bm = 32 if (not deterministic and head_dim >= 128) else 64
    bn = min(tile_n, 32 if head_dim > 192 else 64)
    if tile_m % bm or tile_n % 16 or tile_n % bn:
        raise ValueError(f"tile {tile} does not split into the backward's steps (bm={bm}, bn={bn})")
    return {"bm": bm, "dsplit": dsplit, "bn": bn, "dkdv_threads": tile_n // 16 * dsplit * 32,
            "dq_threads": tile_m * 2}


def bwd_smem_bytes(head_dim: int, tile, deterministic: bool = True) -> tuple[int, int]:
    """Dynamic shared memory of (the dK/dV kernel, the dQ kernel); rows padded by 8 elements as in common.cuh."""
    tile_m, tile_n = tile
    cfg = bwd_config(head_dim, tile, deterministic)
    row = (head_dim + 8) * 2
    bm, bn = cfg["bm"], cfg["bn"]
    dkdv = (2 * tile_n + 4 * bm) * row + 4 * bm * 4 + (0 if deterministic else tile_n * (bm + 8) * 2)
    dq = (2 * tile_m + 4 * bn) * row
    return dkdv, dq


def sm90_runs(head_dim: int, mask_mode: str, perm: bool, deterministic: bool) -> bool:
    """RUNS<D, MASK, PERM, FIXED> of bwd_sm90.cu: 80-row steps over runs of consecutive query blocks, dQ computed
    transposed (FlashAttention-3's non-causal D = 128 step), for plans without bit tiles or node order, not in fixed
    point; at D = 96 for plans without partial tiles only."""
    return (((head_dim == 128 and mask_mode != "MASK_BITS") or (head_dim == 96 and mask_mode == "MASK_NONE"))
            and not perm and not deterministic)


def sm90_splits(head_dim: int, mask_mode: str) -> bool:
    """SPLITS<D, MASK> of bwd_sm90.cu: whether a launch may split its last wave's CTAs (plans without partial tiles,
    from head dim 96)."""
    return mask_mode == "MASK_NONE" and head_dim > 64


def sm90_step_rows(head_dim: int, runs: bool = False) -> int:
    """STEP_ROWS<D, RUNS> of bwd_sm90.cu: the query rows of a dK/dV step, 80 with :func:`sm90_runs`, else 128 where
    the tiles are one 64-column block wide (head dims 32 and 64), else 64."""
    return 80 if runs else 128 if sw128_columns(head_dim) == 64 else 64


def bwd_sm90_smem_bytes(head_dim: int, runs: bool = False) -> int:
    """BWD_SM90_SMEM_BYTES<D, RUNS> of bwd_sm90.cu: alignment slack, K and V (a key block: 128 rows, 64 from head dim
    192), two stages of Q and dO (a step's rows each, :func:`sm90_step_rows`), two buffers of dS^T (key block x step
    rows) and, wide, of P^T, the consumers' 4-byte chunks of a step's dQ (64 rows x D at 128-row steps, with runs
    the step's rows x width / 2, else 64 x width / 2; none at 256, which stages them in the step's tiles), two stages
    of the step's LSE and delta (floats) and, without runs, of dQ exponents (bytes), up to D = 128 and without runs
    two stages of a bit tile's step rows (BITS_STAGED), the step descriptions and mbarriers (width: the tiles' padded
    D, sw128_columns)."""
    width, wide, keys = sw128_columns(head_dim), head_dim > 128, sm90_tile_n(head_dim)
    rows = sm90_step_rows(head_dim, runs)
    ds_buffers = 2 + 2 * wide
    dq_chunks = 2 * (rows if runs else 64) * (head_dim if rows == 128 else width // 2) * 4 if head_dim != 256 else 0
    bits = 0 if wide or runs else 2 * rows * keys // 8
    return (1024 + (2 * keys + 4 * rows) * width * 2 + ds_buffers * keys * rows * 2 + dq_chunks
            + 2 * (2 * 4 + (not runs)) * rows + bits + 128)


def dkdv_row_table_bytes(head_dim: int) -> int:
    """The dK/dV kernel's producer row table for node orders (producer_rows<BM> of bwd_sm90.cu, after its 128-byte
    tail): two steps of rows."""
    return 2 * sm90_step_rows(head_dim) * 4


def uses_sm90(head_dim: int, tile, device_id: int) -> bool:
    """Whether the backward runs bwd_sm90.cu's one pass (wgmma, dQ by bulk reductions): where the forward runs
    fwd_sm90.cu on the training tile, every head dim."""
    return tuple(tile) == sm90_tile(head_dim) and forward_uses_sm90(head_dim, tuple(tile), device_id)


def kernel_names(ctype: str, head_dim: int, tile, mask_mode: str, deterministic: bool, sm90: bool = False,
                 perm: bool = False) -> dict:
    """The instantiations one backward configuration launches, by role: bwd.cu's (the dK/dV kernel, then the dQ
    kernel where deterministic, else the conversion of its float32 atomics), or where ``sm90`` bwd_sm90.cu's one pass
    and conversion (deterministic: fixed point, after bwd.cu's K and V bound); ``perm``: those for plans with a node
    order."""
    T, D = f"maskattn::{ctype}", head_dim
    mask, p = f"maskattn::{mask_mode}", str(perm).lower()
    names = {"pre": f"maskattn::bwd_preprocess_kernel<{T}, {D}>"}
    if sm90:
        fixed = str(deterministic).lower()
        if deterministic:
            names["bound"] = f"maskattn::bwd_kv_bound_kernel<{T}, {D}>"
        runs = str(sm90_runs(head_dim, mask_mode, perm, deterministic)).lower()
        names["dkdv"] = f"maskattn::bwd_dkdv_sm90_kernel<{T}, {D}, {mask}, {p}, {fixed}>"
        names["convert"] = f"maskattn::bwd_dq_convert_sm90_kernel<{T}, {D}, {fixed}, {runs}>"
        return names
    cfg = bwd_config(head_dim, tile, deterministic)
    names["dkdv"] = (f"maskattn::bwd_dkdv_kernel<{T}, {D}, {tile[0]}, {tile[1]}, {mask}, {cfg['bm']}, {cfg['dsplit']}, "
                     f"{str(not deterministic).lower()}, {p}>")
    if deterministic:
        names["dq"] = f"maskattn::bwd_dq_kernel<{T}, {D}, {tile[0]}, {tile[1]}, {mask}, {cfg['bn']}, {p}>"
    else:
        names["convert"] = f"maskattn::bwd_dq_convert_kernel<{T}, {D}>"
    return names


def _smem_bytes(head_dim: int, tile, deterministic: bool, sm90: bool, runs: bool = False) -> dict:
    """Dynamic shared memory of each kernel a backward launches, by role (without the row tables of node orders;
    ``runs``: :func:`sm90_runs`)."""
    if sm90:
        return {"pre": 0, **({"bound": 0} if deterministic else {}), "dkdv": bwd_sm90_smem_bytes(head_dim, runs),
                "convert": 0}
    dkdv, dq = bwd_smem_bytes(head_dim, tile, deterministic)
    return {"pre": 0, "dkdv": dkdv, **({"dq": dq} if deterministic else {"convert": 0})}


@cached_per_sources
def _kernels(ctype: str, head_dim: int, tile: tuple[int, int], mask_mode: str, deterministic: bool,
             device_id: int, sm90: bool = False, perm: bool = False):
    """The kernels a backward launches, {role: (kernel, smem bytes)}: one RawModule per configuration for bwd.cu's,
    and with ``sm90`` the dK/dV kernel and conversion of bwd_sm90.cu through :func:`maskattn.sm90_function` (with
    ``perm``, for a plan with a node order, the instantiations that follow it and the producer's row table,
    ``dkdv_row_table_bytes``)."""
    cupy = import_cupy()
    src = source_dir()
    names = kernel_names(ctype, head_dim, tile, mask_mode, deterministic, sm90, perm)
    from_sm90 = tuple(key for key, name in names.items() if "_sm90_kernel<" in name)  # bwd_sm90.cu's
    from_bwd = {key: name for key, name in names.items() if key not in from_sm90}
    module = cupy.RawModule(code=kernel_source("bwd.cu"), options=nvrtc_options(src),
                            name_expressions=tuple(from_bwd.values()))
    more = {"dkdv": dkdv_row_table_bytes(head_dim)} if perm else {}
    smem = {key: size + (more.get(key, 0) if key in from_sm90 else 0)
            for key, size in _smem_bytes(head_dim, tile, deterministic, sm90,
                                         sm90_runs(head_dim, mask_mode, perm, deterministic)).items()}
    kernels = {}
    if sm90:
        kernels.update({key: (sm90_function("bwd_sm90.cu", names[key], smem[key], device_id)[0], smem[key])
                        for key in from_sm90})
    for key, name in from_bwd.items():
        kernel = module.get_function(name)
        if smem[key] > 48 * 1024:
            kernel.max_dynamic_shared_size_bytes = smem[key]
        kernels[key] = (kernel, smem[key])
    return kernels


def merge_kernel_name(ctype: str, head_dim: int) -> str:
    """bwd_sm90.cu's merge of split CTAs' dK and dV pieces."""
    return f"maskattn::bwd_dkdv_merge_sm90_kernel<maskattn::{ctype}, {head_dim}>"


@cached_per_sources
def _merge_kernel(ctype: str, head_dim: int, device_id: int):
    """:func:`merge_kernel_name`'s kernel, compiled where a launch splits its last wave."""
    return sm90_function("bwd_sm90.cu", merge_kernel_name(ctype, head_dim), 0, device_id)[0]


def backward(do, q, k, v, out, lse, plan: BlockMask, scale: float, deterministic: bool = True, *, dq=None, dk=None,
             dv=None):
    """Gradients of block-sparse attention with respect to q, k and v, on CuPy arrays.

    Parameters
    ----------
    do : cupy.ndarray (B, H, n_q, D)
        Gradient of the loss with respect to ``out``; q's dtype.
    q, k, v, plan, scale :
        As given to :func:`maskattn.backends.cuda.fwd` (float16 or bfloat16, logical "bhnd" views with the last
        dimension contiguous and 16-byte aligned strides; the plan compiled with ``tile_for(D, dtype)``).
    out : cupy.ndarray (B, H, n_q, D)
        The forward's output.
    lse : cupy.ndarray (B, H, n_q), float32
        The forward's natural-log LSE; -inf marks rows that see no key (any strides).
    deterministic : bool
        True (default): bit-identical from run to run: on Hopper dQ summed in fixed point by the one pass, elsewhere
        by its own kernel over the forward CSR. False: dQ summed in float32 by the dK/dV kernel (the order of the
        additions varies).
    dq, dk, dv : cupy.ndarray, optional
        Written in place (shapes of q, k, v, their dtype, any aligned strides); allocated when None.

    Returns
    -------
    dq : cupy.ndarray like q
    dk, dv : cupy.ndarray like k
        Summed over the query heads of each KV head. Rows that see no key and keys no row sees get 0.
    """
    cupy = import_cupy()
    if not isinstance(q, cupy.ndarray):
        raise TypeError(f"q must be a cupy.ndarray; got {type(q).__name__}")
    with q.device:
        dq = cupy.empty(q.shape, dtype=q.dtype) if dq is None else dq
        dk = cupy.empty(k.shape, dtype=q.dtype) if dk is None else dk
        dv = cupy.empty(k.shape, dtype=q.dtype) if dv is None else dv
        launch = backward_launch(do, q, k, v, out, lse, plan, scale, dq, dk, dv, deterministic=deterministic)
        scratch = [cupy.empty(shape, dtype=np.float32) for shape in launch.scratch_shapes]
        launch(cupy.cuda.get_current_stream().ptr, *(x.data.ptr for x in (do, q, k, v, out, lse, dq, dk, dv)),
               *(x.data.ptr for x in scratch))
    return dq, dk, dv


def backward_launch(do, q, k, v, out, lse, plan: BlockMask, scale: float, dq, dk, dv, *,
                    deterministic: bool = True) -> "_BackwardLaunch":
    """The checked launch of :func:`backward` for these arrays' shapes, strides, dtype and device: call it with a
    stream, the device addresses of do, q, k, v, out, lse, dq, dk, dv and of float32 scratch arrays of
    ``scratch_shapes`` (any contents), which the caller allocates with the strides given here."""
    cupy = import_cupy()
    ctype, tile, scale = check_launch(plan, scale, q, k, v, do=do, out=out, dq=dq, dk=dk, dv=dv)
    B, H, n_q, head_dim = q.shape
    Hk, n_k = k.shape[1], k.shape[2]
    B_mask, H_mask = plan.shape[:2]
    if do.shape != q.shape or out.shape != q.shape:
        raise ValueError(f"do and out must have q's shape {q.shape}; got do {do.shape}, out {out.shape}")
    for name, x, shape in (("dq", dq, q.shape), ("dk", dk, k.shape), ("dv", dv, k.shape)):
        if x.shape != shape:
            raise ValueError(f"{name} has shape {x.shape}; expected {shape}")
    if not isinstance(lse, cupy.ndarray) or lse.dtype != np.float32 or lse.shape != (B, H, n_q):
        what = f"{type(lse).__name__} {getattr(lse, 'dtype', '')} {getattr(lse, 'shape', '')}"
        raise TypeError(f"lse must be a float32 cupy.ndarray of shape {(B, H, n_q)}; got {what}")
    if lse.device.id != q.device.id:
        raise ValueError(f"lse is on device {lse.device.id}; q is on device {q.device.id}")
    return _BackwardLaunch(ctype, tile, scale, bool(deterministic), plan, (B, H, Hk, n_q, n_k, head_dim),
                           {name: element_strides(x, name, plan.perm is not None)
                            for name, x in (("do", do), ("q", q), ("k", k), ("v", v), ("out", out), ("dq", dq),
                                            ("dk", dk), ("dv", dv))},
                           tuple(s // 4 for s in lse.strides), q.device.id)


class _BackwardLaunch:
    """One backward configuration, checked once: its kernels ((fixed point) the K and V bound, preprocess, dK/dV, then
    dQ or the accumulated dQ's conversion), grids and every argument but the arrays, launched through ``Launcher``."""

    def __init__(self, ctype, tile, scale, deterministic, plan, dims, st, lse_strides, device_id):
        cupy = import_cupy()
        B, H, Hk, n_q, n_k, head_dim = dims
        B_mask, H_mask = plan.shape[:2]
        self.device = cupy.cuda.Device(device_id)
        with self.device:
            limit = smem_optin(device_id)
            sm90 = uses_sm90(head_dim, tile, device_id)
            # dQ by its own pass (bwd.cu's deterministic kernels), else accumulated by the dK/dV kernel, in fixed
            # point where deterministic (bwd_sm90.cu's)
            self.sm90, self.dq_pass, self.fixed = sm90, deterministic and not sm90, deterministic and sm90
            runs = sm90 and sm90_runs(head_dim, MASK_MODES[plan.payload], plan.perm is not None, deterministic)
            need = max(_smem_bytes(head_dim, tile, deterministic, sm90, runs).values())
            if need > limit:
                raise ValueError(f"the backward for head_dim {head_dim} needs {need} bytes of shared memory per "
                                 f"block; this device allows {limit}")
            cfg = bwd_config(head_dim, tile, deterministic)
            kernels = _kernels(ctype, head_dim, tile, MASK_MODES[plan.payload], deterministic, device_id,
                               sm90, plan.perm is not None)
            dp = device_plan(plan)
            i32, i64, f32 = np.int32, np.int64, np.float32
            n_q_pad = plan.n_mblocks * tile[0]
            # lse_log2 and delta; without a dQ pass the dQ accumulator (bwd_sm90.cu's rows of whole 64-column blocks,
            # garbage past head_dim) and, in fixed point, the K and V bounds after it (2 per batch and KV head), all
            # zeroed before each launch, and the rows' exponents (a byte each)
            self.scratch_shapes = [(B * H, n_q_pad), (B * H, n_q_pad)]
            # the one pass's last wave split (tail_splits_for, as the forward's; sm90_splits): key blocks from
            # split_from on walk num_splits slices of their columns, their dK and dV pieces in float32 after the
            # accumulator; only where every column has one length (the kernel takes one slice for every head)
            ctas = B * Hk * plan.n_nblocks
            self.num_splits, self.split_from = 1, ctas
            split = sm90 and sm90_splits(head_dim, MASK_MODES[plan.payload]) and plan.on_host and plan.nnz
            lengths = np.diff(plan.col_ptr, axis=-1) if split else None
            if lengths is not None and lengths.min() == lengths.max():
                self.num_splits, self.split_from = tail_splits_for(
                    ctas, int(lengths.max()) * (H // Hk), multiprocessors(device_id), BWD_PIECE_BLOCKS)
            self.tail = ctas - self.split_from if self.num_splits > 1 else 0
            if not self.dq_pass:
                self.accum_elements = B * H * n_q_pad * (sw128_columns(head_dim) if sm90 else head_dim)
                self.accum_bytes = (self.accum_elements + (2 * B * Hk if self.fixed else 0)) * 4
                self.part_offset = -(-self.accum_bytes // 16) * 4  # floats, 16-byte aligned
                pieces = self.num_splits * self.tail * 2 * tile[1] * head_dim
                self.scratch_shapes.append((self.part_offset + pieces if self.tail else self.accum_bytes // 4,))
            if self.fixed:
                self.scratch_shapes.append((B * H, n_q_pad // 4))
            group_sb, group_sh = i32(H_mask if B_mask > 1 else 0), i32(1 if H_mask > 1 else 0)
            # bwd_sm90.cu's tensor maps (tma.cuh): Q and dO in steps (sm90_step_rows), K and V in key blocks; plans
            # with a node order gather rows and take none
            self.maps = {}
            if sm90 and plan.perm is None:
                step = sm90_step_rows(head_dim, runs)
                self.maps = {name: TensorMap(shape, st[name], rows) for name, shape, rows in (
                    ("q", (B, H, n_q, head_dim), step), ("do", (B, H, n_q, head_dim), step),
                    ("k", (B, Hk, n_k, head_dim), tile[1]), ("v", (B, Hk, n_k, head_dim), tile[1]))}
            no_map = (ctypes.c_uint8 * MAP_BYTES)()

            def maps(*names, hopper=sm90):  # the Hopper kernels' last parameters
                return tuple(self.maps[name].slot if self.maps else no_map for name in names) if hopper else ()
            scale_log2 = f32(scale * math.log2(math.e))
            strides = lambda *names: (i64(s) for name in names for s in st[name])  # noqa: E731

            if self.fixed:
                kernel, _ = kernels["bound"]
                # arrays: k, v, kv_bound
                self.bound = Launcher(kernel, (-(-n_k // _PRE_ROWS), B * Hk, 1), (_PRE_ROWS * 4, 1, 1), 0, 3,
                                      (*strides("k", "v"), i32(Hk), i32(n_k)))
            kernel, _ = kernels["pre"]
            # arrays: do, out, lse, lse_log2, delta, kv_bound, dq_exp (fixed point)
            self.pre = Launcher(kernel, (-(-n_q_pad // _PRE_ROWS), B * H, 1), (_PRE_ROWS * 4, 1, 1), 0, 7, (
                *strides("do", "out"), *(i64(s) for s in lse_strides), i32(H), i32(H // Hk), i32(n_q), i32(n_q_pad),
                dp["perm"]))
            kernel, smem = kernels["dkdv"]
            # arrays: q, k, v, do, dk, dv, dq_accum, lse_log2, delta, dq_exp
            # bwd_sm90.cu's grid is one-dimensional (split_cta), bwd.cu's (head groups, key blocks)
            grid = (self.split_from + self.tail * self.num_splits, 1, 1) if sm90 else (B * Hk, plan.n_nblocks, 1)
            splits = (i32(B), i32(self.num_splits), i32(self.split_from), i64(self.part_offset)) if sm90 else ()
            self.dkdv = Launcher(
                kernel, grid, (_SM90_THREADS if sm90 else cfg["dkdv_threads"], 1, 1), smem, 10,
                (*strides("q", "k", "v", "do", "dk", "dv"),
                 i32(H), i32(H // Hk), i32(Hk), i32(n_q), i32(n_k), i32(n_q_pad),
                 group_sb, group_sh, i32(plan.n_mblocks), i32(plan.n_nblocks),
                 dp["col_ptr"], dp["row_idx"], dp["bwd_kind"], dp["n_order"], dp["n_levels"],
                 dp["bwd_payload_idx"], dp["bit_pool"], dp["intervals"], dp["interval_minmax"], dp["perm"],
                 scale_log2, f32(scale), *splits, *maps("q", "do", "k", "v")))
            if self.tail:
                kernel = _merge_kernel(ctype, head_dim, device_id)
                # arrays: dq_accum (the pieces after it), dk, dv
                chunks = self.tail * tile[1] * head_dim // 4
                self.merge = Launcher(
                    kernel, (-(-chunks // _CONVERT_THREADS), 1, 1), (_CONVERT_THREADS, 1, 1), 0, 3,
                    (i64(self.part_offset), *strides("dk", "dv"), i32(Hk), i32(H // Hk), i32(n_k), group_sb, group_sh,
                     i32(plan.n_nblocks), i32(self.split_from), i32(self.tail), i32(self.num_splits), dp["n_order"],
                     dp["n_levels"], dp["perm"]))
            if self.dq_pass:
                kernel, smem = kernels["dq"]
                # arrays: q, k, v, do, dq, lse_log2, delta
                self.dq = Launcher(
                    kernel, (B * H, plan.n_mblocks, 1), (cfg["dq_threads"], 1, 1), smem, 7,
                    (*strides("q", "k", "v", "do", "dq"),
                     i32(H), i32(H // Hk), i32(n_q), i32(n_k), i32(n_q_pad),
                     group_sb, group_sh, i32(plan.n_mblocks), i32(plan.n_nblocks),
                     dp["row_ptr"], dp["col_idx"], dp["kind"], dp["m_order"], dp["m_levels"],
                     dp["payload_idx"], dp["bit_pool"], dp["intervals"], dp["interval_minmax"], dp["perm"],
                     scale_log2, f32(scale)))
            else:
                kernel, _ = kernels["convert"]
                chunks = n_q * (head_dim // 8)
                # arrays: dq_accum, (bwd_sm90.cu's) dq_exp, dq
                self.convert = Launcher(
                    kernel, (-(-chunks // _CONVERT_THREADS), B * H, 1), (_CONVERT_THREADS, 1, 1), 0, 3 if sm90 else 2,
                    (*strides("dq"), i32(H), i32(n_q), i32(n_q_pad), f32(scale), dp["perm"]))
        self.plan = plan  # its device arrays must outlive the launchers

    def rebind(self, plan):
        """Run ``plan``, laid out as this launch's plan (``plans.rebind``), from now on."""
        rebind([self.pre, self.dkdv, self.dq if self.dq_pass else self.convert] + ([self.merge] if self.tail else []),
               self.plan, plan)
        self.plan = plan

    def __call__(self, stream: int, do: int, q: int, k: int, v: int, out: int, lse: int, dq: int, dk: int, dv: int,
                 lse_log2: int, delta: int, dq_accum: int = 0, dq_exp: int = 0):
        """Launch on ``stream`` over the arrays at these device addresses (the scratch arrays of ``scratch_shapes``
        after delta)."""
        with self.device:
            for name, address in (("q", q), ("do", do), ("k", k), ("v", v)):
                if name in self.maps:
                    self.maps[name].point_at(address)
            if not self.dq_pass:
                import_cupy().cuda.runtime.memsetAsync(dq_accum, 0, self.accum_bytes, stream)
            kv_bound = dq_accum + 4 * self.accum_elements if self.fixed else 0
            if self.fixed:
                self.bound(stream, k, v, kv_bound)
            self.pre(stream, do, out, lse, lse_log2, delta, kv_bound, dq_exp)
            self.dkdv(stream, q, k, v, do, dk, dv, dq_accum, lse_log2, delta, dq_exp)
            if self.tail:
                self.merge(stream, dq_accum, dk, dv)
            if self.dq_pass:
                self.dq(stream, q, k, v, do, dq, lse_log2, delta)
            else:
                self.convert(stream, dq_accum, *((dq_exp,) if self.sm90 else ()), dq)
