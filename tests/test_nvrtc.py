"""The kernels compile under NVRTC, as CuPy compiles them at run time, with the names and options the package
itself builds: nvcc accepting a source does not mean NVRTC does (NVRTC rejects, for one, a constexpr function
without __device__, which nvcc takes as host code and ignores).

Needs the NVRTC library (pip package nvidia-cuda-nvrtc, or a CUDA toolkit's libnvrtc.so), no GPU. Without it the
tests skip, except under CI=true, where the library must be there (.ci/run installs it).
"""

import ctypes
import ctypes.util
import glob
import importlib.util
import itertools
import os

import pytest

from maskattn.backends.cuda import bwd as cuda_bwd
from maskattn.backends.cuda import kernels

# the installed sources, which the package compiles at run time: a source or header missing from gpu/meson.build
# fails here in CI (a non-editable install), not on a user's GPU
GPU_DIR = kernels.source_dir()


def _find_nvrtc():
    candidates = [os.environ.get("MASKATTN_NVRTC", "")]
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidates += sorted(glob.glob(os.path.join(root, "*", "lib", "libnvrtc.so*")), reverse=True)
    candidates += [ctypes.util.find_library("nvrtc") or ""]
    for path in filter(None, candidates):
        try:
            # NVRTC opens its builtins library by soname; the 13.0 wheel sets no rpath to find it beside itself
            for builtins in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*")):
                ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            return ctypes.CDLL(path)
        except OSError:
            continue
    if os.environ.get("CI") == "true":
        pytest.fail("no NVRTC library: CI installs nvidia-cuda-nvrtc so that the kernels' NVRTC build is checked")
    pytest.skip("no NVRTC library (pip install nvidia-cuda-nvrtc)")


@pytest.fixture(scope="module")
def nvrtc():
    return _find_nvrtc()


def _compile(lib, source, names, options):
    """(status, log, lowered names) of one NVRTC build of gpu/<source>, as the package builds it, with the given name
    expressions."""
    prog = ctypes.c_void_p()
    code = kernels.kernel_source(source).encode()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), code, source.encode(), 0, None, None) == 0
    try:
        for name in names:
            assert lib.nvrtcAddNameExpression(prog, name.encode()) == 0
        args = [o.encode() for o in options]
        status = lib.nvrtcCompileProgram(prog, len(args), (ctypes.c_char_p * len(args))(*args))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        lowered = []
        if status == 0:
            for name in names:
                out = ctypes.c_char_p()
                assert lib.nvrtcGetLoweredName(prog, name.encode(), ctypes.byref(out)) == 0
                lowered.append(out.value.decode())
        return status, log.value.decode(errors="replace"), lowered
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _builds():
    options = (*kernels.nvrtc_options(GPU_DIR), "-ftz=true")
    training = kernels.FWD_CONFIGS[128][0]
    yield "fwd.cu", [kernels.fwd_kernel_name("bf16_t", 128, training, "MASK_BITS"),
                     kernels.fwd_kernel_name("bf16_t", 128, training, "MASK_BITS", perm=True),
                     *(kernels.fwd_kernel_name("half_t", 64, c, "MASK_INTERVALS") for c in kernels.DECODE_CONFIGS),
                     kernels.combine_kernel_name("half_t", 96)], (*options, "-arch=sm_90")
    yield "fwd_sm90.cu", [*(kernels.sm90_kernel_name("bf16_t", 128, "MASK_INTERVALS", perm) for perm in (False, True)),
                          kernels.sm90_kernel_name("half_t", 256, "MASK_BITS"),
                          kernels.sm90_kernel_name("bf16_t", 64, "MASK_BITS", tile=kernels.SM90_TILE_192),
                          kernels.sm90_kernel_name("bf16_t", 192, "MASK_BITS", tile=kernels.SM90_FORWARD_TILES[192]),
                          kernels.sm90_kernel_name("half_t", 128, "MASK_NONE", tile=kernels.SM90_FORWARD_TILES[128])], (
        *options, "-arch=sm_90a")
    for deterministic, perm in ((True, False), (False, False), (True, True)):
        names = cuda_bwd.kernel_names("half_t", 64, (128, 128), "MASK_BITS", deterministic, perm=perm)
        yield "bwd.cu", list(names.values()), (*options, "-arch=sm_80")
    for deterministic, perm in itertools.product((True, False), (False, True)):
        sm90 = cuda_bwd.kernel_names("bf16_t", 128, (128, 128), "MASK_BITS", deterministic, sm90=True, perm=perm)
        yield "bwd_sm90.cu", [name for name in sm90.values() if "_sm90_kernel<" in name], (*options, "-arch=sm_90a")
    # the one pass where it may split its last wave (no partial tiles), and the merge of the split CTAs' dK and dV
    dense = cuda_bwd.kernel_names("bf16_t", 128, (128, 128), "MASK_NONE", False, sm90=True)
    yield "bwd_sm90.cu", [dense["dkdv"], cuda_bwd.merge_kernel_name("bf16_t", 128)], (*options, "-arch=sm_90a")
    # bwd.cu's kernels the deterministic Hopper backward launches too: the preprocess and the K and V bound
    fixed = cuda_bwd.kernel_names("bf16_t", 128, (128, 128), "MASK_BITS", True, sm90=True)
    yield "bwd.cu", [name for name in fixed.values() if "_sm90_kernel<" not in name], (*options, "-arch=sm_90")
    yield "dense_plan.cu", [], ("-std=c++17", "-arch=sm_90")  # extern "C": looked up by its plain name


@pytest.mark.parametrize("source, names, options", list(_builds()),
                         ids=lambda x: x if isinstance(x, str) and x.endswith(".cu") else "")
def test_nvrtc_builds_what_the_package_names(nvrtc, source, names, options):
    status, log, lowered = _compile(nvrtc, source, names, options)
    assert status == 0, f"NVRTC failed on {source} ({' '.join(options)}):\n{log}"
    assert len(lowered) == len(names) and all(lowered)
