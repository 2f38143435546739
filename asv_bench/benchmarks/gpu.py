"""What the GPU suites share: finding CuPy and a GPU (or skipping), seeded bf16 inputs, synchronisation, CUDA-event
timing, and a count of the kernels a process compiled.

Nothing here touches the CUDA driver at import: asv's forkserver imports the suites once and forks a process per
benchmark, and a driver initialised before a fork is unusable after it.
"""

import statistics

import numpy as np

from .common import first_module


def cupy_or_skip():
    """CuPy, where it and a CUDA device are there; otherwise ``NotImplementedError``, which asv reports as a skip."""
    try:
        import cupy
    except ImportError as err:
        raise NotImplementedError(f"the GPU suites need CuPy: {err}") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # no driver
        raise NotImplementedError(f"no CUDA device: {err}") from None
    if count == 0:
        raise NotImplementedError("no CUDA device")
    return cupy


def bfloat16():
    import ml_dtypes  # CuPy's bfloat16 is ml_dtypes'

    return np.dtype(ml_dtypes.bfloat16)


def random_arrays(cupy, shapes, seed=0):
    """bf16 arrays of standard normal values, one per shape, the same for a given seed: float32 values drawn on the
    device and cut to their top 16 bits (no bf16 arithmetic there), or, should CuPy refuse the bf16 view, drawn and
    rounded on the host (as tests/gpu does)."""
    arrays = []
    for i, shape in enumerate(shapes):
        try:
            bits = cupy.random.RandomState(seed + 1000 * i).standard_normal(shape, dtype=cupy.float32).view(cupy.uint32)
            arrays.append((bits >> 16).astype(cupy.uint16).view(bfloat16()))
        except Exception:
            rng = np.random.default_rng(seed + 1000 * i)
            arrays.append(cupy.asarray(rng.standard_normal(shape, dtype=np.float32).astype(bfloat16())))
    return arrays


def synchronize(cupy):
    cupy.cuda.get_current_stream().synchronize()


def gpu_ms(cupy, fn, reps=10, warmup=2, batch=1):
    """Median milliseconds per call of ``fn`` (a callable, or a list of them taken in turn) between CUDA events
    recorded around ``batch`` calls, after ``warmup`` calls: device time, plus whatever host time keeps the device
    waiting (with batch > 1, host time of one call overlaps the device work of the one before)."""
    fns = fn if isinstance(fn, list) else [fn]
    for i in range(warmup):
        fns[i % len(fns)]()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(reps):
        start.record()
        for i in range(batch):
            fns[i % len(fns)]()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / batch)
    return statistics.median(times)


def l2_bytes(cupy):
    return int(cupy.cuda.Device().attributes["L2CacheSize"])


# the memoised builders of the CUDA backend under both layouts: each entry is one NVRTC build (a RawModule or a
# module for sm_90a); the CuPy ones may come from CuPy's on-disk cache
_BUILDERS = {
    ("maskattn.backends.cuda.kernels", "maskattn._cuda"): (
        "fwd_kernel", "_fwd_kernel", "combine_kernel", "_combine_kernel", "sm90_function"),
    ("maskattn.backends.cuda.bwd", "maskattn._cuda_backward"): ("_kernels",),
}


def kernels_built():
    """How many kernel modules this process has built so far (0 where the package's builders are not found)."""
    count = 0
    for modules, names in _BUILDERS.items():
        try:
            module = first_module(*modules)
        except ImportError:
            continue
        for name in names:
            info = getattr(getattr(module, name, None), "cache_info", None)
            count += info().currsize if info else 0
    return count
