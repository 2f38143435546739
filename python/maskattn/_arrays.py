"""Arrays in and out: NumPy, CuPy and any DLPack producer (torch), without copies.

``ingest`` turns the caller's arrays into NumPy (host) or CuPy (GPU) arrays that share memory with them and
returns a function that hands results back as the caller's type (torch in, torch out).

CUDA torch tensors of a floating dtype skip DLPack when torch and CuPy both work on their default stream (the
usual case): the Python side of ``torch.Tensor.__dlpack__`` costs about 30 us per tensor, more than a decode
step's kernel. The view is built from the tensor's pointer, shape and strides and keeps the tensor alive.
"""

from __future__ import annotations

import numpy as np

_KDL_CPU, _KDL_CUDA = 1, 2


def cupy_or_none():
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def require_finite(xp, **arrays):
    """Raise ValueError naming the first of ``arrays`` (name=array, of array module ``xp``) that holds inf or NaN."""
    for name, x in arrays.items():
        if not bool(xp.isfinite(x).all()):
            raise ValueError(f"{name} holds inf or NaN; attention inputs must be finite")


def _device_of(x) -> str:
    if isinstance(x, np.ndarray):
        return "cpu"
    cupy = cupy_or_none()
    if cupy is not None and isinstance(x, cupy.ndarray):
        return f"cuda:{x.device.id}"
    kind, index = x.__dlpack_device__()
    return "cpu" if kind == _KDL_CPU else ("cuda:%d" % index if kind == _KDL_CUDA else f"dlpack device {kind}:{index}")


def torch_view(cupy, x):
    """A CuPy view of a CUDA torch tensor built from its pointer, shape and strides, or None for a dtype CuPy cannot
    name here (float16 / bfloat16 / float32, and bool / uint8 for masks and plan buffers)."""
    dtype = _torch_dtypes().get(x.dtype)
    if dtype is None:
        return None
    item = dtype.itemsize
    strides = x.stride()
    span = 1 + sum((n - 1) * s for n, s in zip(x.shape, strides)) if x.numel() else 0
    memory = cupy.cuda.UnownedMemory(x.data_ptr(), span * item, x, x.get_device())
    return cupy.ndarray(tuple(x.shape), dtype, cupy.cuda.MemoryPointer(memory, 0), tuple(s * item for s in strides))


def _torch_default_stream():
    """device index -> whether torch's current stream there is the default one, asked once per device."""
    import torch

    known = {}

    def default_stream(device):
        if device not in known:
            known[device] = torch.cuda.current_stream(device).cuda_stream == 0
        return known[device]

    return default_stream


def _torch_dtypes() -> dict:
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        import torch

        _TORCH_DTYPES = {torch.float16: np.dtype(np.float16), torch.float32: np.dtype(np.float32),
                         torch.bool: np.dtype(np.bool_), torch.uint8: np.dtype(np.uint8)}
        try:  # CuPy's bfloat16 is ml_dtypes'; without it bfloat16 tensors go through DLPack
            import ml_dtypes

            _TORCH_DTYPES[torch.bfloat16] = np.dtype(ml_dtypes.bfloat16)
        except ImportError:
            pass
    return _TORCH_DTYPES


_TORCH_DTYPES = None


def _import(name, x, default_stream=None):
    """(array, device string): a NumPy or CuPy view of x."""
    if isinstance(x, np.ndarray):
        return x, "cpu"
    cupy = cupy_or_none()
    if cupy is not None and isinstance(x, cupy.ndarray):
        return x, _device_of(x)
    if (cupy is not None and type(x).__module__.split(".")[0] == "torch" and x.is_cuda
            and cupy.cuda.get_current_stream().ptr == 0
            and (default_stream or _torch_default_stream())(x.get_device())):
        # CuPy works on the stream torch works on: a view needs no DLPack stream handshake
        view = torch_view(cupy, x)
        if view is not None:
            return view, f"cuda:{view.device.id}"
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"{name} must be a NumPy array, a CuPy array or a DLPack tensor (torch, ...); "
                        f"got {type(x).__name__}")
    device = _device_of(x)
    if device == "cpu":
        try:
            return np.from_dlpack(x), device
        except (TypeError, BufferError, RuntimeError) as err:
            raise TypeError(f"{name} ({type(x).__name__}, dtype {getattr(x, 'dtype', '?')}) cannot be read by NumPy: "
                            f"{err}; the CPU backend computes in float32 or float64") from None
    if device.startswith("cuda"):
        if cupy is None:
            raise ImportError(f"{name} is on {device}; the CUDA backend needs CuPy: "
                              "pip install 'maskattn[cuda12]' or 'maskattn[cuda13]'")
        return cupy.from_dlpack(x), device
    raise ValueError(f"{name} is on {device}; maskattn runs on the CPU or on CUDA devices")


class _Exporter:
    """Hands results back as the type of ``like`` (torch in, torch out)."""

    def __init__(self, like):
        self.like = like
        self.module = type(like).__module__.split(".")[0]

    def __call__(self, a):
        if a is None or isinstance(self.like, np.ndarray):
            return a
        cupy = cupy_or_none()
        if cupy is not None and isinstance(self.like, cupy.ndarray):
            return a
        if self.module == "torch":
            import torch

            return torch.from_dlpack(a)
        from_dlpack = getattr(__import__(self.module), "from_dlpack", None)
        return a if from_dlpack is None else from_dlpack(a)


def ingest(**arrays):
    """NumPy / CuPy views of the named arrays, their common device, and the exporter back to the caller's type.

    Raises
    ------
    TypeError
        An input is not an array.
    ValueError
        The inputs live on different devices (each input's device is named).
    """
    views, devices = {}, {}
    from_torch = any(type(x).__module__.startswith("torch") for x in arrays.values())
    default_stream = _torch_default_stream() if from_torch else None
    for name, x in arrays.items():
        views[name], devices[name] = _import(name, x, default_stream)
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{name} on {dev}" for name, dev in devices.items())
        raise ValueError(f"inputs must live on one device; got {listing}")
    return views, next(iter(devices.values())), _Exporter(next(iter(arrays.values())))
