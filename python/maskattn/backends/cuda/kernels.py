"""CUDA backend: the kernels' configurations and their compilation.

This module owns which kernel and tile serve a head dim, dtype and device (:func:`tile_for`, the configuration
tables), the kernels' names as C++ templates, and their compilation: NVRTC builds them from the installed sources
(``importlib.resources``, ``-I`` the source folder), one ``RawModule`` per configuration with an explicit name
expression, memoised per (kernel, dtype, head dim, tile, mask mode, device); CuPy compiles for the device's own
architecture (``-arch=sm_90`` on an H100) and keeps the cubins in its on-disk cache. On Hopper (compute capability
9.0) the forward at every head dim with the training tile runs ``fwd_sm90.cu`` instead (wgmma, a
producer warpgroup and two consumers), which needs the ``sm_90a`` target: CuPy always adds its own ``-arch``, so
that one is compiled by NVRTC directly, once per process (about a second per configuration). ``MASKATTN_SM90=0`` in
the environment keeps the mma.sync kernel. CuPy is imported on first use, so ``maskattn`` imports without it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import os
import pathlib

import numpy as np

HEAD_DIMS = (32, 64, 96, 128, 192, 256)

# Per head dim, forward configurations (tile_m, tile_n, warps, K/V stages) in order of preference; the first whose
# shared memory fits the device is used. Each warp owns tile_m / warps query rows: 16 here (32-row warps, e.g.
# (128, 64, 4), are correct too but spill a little and were no faster on the H100). `nvcc -arch=sm_90 -Xptxas -v`,
# bf16, registers for mask none / intervals / bits, no spills; shared memory per CTA:
#   32: 133/127/134, 51200 B   64: 182/173/174, 92160 B   96: 222/238/230, 133120 B
#   128: 242/246/242, 174080 B   192 (tile_n 64): 216/226/220, 153600 B   256 (tile_n 64): 255/250/250, 202752 B
FWD_CONFIGS = {
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
DECODE_CONFIGS = ((16, 128, 8, 3), (16, 128, 8, 2), (64, 64, 4, 2))
DECODE_ROWS = max(config[0] for config in DECODE_CONFIGS)
MAX_SPLITS = 32  # MAX_SPLITS in fwd.cu: the combine kernel gives each split one lane
SM90_SMEM_OPTIN = 232448  # bytes of shared memory a block may opt into on sm_90
SM90_HEAD_DIMS = HEAD_DIMS  # fwd_sm90.cu's instantiations, at 128 x sm90_tile_n(head_dim) tiles
# fwd_sm90.cu's forward-only tiles by head dim; the backward's kernels take the training tiles, so plans for
# training keep those. Up to D = 64, 192 query rows: three consumer warpgroups (FlashAttention-3 and -4 take it
# there); at D = 96, 192 x 112 (three consumers fit 112 keys without spills): 0.91-0.92x the time of 128 x 128 on
# full, causal, documents and shared_question at 16k (H200, in turns; 128 x 160 1.01-1.05x; docs/performance.md,
# 2026-11-29 (n)). At D = 128, 176 keys (FlashAttention-3's tile without a mask), for plans without partial tiles
# (SM90_FORWARD_TAKES): 0.98x the time on full at 16k, 1.03-1.17x on documents and windows ((o), (q)). At D = 192,
# 112 keys where the training tile takes 64 (FlashAttention-3's): 0.86x the time on full and causal masks at 8k (96
# keys 0.88-0.89x, (m)). At D = 256, 80 keys (FlashAttention-3's), for plans without a node order or bit tiles
# (sm90_forward_tile_takes).
SM90_TILE_192 = (192, 128)
SM90_FORWARD_TILES = {32: SM90_TILE_192, 64: SM90_TILE_192, 96: (192, 112), 128: (128, 176), 192: (128, 112),
                      256: (128, 80)}
# The plans a head dim's forward-only tile takes, where not every one: (payloads, whether with a node order). At
# D = 128 only those without partial tiles or a node order (with partial tiles 128 x 176 ran 0.99-1.17x the
# 128 x 128 time; with a node order and intervals ptxas spills 40 bytes); at D = 256 no bit tiles (ptxas spills 32
# bytes) and no node order (its row tables do not fit beside the tiles).
SM90_FORWARD_TAKES = {128: (("none",), False), 256: (("none", "intervals"), False)}
# How much more work (query rows x key columns of the listed tiles) a plan at a forward-only tile may carry than the
# training tile's for the forward over it to be taken: the 192-row tile ran 0.88-0.93x the 128-row one's time
# where it lists 1.01-1.03x the work (full, causal, documents), 0.92-0.98 at 1.11-1.12x (sliding windows, an RCM
# graph), but 1.13x at 1.14x (Longformer with global tokens) and 1.34x at 1.31x (BigBird's 64-token blocks)
# (H200, D = 64, 16k, docs/performance.md)
SM90_FORWARD_MAX_WORK = 1.10
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CUfunction_attribute in cuda.h
MASK_MODES = {"none": "MASK_NONE", "intervals": "MASK_INTERVALS", "bits": "MASK_BITS"}


def import_cupy():
    try:
        import cupy
    except ImportError as e:
        raise ImportError("the CUDA backend needs CuPy: pip install 'maskattn[cuda12]' or 'maskattn[cuda13]'") from e
    return cupy


def kernel_type(dtype) -> str:
    """The kernel's storage type for a NumPy / CuPy dtype: half_t or bf16_t."""
    # by name: np.dtype("bfloat16") only resolves once ml_dtypes has been imported
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name == "float16":
        return "half_t"
    if name == "bfloat16":
        return "bf16_t"
    raise TypeError(f"the CUDA kernels take float16 or bfloat16; got {dtype}")


def check_head_dim(head_dim) -> int:
    if int(head_dim) not in HEAD_DIMS:
        raise ValueError(f"head_dim is {head_dim}; supported: {', '.join(map(str, HEAD_DIMS))}")
    return int(head_dim)


def fwd_smem_bytes(head_dim: int, config) -> int:
    """Dynamic shared memory of the forward kernel: Q plus the stages of K and V, rows padded by 8 elements."""
    tile_m, tile_n, _, stages = config
    return (tile_m + 2 * stages * tile_n) * (head_dim + 8) * 2


@functools.lru_cache(maxsize=None)
def smem_optin(device_id: int | None) -> int:
    if device_id is None:
        return SM90_SMEM_OPTIN
    cupy = import_cupy()
    return int(cupy.cuda.Device(device_id).attributes["MaxSharedMemoryPerBlockOptin"])


def current_device() -> int | None:
    try:
        cupy = import_cupy()
        return cupy.cuda.Device().id if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # no CuPy or no driver: plan for an sm_90 device
        return None


def fwd_config(head_dim: int, device: int | None) -> tuple[int, int, int, int]:
    """The training configuration: the first of FWD_CONFIGS whose shared memory the device allows."""
    limit = smem_optin(device)
    for config in FWD_CONFIGS[head_dim]:
        if fwd_smem_bytes(head_dim, config) <= limit:
            return config
    need = min(fwd_smem_bytes(head_dim, c) for c in FWD_CONFIGS[head_dim])
    raise ValueError(f"head_dim {head_dim} needs {need} bytes of shared memory per block; this device allows {limit}")


def decode_configs(head_dim: int, device: int | None) -> tuple:
    """The few-rows configurations whose shared memory the device allows, smallest tile first."""
    limit = smem_optin(device)
    return tuple(c for c in DECODE_CONFIGS if fwd_smem_bytes(head_dim, c) <= limit)


def fwd_configs(head_dim: int, device: int | None) -> dict:
    """Forward configurations by tile: the few-rows ones and the training one (per tile the first that fits)."""
    configs = {}
    for config in (*decode_configs(head_dim, device), fwd_config(head_dim, device)):
        configs.setdefault(config[:2], config)
    return configs


def tile_for(head_dim: int, dtype, device: int | None = None, rows: int | None = None,
             training: bool = True) -> tuple[int, int]:
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
    training : bool, default True
        False: a plan for the forward only (inference), whose tile may be larger where the device's forward has a
        faster one (``SM90_FORWARD_TILES``): on Hopper at head dims 32 and 64, 192 x 128 (a third more query rows
        per CTA share each K and V tile); at 96, 192 x 112; at 128, 128 x 176 for masks without partial tiles; at
        192, 128 x 112 (1.75x the keys a step); at 256, 128 x 80, for masks without a node order or bit tiles
        (``sm90_forward_tile_takes``). The
        backward refuses such plans. Where a mask's structure is finer than the larger tile it lists more work
        (BigBird's 64-token blocks: 1.3x at 192 rows, 16k) and can be slower: ``forward_plan_pays`` is the rule
        ``maskattn.attention`` applies to a spec's two plans.
    """
    head_dim = check_head_dim(head_dim)
    kernel_type(dtype)
    device = current_device() if device is None else int(device)
    if rows is not None:
        for config in decode_configs(head_dim, device):
            if rows <= config[0]:
                return config[:2]
    forward_tile = None if training else sm90_forward_tile(head_dim, device)
    return forward_tile or fwd_config(head_dim, device)[:2]


def forward_plan_pays(plan, forward_plan, head_dim: int) -> bool:
    """Whether the forward over ``forward_plan`` (a forward-only tile's, SM90_FORWARD_TILES) is expected to beat the
    one over ``plan`` (the training tile's, same mask): where fwd_sm90.cu takes it (sm90_forward_tile_takes) and it
    lists at most SM90_FORWARD_MAX_WORK times the work."""
    work = plan.nnz * plan.tile[0] * plan.tile[1]
    return (sm90_forward_tile_takes(head_dim, forward_plan)
            and forward_plan.nnz * forward_plan.tile[0] * forward_plan.tile[1] <= SM90_FORWARD_MAX_WORK * work)


def forward_plan_may_pay(plan, head_dim: int) -> bool:
    """Whether a spec whose training-tile plan is ``plan`` is worth compiling for the head dim's forward-only tile
    too: not where that tile takes no partial tiles (D = 128's 128 x 176, SM90_FORWARD_TAKES) and ``plan`` has some.
    Such a mask has none at 176 keys only where its partial tiles at 128 keys vary along their columns alone, each
    change at a multiple of 176; the others would be compiled twice to no use (a dense host mask's plan takes
    milliseconds at 16k), so those few keep the training tile too."""
    payloads, _ = SM90_FORWARD_TAKES.get(head_dim, (MASK_MODES, True))
    return set(payloads) != {"none"} or plan.payload == "none"


def sm90_forward_tile_takes(head_dim: int, plan) -> bool:
    """Whether fwd_sm90.cu runs a plan compiled for the head dim's forward-only tile (SM90_FORWARD_TAKES: at D = 128's
    128 x 176 none with partial tiles or a node order, at D = 256's 128 x 80 none with bit tiles or a node order);
    those take the training tile's plan."""
    payloads, perm = SM90_FORWARD_TAKES.get(head_dim, (MASK_MODES, True))
    return plan.payload in payloads and (perm or plan.perm is None)


def forward_only_tiles(head_dim: int, device: int | None) -> tuple:
    """The tiles of plans the forward takes besides the training tile (the backward does not): the few-rows ones
    and, on Hopper, the head dim's SM90_FORWARD_TILES."""
    forward_tile = sm90_forward_tile(head_dim, device)
    return tuple(c[:2] for c in decode_configs(head_dim, device)) + ((forward_tile,) if forward_tile else ())


def sm90_forward_tile(head_dim: int, device: int | None):
    """The head dim's forward-only tile (SM90_FORWARD_TILES) where the device runs fwd_sm90.cu over it, else None."""
    tile = SM90_FORWARD_TILES.get(head_dim)
    return tile if tile is not None and uses_sm90(head_dim, tile, device) else None


def cached_per_sources(build):
    """``functools.lru_cache`` over a kernel builder, keyed also by ``MASKATTN_KERNEL_SOURCES``: kernels built from
    another folder of sources are cached apart from the installed ones, so that one process can switch between
    folders by setting the variable (scripts/kernel_ab.py times several folders in turns in one process)."""

    @functools.lru_cache(maxsize=None)
    def cached(sources, *args, **kwargs):
        return build(*args, **kwargs)

    @functools.wraps(build)
    def lookup(*args, **kwargs):
        return cached(sources_key(), *args, **kwargs)

    lookup.cache_info, lookup.cache_clear = cached.cache_info, cached.cache_clear
    return lookup


def sources_key() -> str | None:
    """The kernel-source folder that ``MASKATTN_KERNEL_SOURCES`` names, None for the installed sources: a key of what
    caches kernels or launches that hold them (:func:`cached_per_sources`, the forward's checked launches)."""
    return os.environ.get("MASKATTN_KERNEL_SOURCES") or None


def source_dir():
    """The folder holding the installed .cu / .cuh files (the source tree for editable installs), or the one
    ``MASKATTN_KERNEL_SOURCES`` names: kernels built from other sources without reinstalling (scripts/kernel_ab.py
    times such folders against each other)."""
    folder = sources_key()
    if folder is not None:
        return pathlib.Path(folder)
    resource = importlib.resources.files("maskattn._gpu").joinpath("fwd.cu")
    with importlib.resources.as_file(resource) as path:
        return path.parent


def kernel_source(name: str) -> str:
    """The text of gpu/``name`` as the kernels are built from it, ending in a comment that names the headers' hash:
    CuPy's on-disk kernel cache keys a build by its source text and options, not by the headers it includes, so
    without it a change to a .cuh alone would bring back stale kernels on a machine that keeps the cache."""
    src = source_dir()
    headers = hashlib.sha1(b"".join(path.read_bytes() for path in sorted(src.glob("*.cuh")))).hexdigest()
    return f"{(src / name).read_text()}\n// maskattn headers {headers}\n"


def fwd_kernel_name(ctype: str, head_dim: int, config, mask_mode: str, perm: bool = False) -> str:
    """perm: the instantiation for plans with a node order (the others compile without the row lookups)."""
    tile_m, tile_n, warps, stages = config
    return (f"maskattn::fwd_kernel<maskattn::{ctype}, {head_dim}, {tile_m}, {tile_n}, {warps}, {stages}, "
            f"maskattn::{mask_mode}, {str(perm).lower()}>")


def sm90_kernel_name(ctype: str, head_dim: int, mask_mode: str, perm: bool = False, tile=None) -> str:
    """tile: (tile_m, tile_n), the training tile's (sm90_tile) where None."""
    tile_m, tile_n = tile or sm90_tile(head_dim)
    return (f"maskattn::fwd_sm90_kernel<maskattn::{ctype}, {head_dim}, {tile_m}, {tile_n}, maskattn::{mask_mode}, "
            f"{str(perm).lower()}>")


def combine_kernel_name(ctype: str, head_dim: int) -> str:
    return f"maskattn::combine_kernel<maskattn::{ctype}, {head_dim}>"


def nvrtc_options(src) -> tuple:
    """What the kernels are compiled with besides the architecture (CuPy adds -ftz=true to its own builds)."""
    return ("-std=c++17", f"-I{src}")


@cached_per_sources
def fwd_kernel(ctype: str, head_dim: int, config: tuple[int, int, int, int], mask_mode: str, device_id: int,
               perm: bool = False):
    kernel = _fwd_module_function(fwd_kernel_name(ctype, head_dim, config, mask_mode, perm))
    smem = fwd_smem_bytes(head_dim, config)
    if smem > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = smem
    return kernel, smem


def sm90_tile_n(head_dim: int) -> int:
    """sm90::TILE_N<D> of fwd_sm90.cu: 128 key rows a block up to D = 128, 64 above (the training tiles')."""
    return 128 if head_dim <= 128 else 64


def sm90_tile(head_dim: int) -> tuple[int, int]:
    """fwd_sm90.cu's training tile, which the backward's wgmma kernels share: 128 x sm90_tile_n(head_dim)."""
    return (128, sm90_tile_n(head_dim))


def uses_sm90(head_dim: int, tile, device_id: int | None) -> bool:
    """Whether the forward of this configuration runs the wgmma kernel (fwd_sm90.cu); device None: an sm_90 one."""
    tile = tuple(tile)
    return ((head_dim in SM90_HEAD_DIMS and tile == sm90_tile(head_dim)
             or tile == SM90_FORWARD_TILES.get(head_dim))
            and (device_id is None or compute_capability(device_id) == "90") and sm90_enabled())


def sm90_threads(tile_m: int) -> int:
    """sm90::THREADS<TILE_M> of fwd_sm90.cu: a producer warpgroup and one consumer per 64 query rows."""
    return 128 * (tile_m // 64 + 1)


def sm90_enabled() -> bool:
    return os.environ.get("MASKATTN_SM90", "1") != "0"


@functools.lru_cache(maxsize=None)
def compute_capability(device_id: int) -> str:
    return import_cupy().cuda.Device(device_id).compute_capability


def sw128_columns(head_dim: int) -> int:
    """SW128_COLUMNS<D> of wgmma.cuh: the columns a row of the Hopper kernels' shared tiles takes (whole 64-column
    blocks: 64 at head dim 32, 128 at 96)."""
    return -(-head_dim // 64) * 64


def sm90_smem_bytes(head_dim: int, tile=None) -> int:
    """SM90_SMEM_BYTES<D, TILE_M, TILE_N> of fwd_sm90.cu (tile: (tile_m, tile_n), the training tile's where None):
    alignment slack (none at D = 256's 128 x 80: ALIGN_SLACK), Q, two stages of K and V and of the partial tiles'
    payloads (wgmma.cuh's PayloadStages), the mbarriers."""
    tile_m, tile_n = tile or sm90_tile(head_dim)
    payload = 32 + max(16, tile_m // 8) * tile_n
    slack = 0 if (head_dim, tile_n) == (256, 80) else 1024
    return slack + (tile_m + 4 * tile_n) * sw128_columns(head_dim) * 2 + 2 * payload + 128


# ROW_TABLE_BYTES of wgmma.cuh: the Hopper kernels' launches over plans with a node order take this much more shared
# memory, for the tables of rows of the producers and of the forward's epilogue
ROW_TABLE_BYTES = 1792


def sm90_kernel(ctype: str, head_dim: int, mask_mode: str, device_id: int, perm: bool = False, tile=None):
    """fwd_sm90_kernel for sm_90a: (kernel, smem bytes, module); ``perm``: for a plan with a node order; tile:
    (tile_m, tile_n), the training tile's where None."""
    smem = sm90_smem_bytes(head_dim, tile) + (ROW_TABLE_BYTES if perm else 0)
    kernel, module = sm90_function("fwd_sm90.cu", sm90_kernel_name(ctype, head_dim, mask_mode, perm, tile), smem,
                                   device_id)
    return kernel, smem, module


@cached_per_sources
def sm90_function(source: str, name: str, smem: int, device_id: int):
    """Kernel ``name`` of gpu/``source`` for sm_90a, compiled by NVRTC directly (CuPy would add -arch=sm_90, which
    lacks wgmma), its dynamic shared-memory limit raised to ``smem`` bytes: (kernel, module)."""
    from cupy.cuda import driver, function
    from cupy_backends.cuda.libs import nvrtc

    src = source_dir()
    prog = nvrtc.createProgram(kernel_source(source), source, [], [])
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


@cached_per_sources
def combine_kernel(ctype: str, head_dim: int, device_id: int):
    return _fwd_module_function(combine_kernel_name(ctype, head_dim))


def _fwd_module_function(name: str):
    """One kernel of fwd.cu, compiled by NVRTC for the current device."""
    cupy = import_cupy()
    src = source_dir()
    module = cupy.RawModule(code=kernel_source("fwd.cu"), options=nvrtc_options(src), name_expressions=(name,))
    return module.get_function(name)


@functools.lru_cache(maxsize=None)
def multiprocessors(device_id: int) -> int:
    return int(import_cupy().cuda.Device(device_id).attributes["MultiProcessorCount"])
