"""CUDA backend: the block-sparse flash-attention kernels of ``gpu/*.cu`` through CuPy, and the plans they read.

This module owns the kernels' configurations (:func:`tile_for`), the device copies of a :class:`BlockMask`
(:func:`device_plan`), the split-KV heuristic (:func:`num_splits_for`) and typed launch wrappers (:func:`forward`)
that check what CuPy would pass blindly: dtypes, shapes, strides, alignment and devices. Inputs are CuPy arrays in
logical "bhnd" order, possibly strided views (``docs/internals.md``). CuPy is imported on first use, so ``maskattn``
imports without it.

Kernels are compiled by NVRTC from the installed sources (``importlib.resources``, ``-I`` the source folder), one
``RawModule`` per configuration with an explicit name expression, memoised per (kernel, dtype, head dim, tile,
mask mode, device); CuPy compiles for the device's own architecture (``-arch=sm_90`` on an H100) and keeps the
cubins in its on-disk cache. On Hopper (compute capability 9.0) the forward at head dims 64 and 128 with the
128 x 128 training tile runs ``fwd_sm90.cu`` instead (wgmma, a producer warpgroup and two consumers), which needs
the ``sm_90a`` target: CuPy always adds its own ``-arch``, so that one is compiled by NVRTC directly, once per
process (about a second per configuration). ``MASKATTN_SM90=0`` in the environment keeps the mma.sync kernel.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import importlib.resources
import math
import os

import numpy as np

from .plan import PLAN_ARRAYS, BlockMask

__all__ = ["HEAD_DIMS", "DECODE_ROWS", "MAX_SPLITS", "tile_for", "device_plan", "num_splits_for", "forward",
           "forward_launch"]

HEAD_DIMS = (32, 64, 96, 128, 192, 256)

# Per head dim, forward configurations (tile_m, tile_n, warps, K/V stages) in order of preference; the first whose
# shared memory fits the device is used. Each warp owns tile_m / warps query rows: 16 here (32-row warps, e.g.
# (128, 64, 4), are correct too but spill a little and were no faster on the H100). `nvcc -arch=sm_90 -Xptxas -v`,
# bf16, registers for mask none / intervals / bits, no spills; shared memory per CTA:
#   32: 133/127/134, 51200 B   64: 182/173/174, 92160 B   96: 222/238/230, 133120 B
#   128: 242/246/242, 174080 B   192 (tile_n 64): 216/226/220, 153600 B   256 (tile_n 64): 255/250/250, 202752 B
_FWD_CONFIGS = {
    32: ((128, 128, 8, 2),),
    64: ((128, 128, 8, 2),),
    96: ((128, 128, 8, 2),),
    128: ((128, 128, 8, 2), (128, 64, 8, 2)),
    192: ((128, 64, 8, 2),),
    256: ((128, 64, 8, 2),),
}
# Few query rows (decode, tree verification, GQA-packed tokens), forward only (the backward takes the training tiles
# above); for a plan's rows, the first that holds them and fits the device. Up to 16 rows (single-token decode with
# GQA packing): 16 x 128 tiles whose 8 warps split each key block (fwd.cu's key warps, 16 keys each), so that all of
# them compute: 3-4% faster than 64 x 64 tiles, where one warp holds every row (docs/performance.md); with three K/V
# stages where they fit (one CTA per SM streams two key blocks ahead), else two. Up to 64 rows (tree verification):
# 64 x 64 tiles, 4 warps over the rows, two CTAs per SM.
# Registers (bf16, bits, sm_90): (16, 128) d=64 116, d=128 161; (64, 64) d=64 143, d=128 206.
_DECODE_CONFIGS = ((16, 128, 8, 3), (16, 128, 8, 2), (64, 64, 4, 2))
DECODE_ROWS = max(config[0] for config in _DECODE_CONFIGS)
MAX_SPLITS = 32  # MAX_SPLITS in fwd.cu: the combine kernel gives each split one lane
_SM90_SMEM_OPTIN = 232448  # bytes of shared memory a block may opt into on sm_90
_SM90_HEAD_DIMS = (64, 128)  # fwd_sm90.cu's instantiations, at 128 x 128 tiles
_SM90_THREADS = 384  # sm90::THREADS: one producer and two consumer warpgroups
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CUfunction_attribute in cuda.h
_MASK_MODES = {"none": "MASK_NONE", "intervals": "MASK_INTERVALS", "bits": "MASK_BITS"}


def _cupy():
    try:
        import cupy
    except ImportError as e:
        raise ImportError("the CUDA backend needs CuPy: pip install 'maskattn[cuda12]' or 'maskattn[cuda13]'") from e
    return cupy


def _kernel_type(dtype) -> str:
    """The kernel's storage type for a NumPy / CuPy dtype: half_t or bf16_t."""
    # by name: np.dtype("bfloat16") only resolves once ml_dtypes has been imported
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name == "float16":
        return "half_t"
    if name == "bfloat16":
        return "bf16_t"
    raise TypeError(f"the CUDA kernels take float16 or bfloat16; got {dtype}")


def _check_head_dim(head_dim) -> int:
    if int(head_dim) not in HEAD_DIMS:
        raise ValueError(f"head_dim is {head_dim}; supported: {', '.join(map(str, HEAD_DIMS))}")
    return int(head_dim)


def fwd_smem_bytes(head_dim: int, config) -> int:
    """Dynamic shared memory of the forward kernel: Q plus the stages of K and V, rows padded by 8 elements."""
    tile_m, tile_n, _, stages = config
    return (tile_m + 2 * stages * tile_n) * (head_dim + 8) * 2


@functools.lru_cache(maxsize=None)
def _smem_optin(device_id: int | None) -> int:
    if device_id is None:
        return _SM90_SMEM_OPTIN
    cupy = _cupy()
    return int(cupy.cuda.Device(device_id).attributes["MaxSharedMemoryPerBlockOptin"])


def _current_device() -> int | None:
    try:
        cupy = _cupy()
        return cupy.cuda.Device().id if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # no CuPy or no driver: plan for an sm_90 device
        return None


def _fwd_config(head_dim: int, device: int | None) -> tuple[int, int, int, int]:
    """The training configuration: the first of _FWD_CONFIGS whose shared memory the device allows."""
    limit = _smem_optin(device)
    for config in _FWD_CONFIGS[head_dim]:
        if fwd_smem_bytes(head_dim, config) <= limit:
            return config
    need = min(fwd_smem_bytes(head_dim, c) for c in _FWD_CONFIGS[head_dim])
    raise ValueError(f"head_dim {head_dim} needs {need} bytes of shared memory per block; this device allows {limit}")


def _decode_configs(head_dim: int, device: int | None) -> tuple:
    """The few-rows configurations whose shared memory the device allows, smallest tile first."""
    limit = _smem_optin(device)
    return tuple(c for c in _DECODE_CONFIGS if fwd_smem_bytes(head_dim, c) <= limit)


def _fwd_configs(head_dim: int, device: int | None) -> dict:
    """Forward configurations by tile: the few-rows ones and the training one (per tile the first that fits)."""
    configs = {}
    for config in (*_decode_configs(head_dim, device), _fwd_config(head_dim, device)):
        configs.setdefault(config[:2], config)
    return configs


def tile_for(head_dim: int, dtype, device: int | None = None, rows: int | None = None) -> tuple[int, int]:
    """The (tile_m, tile_n) of the kernels for this head dim and dtype: compile plans with it.

    Parameters
    ----------
    head_dim : int
        One of 32, 64, 96, 128, 192, 256.
    dtype : float16 or bfloat16
    device : int, optional
        CUDA device id (default: the current one; an sm_90 device where CuPy or a GPU is missing). The tile is
        the largest the device's shared memory per block allows.
    rows : int, optional
        Query rows per (batch, head) after GQA packing. At most ``DECODE_ROWS`` gives a forward-only decode tile:
        (16, 128) up to 16 rows, (64, 64) up to 64; otherwise (the default) the training tile, which the backward
        needs.
    """
    head_dim = _check_head_dim(head_dim)
    _kernel_type(dtype)
    device = _current_device() if device is None else int(device)
    if rows is not None:
        for config in _decode_configs(head_dim, device):
            if rows <= config[0]:
                return config[:2]
    return _fwd_config(head_dim, device)[:2]


def device_plan(plan: BlockMask) -> "DevicePlan":
    """The plan's arrays on the current device, uploaded once and cached on the plan by device id.

    Indexed by BlockMask attribute name (``row_ptr``, ``col_idx``, ``kind``, ``m_order``, ...) it gives CuPy arrays;
    arrays the plan lacks (``bit_pool`` of an interval plan, say) give None. The plan's arrays already lie in one host
    buffer (``plan.buffer``, laid out by the compiler): it travels in one host-to-device copy, with nothing to repack.
    A plan with a node order also gives ``perm`` (int32), copied after the buffer.
    """
    if not isinstance(plan, BlockMask):
        raise TypeError(f"expected a BlockMask; got {type(plan).__name__}")
    cupy = _cupy()
    device_id = cupy.cuda.Device().id
    cached = plan._device_cache.get(device_id)
    if cached is None:
        host, layout = plan.buffer, plan.layout
        pieces = [host]
        if plan.perm is not None:  # its size: the buffer's, a multiple of 16
            pieces.append(np.ascontiguousarray(plan.perm, dtype=np.int32))
            layout = {**layout, "perm": (host.nbytes, pieces[1].shape, pieces[1].dtype)}
        # on a stream of its own (its memory too), waited for: complete before a kernel on any stream reads it,
        # without waiting for the work already queued on the caller's stream
        with _upload_stream(device_id) as stream:
            buffer = cupy.empty(sum(x.nbytes for x in pieces), np.uint8)
            at = buffer.data.ptr
            for x in pieces:
                cupy.cuda.runtime.memcpyAsync(at, x.ctypes.data, x.nbytes, cupy.cuda.runtime.memcpyHostToDevice,
                                              stream.ptr)
                at += x.nbytes
            stream.synchronize()
        cached = plan._device_cache[device_id] = DevicePlan(buffer, layout)
    return cached


class DevicePlan:
    """A plan's arrays in one device buffer, as CuPy views made on first use (each view costs microseconds; a
    launch needs a few of them, the upload none)."""

    def __init__(self, buffer, layout: dict):
        self.buffer, self.layout, self.views = buffer, layout, {}

    def __getitem__(self, name: str):
        view = self.views.get(name)
        if view is None and name in self.layout:
            offset, shape, dtype = self.layout[name]
            view = self.views[name] = _cupy().ndarray(shape, dtype, memptr=self.buffer.data + offset)
        elif name not in PLAN_ARRAYS and name != "perm":
            raise KeyError(name)
        return view


@functools.lru_cache(maxsize=None)
def _upload_stream(device_id: int):
    return _cupy().cuda.Stream(non_blocking=True)


def _source_dir():
    """The folder holding the installed .cu / .cuh files (the source tree for editable installs)."""
    resource = importlib.resources.files("maskattn._gpu").joinpath("fwd.cu")
    with importlib.resources.as_file(resource) as path:
        return path.parent


def fwd_kernel_name(ctype: str, head_dim: int, config, mask_mode: str, perm: bool = False) -> str:
    """perm: the instantiation for plans with a node order (the others compile without the row lookups)."""
    tile_m, tile_n, warps, stages = config
    return (f"maskattn::fwd_kernel<maskattn::{ctype}, {head_dim}, {tile_m}, {tile_n}, {warps}, {stages}, "
            f"maskattn::{mask_mode}, {str(perm).lower()}>")


def sm90_kernel_name(ctype: str, head_dim: int, mask_mode: str, perm: bool = False) -> str:
    return f"maskattn::fwd_sm90_kernel<maskattn::{ctype}, {head_dim}, maskattn::{mask_mode}, {str(perm).lower()}>"


def combine_kernel_name(ctype: str, head_dim: int) -> str:
    return f"maskattn::combine_kernel<maskattn::{ctype}, {head_dim}>"


def nvrtc_options(src) -> tuple:
    """What the kernels are compiled with besides the architecture (CuPy adds -ftz=true to its own builds)."""
    return ("-std=c++17", f"-I{src}")


@functools.lru_cache(maxsize=None)
def _fwd_kernel(ctype: str, head_dim: int, config: tuple[int, int, int, int], mask_mode: str, device_id: int,
                perm: bool = False):
    kernel = _fwd_module_function(fwd_kernel_name(ctype, head_dim, config, mask_mode, perm))
    smem = fwd_smem_bytes(head_dim, config)
    if smem > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = smem
    return kernel, smem


def _uses_sm90(head_dim: int, tile, device_id: int) -> bool:
    """Whether the forward of this configuration runs the wgmma kernel (fwd_sm90.cu)."""
    return (tile == (128, 128) and head_dim in _SM90_HEAD_DIMS and _compute_capability(device_id) == "90"
            and _sm90_enabled())


def _sm90_enabled() -> bool:
    return os.environ.get("MASKATTN_SM90", "1") != "0"


@functools.lru_cache(maxsize=None)
def _compute_capability(device_id: int) -> str:
    return _cupy().cuda.Device(device_id).compute_capability


def sm90_smem_bytes(head_dim: int) -> int:
    """SM90_SMEM_BYTES<D> of fwd_sm90.cu: alignment slack, Q and two stages of K and V, the mbarriers."""
    return 1024 + 5 * 128 * head_dim * 2 + 128


# ROW_TABLE_BYTES of wgmma.cuh: the Hopper kernels' launches over plans with a node order take this much more shared
# memory, for the producers' tables of rows
ROW_TABLE_BYTES = 1024


def _sm90_kernel(ctype: str, head_dim: int, mask_mode: str, device_id: int, perm: bool = False):
    """fwd_sm90_kernel for sm_90a: (kernel, smem bytes, module); ``perm``: for a plan with a node order."""
    smem = sm90_smem_bytes(head_dim) + (ROW_TABLE_BYTES if perm else 0)
    kernel, module = sm90_function("fwd_sm90.cu", sm90_kernel_name(ctype, head_dim, mask_mode, perm), smem,
                                   device_id)
    return kernel, smem, module


@functools.lru_cache(maxsize=None)
def sm90_function(source: str, name: str, smem: int, device_id: int):
    """Kernel ``name`` of gpu/``source`` for sm_90a, compiled by NVRTC directly (CuPy would add -arch=sm_90, which
    lacks wgmma), its dynamic shared-memory limit raised to ``smem`` bytes: (kernel, module)."""
    from cupy.cuda import driver, function
    from cupy_backends.cuda.libs import nvrtc

    src = _source_dir()
    prog = nvrtc.createProgram((src / source).read_text(), source, [], [])
    try:
        nvrtc.addNameExpression(prog, name)
        try:
            nvrtc.compileProgram(prog, [*nvrtc_options(src), "-arch=sm_90a", "-ftz=true"])
        except nvrtc.NVRTCError as err:
            raise RuntimeError(f"NVRTC failed on {source} for {name}:\n{nvrtc.getProgramLog(prog)}") from err
        module = function.Module()
        module.load(nvrtc.getCUBIN(prog))
        kernel = module.get_function(nvrtc.getLoweredName(prog, name))
    finally:
        nvrtc.destroyProgram(prog)
    driver.funcSetAttribute(kernel.ptr, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
    return kernel, module  # the module must outlive the kernel


@functools.lru_cache(maxsize=None)
def _combine_kernel(ctype: str, head_dim: int, device_id: int):
    return _fwd_module_function(combine_kernel_name(ctype, head_dim))


def _fwd_module_function(name: str):
    """One kernel of fwd.cu, compiled by NVRTC for the current device."""
    cupy = _cupy()
    src = _source_dir()
    module = cupy.RawModule(code=(src / "fwd.cu").read_text(), options=nvrtc_options(src), name_expressions=(name,))
    return module.get_function(name)


def _strides(x, name: str) -> tuple[int, int, int]:
    """Batch, head and row strides of a (B, H, n, D) CuPy view in elements, after the checks cp.async needs."""
    item = x.dtype.itemsize
    if x.strides[3] != item:
        raise ValueError(f"{name} must be contiguous in its last dimension; got strides {x.strides} (bytes)")
    if x.data.ptr % 16:
        raise ValueError(f"{name} must start on a 16-byte boundary; its data pointer is {x.data.ptr:#x}")
    for axis, s in zip("bhn", x.strides[:3]):
        if s % 16:
            raise ValueError(f"{name}'s {axis} stride is {s} bytes; strides must be multiples of 16 bytes")
    return tuple(s // item for s in x.strides[:3])


def check_launch(plan: BlockMask, scale: float, q, k, v, *, pack: int = 1, decode_tile: bool = False, **more):
    """The checks every attention launch shares; returns (kernel dtype, tile, scale as float).

    q (B, H, n_q, D), k and v (B, Hk, n_k, D) and the named extra arrays (None skipped; their shapes are the
    caller's to check) must be 4-d CuPy arrays of q's dtype on q's device; H % Hk == 0; the plan must fit the
    shapes (its rows n_q * pack: GQA packing) and carry the kernel's tile (``decode_tile``: the forward's decode
    tile is accepted too); the grid dimensions must fit.
    """
    cupy = _cupy()
    arrays = {"q": q, "k": k, "v": v, **{name: x for name, x in more.items() if x is not None}}
    for name, x in arrays.items():
        if not isinstance(x, cupy.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray; got {type(x).__name__}")
        if x.ndim != 4:
            raise ValueError(f"{name} must have shape (B, H, n, D); got {x.shape}")
        if x.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {x.dtype}; q has {q.dtype}")
        if x.device.id != q.device.id:
            raise ValueError(f"{name} is on device {x.device.id}; q is on device {q.device.id}")
    ctype = _kernel_type(q.dtype)
    B, H, n_q, D = q.shape
    _, Hk, n_k, _ = k.shape
    head_dim = _check_head_dim(D)
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"k and v must have shape (B={B}, Hk, n_k, D={D}); got k {k.shape}, v {v.shape}")
    if Hk == 0 or H % Hk:
        raise ValueError(f"q has {H} heads, not a multiple of k's {Hk}")
    if not isinstance(plan, BlockMask):
        raise TypeError(f"plan must be a BlockMask; got {type(plan).__name__}")
    B_mask, H_mask, pn_q, pn_k = plan.shape
    if pack > 1 and (H // Hk) % pack:
        raise ValueError(f"pack={pack} must divide the {H // Hk} query heads per KV head")
    if (pn_q, pn_k) != (n_q * pack, n_k) or B_mask not in (1, B) or H_mask not in (1, 1 if pack > 1 else H):
        need = f"(1 or {B}, 1, {n_q} * pack={pack}, {n_k})" if pack > 1 else f"(1 or {B}, 1 or {H}, {n_q}, {n_k})"
        raise ValueError(f"the plan has shape {plan.shape}; attention needs {need}")
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be positive and finite; got {scale}")
    if max(plan.n_mblocks, plan.n_nblocks, B * H) > 65535:
        raise ValueError(f"the grid allows 65535 query blocks, key blocks and B * H; got {plan.n_mblocks}, "
                         f"{plan.n_nblocks} and {B * H}")
    tile = tile_for(head_dim, q.dtype, device=q.device.id)
    decode_tiles = [c[:2] for c in _decode_configs(head_dim, q.device.id)] if decode_tile else []
    if plan.tile != tile and plan.tile not in decode_tiles:
        also = f" (or {', '.join(map(str, decode_tiles))}, forward only)" if decode_tile else ""
        raise ValueError(f"the plan was compiled for tile {plan.tile}; the kernels for head_dim {head_dim} and "
                         f"{q.dtype} use {tile}{also}: compile_mask(spec, tile=tile_for(head_dim, dtype))")
    return ctype, plan.tile, scale


@functools.lru_cache(maxsize=None)
def _multiprocessors(device_id: int) -> int:
    return int(_cupy().cuda.Device(device_id).attributes["MultiProcessorCount"])


def num_splits_for(ctas: int, longest_row: int, smem: int, multiprocessors: int) -> int:
    """How many slices to split each query block's key blocks into, when ``ctas`` CTAs cannot fill the GPU.

    ``longest_row``: the most key blocks any query block visits; ``smem``: shared memory per CTA. As
    FlashAttention's heuristic: among 1 .. MAX_SPLITS splits (at most one per key block, with at least two key
    blocks per split), take the fewest whose wave efficiency (waves / whole waves) is within 85% of the best;
    none when the CTAs already fill 80% of one wave.
    """
    slots = multiprocessors * max(1, (_SM90_SMEM_OPTIN + 1024) // (smem + 1024))
    if ctas >= 0.8 * slots or longest_row < 4:
        return 1
    candidates = range(1, min(MAX_SPLITS, longest_row // 2) + 1)
    efficiency = {s: (ctas * s / slots) / math.ceil(ctas * s / slots) for s in candidates}
    best = max(efficiency.values())
    return next(s for s in candidates if efficiency[s] >= 0.85 * best)


def forward(q, k, v, plan: BlockMask, scale: float, out=None, *, num_splits: int | None = None, pack: int = 1,
            key_lens=None):
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
        exactly; default :func:`num_splits_for` the plan and the device.
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
    cupy = _cupy()
    if key_lens is not None:
        _check_key_lens(key_lens, q)
    launch = forward_launch(q, k, v, plan, scale, out, num_splits=num_splits, pack=pack,
                            bounded=key_lens is not None)
    with launch.device:
        if out is None:
            out = cupy.empty(launch.out_shape, dtype=launch.dtype)
        lse = cupy.empty(launch.lse_shape, dtype=np.float32)
        parts = [cupy.empty(shape, dtype=np.float32) for shape in launch.part_shapes]
        launch(cupy.cuda.get_current_stream().ptr, q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, lse.data.ptr,
               *(p.data.ptr for p in parts), key_lens=0 if key_lens is None else key_lens.data.ptr)
    return out, lse


def _check_key_lens(key_lens, q):
    """key_lens must be the (B,) int32 CuPy array fwd_kernel reads, on q's device."""
    cupy = _cupy()
    if type(key_lens) is not cupy.ndarray or key_lens.dtype != np.int32 or key_lens.shape != (q.shape[0],):
        raise ValueError(f"key_lens must be an int32 array of shape ({q.shape[0]},) (one length per batch); got "
                         f"{type(key_lens).__name__} {getattr(key_lens, 'dtype', '')} {getattr(key_lens, 'shape', '')}")
    if not key_lens.flags.c_contiguous or key_lens.device.id != q.device.id:
        raise ValueError(f"key_lens must be contiguous and on q's device {q.device.id}; got device "
                         f"{key_lens.device.id}, strides {key_lens.strides}")


def forward_launch(q, k, v, plan: BlockMask, scale: float, out=None, *, num_splits: int | None = None,
                   pack: int = 1, bounded: bool = False) -> "_ForwardLaunch":
    """The checked launch of :func:`forward` for these arrays' shapes, strides, dtype and device (cached): call it
    with a stream and the data pointers of q, k, v, out, lse and the split partials (``part_shapes``), which the
    caller allocates (q, k, v and out with the strides given here), and with ``bounded`` that of ``key_lens``."""
    key = _launch_key(q, k, v, out, plan, scale, num_splits, pack, bounded)
    launch = _LAUNCHES.get(key) if key is not None else None
    if launch is None or launch.plan is not plan:
        launch = _ForwardLaunch(q, k, v, plan, scale, out, num_splits, pack, bounded)
        if key is not None:
            _LAUNCHES[key] = launch
            while len(_LAUNCHES) > 64:
                _LAUNCHES.popitem(last=False)
    return launch


_LAUNCHES: "collections.OrderedDict[tuple, _ForwardLaunch]" = collections.OrderedDict()


def _launch_key(q, k, v, out, plan, scale, num_splits, pack, bounded):
    """What a checked launch depends on besides the data pointers, or None where the full checks must run (not
    CuPy arrays, pointers off 16 bytes)."""
    cupy = _cupy()
    arrays = (q, k, v) if out is None else (q, k, v, out)
    if not all(type(x) is cupy.ndarray for x in arrays) or any(x.data.ptr % 16 for x in arrays):
        return None
    return ((id(plan), scale, num_splits, pack, bounded, _sm90_enabled())
            + tuple((x.shape, x.strides, x.dtype, x.device.id) for x in arrays))


class _ForwardLaunch:
    """One forward configuration, checked once (check_launch, strides, splits): the kernels, their grids and every
    argument but the arrays. Calls are then a few allocations and one or two launches, cheap enough for decode.
    ``bounded``: calls pass per-batch key counts (``key_lens``), which only ``fwd_kernel`` takes."""

    def __init__(self, q, k, v, plan, scale, out, num_splits, pack, bounded=False):
        cupy = _cupy()
        pack = int(pack)
        if pack < 1:
            raise ValueError(f"pack must be a positive integer; got {pack}")
        ctype, tile, scale = check_launch(plan, scale, q, k, v, pack=pack, decode_tile=True, out=out)
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
            config = _fwd_configs(head_dim, self.device_id)[tile]
            threads = config[2] * 32
            self.sm90 = not bounded and _uses_sm90(head_dim, tile, self.device_id)
            if self.sm90:
                self.kernel, self.smem, _ = _sm90_kernel(ctype, head_dim, _MASK_MODES[plan.payload], self.device_id,
                                                         plan.perm is not None)
                threads = _SM90_THREADS
            else:
                self.kernel, self.smem = _fwd_kernel(ctype, head_dim, config, _MASK_MODES[plan.payload],
                                                     self.device_id, plan.perm is not None)
            ctas = plan.n_mblocks * B * (H // pack)
            if num_splits is None:
                longest = 0 if plan.nnz == 0 else int(np.diff(plan.row_ptr, axis=-1).max())
                num_splits = num_splits_for(ctas, longest, self.smem, _multiprocessors(self.device_id))
            self.num_splits = int(num_splits)
            if not 1 <= self.num_splits <= MAX_SPLITS:
                raise ValueError(f"num_splits must lie in [1, {MAX_SPLITS}]; got {num_splits}")
            out_like = cupy.empty(q.shape, dtype=q.dtype) if out is None else out
            strides = [_strides(x, name) for name, x in (("q", q), ("k", k), ("v", v), ("out", out_like))]
            dp = device_plan(plan)
        self.out_shape, self.dtype = q.shape, q.dtype
        self.lse_shape = (B, H, n_q)
        # float32 partial O and LSE per split; none without splits
        self.part_shapes = (((self.num_splits, B * H, n_q, head_dim), (self.num_splits, B * H, n_q))
                            if self.num_splits > 1 else ())
        i32, i64 = np.int32, np.int64
        self.grid, self.block = (plan.n_mblocks, B * H // pack, self.num_splits), (threads, 1, 1)
        self.args = (
            *(i64(s) for triple in strides for s in triple),
            i32(H), i32(H // Hk), i32(pack), i32(self.num_splits), i32(n_q), i32(n_k),
            i32(H_mask if B_mask > 1 else 0), i32(1 if H_mask > 1 else 0), i32(plan.n_mblocks), i32(plan.n_nblocks),
            dp["row_ptr"], dp["col_idx"], dp["kind"], dp["m_order"],
            dp["payload_idx"], dp["bit_pool"], dp["intervals"], dp["interval_minmax"], dp["perm"],
            np.float32(scale * math.log2(math.e)),
        )
        with q.device:
            # fwd_kernel's leading arrays end with key_lens, which fwd_sm90_kernel does not take
            self.fwd = _Launcher(self.kernel, self.grid, self.block, self.smem, 7 if self.sm90 else 8, self.args)
            if self.num_splits > 1:
                rows, warps = n_q * pack, 4  # COMBINE_WARPS in fwd.cu
                self.combine = _Launcher(
                    _combine_kernel(ctype, head_dim, self.device_id), ((rows + warps - 1) // warps, B * H // pack, 1),
                    (warps * 32, 1, 1), 0, 4, (*(i64(s) for s in strides[3]), i32(H), i32(pack), i32(self.num_splits),
                                               i32(n_q), dp["perm"]))

    def __call__(self, stream: int, q: int, k: int, v: int, out: int, lse: int, o_part: int = 0, lse_part: int = 0,
                 key_lens: int = 0):
        """Launch on ``stream`` over the arrays at these device addresses (the split partials only when
        ``num_splits > 1``; key_lens, 0 for none, only on a ``bounded`` launch)."""
        with self.device:
            self.fwd(stream, q, k, v, out, lse, o_part, lse_part, *(() if self.sm90 else (key_lens,)))
            if self.num_splits > 1:
                self.combine(stream, o_part, lse_part, out, lse)


class _Launcher:
    """One kernel with every argument but its leading arrays fixed, launched through cuLaunchKernel: CuPy's launch
    converts each argument (about 1 us apiece; the forward has 36), here the fixed ones are converted once.

    fixed: NumPy int64 / int32 / float32 scalars, CuPy arrays (passed as pointers: they must outlive the launcher;
    the plan's are cached on the plan) or None (a null pointer), in the kernel's parameter order after the arrays.
    Calls take the stream and the leading arrays' device addresses (0 for a null pointer).
    """

    _CTYPES = {np.dtype(np.int64): ctypes.c_int64, np.dtype(np.int32): ctypes.c_int32,
               np.dtype(np.float32): ctypes.c_float}

    def __init__(self, kernel, grid, block, smem, n_arrays, fixed):
        from cupy.cuda import driver

        self.launch_kernel = driver.launchKernel
        self.function = getattr(kernel, "kernel", kernel).ptr  # a RawKernel's Function on the current device
        self.dims = (*grid, *block, smem)
        self.n_arrays = n_arrays
        self.fixed = [self._slot(x) for x in fixed]  # the storage the parameter pointers point into
        self.fixed_addresses = [ctypes.addressof(x) for x in self.fixed]
        self.params = ctypes.c_void_p * (n_arrays + len(fixed))
        self.pointers = ctypes.c_uint64 * n_arrays

    def _slot(self, x):
        if x is None:
            return ctypes.c_uint64(0)
        if isinstance(x, np.generic):
            return self._CTYPES[x.dtype](x.item())
        return ctypes.c_uint64(x.data.ptr)

    def __call__(self, stream: int, *addresses: int):
        pointers = self.pointers(*addresses)
        base = ctypes.addressof(pointers)
        params = self.params(*range(base, base + 8 * self.n_arrays, 8), *self.fixed_addresses)
        self.launch_kernel(self.function, *self.dims, stream, ctypes.addressof(params), 0)
