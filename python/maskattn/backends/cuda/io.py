"""CUDA backend: what a prepared call does to the caller's arrays, per array type: CuPy arrays (:class:`CupyIO`) and
CUDA torch tensors (:class:`TorchIO`: allocations by torch, launches on torch's current stream).
"""

from __future__ import annotations

import numpy as np

from ..._arrays import cupy_or_none, torch_view


class CupyIO:
    """What a prepared CUDA call does to the caller's arrays, for CuPy arrays: their signature (what a prepared call
    depends on besides the data), device addresses, allocations like them, the stream to launch on."""

    def __init__(self):
        self.cupy = cupy_or_none()

    def signature(self, x):
        return x.shape, x.strides, x.dtype, x.device.id

    def address(self, x) -> int:
        return x.data.ptr

    def empty(self, shape, like, float32=False):
        with like.device:
            return self.cupy.empty(shape, dtype=np.float32 if float32 else like.dtype)

    def stream(self, like) -> int:
        return self.cupy.cuda.get_current_stream().ptr

    def view(self, x):
        """A CuPy view for the launch checks (shapes, strides, dtype, device, pointer)."""
        return x


class TorchIO(CupyIO):
    """As CupyIO, for CUDA torch tensors: allocations by torch, launches on torch's current stream (so calls order
    with the caller's other work and can be captured in CUDA graphs)."""

    def __init__(self):
        super().__init__()
        import torch

        self.torch = torch

    def signature(self, x):
        return x.shape, x.stride(), x.dtype, x.device

    def address(self, x) -> int:
        return x.data_ptr()

    def empty(self, shape, like, float32=False):
        return self.torch.empty(shape, dtype=self.torch.float32 if float32 else like.dtype, device=like.device)

    def stream(self, like) -> int:
        return self.torch.cuda.current_stream(like.device).cuda_stream

    def view(self, x):
        view = torch_view(self.cupy, x)
        return self.cupy.from_dlpack(x.detach()) if view is None else view


_IO: dict = {}


def io_for(x):
    """The CupyIO / TorchIO for x (CuPy arrays, CUDA torch tensors), or None (NumPy, CPU tensors, other DLPack
    producers)."""
    cls = type(x)
    io = _IO.get(cls)
    if io is None:
        cupy = cupy_or_none()
        if cupy is not None and cls is cupy.ndarray:
            io = _IO[cls] = CupyIO()
        elif cupy is not None and cls.__module__.split(".")[0] == "torch" and hasattr(x, "is_cuda"):
            io = _IO[cls] = TorchIO()
        else:
            return None
    return io if io.__class__ is CupyIO or x.is_cuda else None
