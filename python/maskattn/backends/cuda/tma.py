"""CUDA backend: tensor maps for the copy engine (``gpu/tma.cuh``), encoded on the host by the driver's
``cuTensorMapEncodeTiled``.

The call goes through ctypes on ``libcuda``: the driver API is where tensor maps are made, every machine that runs the
kernels has the driver, and CuPy does not expose this entry point; ``cuda-bindings`` would, at the price of a
dependency for one call. A map holds its tensor's address, so a launch re-encodes its maps when a call's arrays
moved (a few microseconds, host only).
"""

from __future__ import annotations

import ctypes
import functools

# CUtensorMap* enums of cuda.h
_DATA_UINT16 = 1  # a 16-bit element: the copy engine moves bytes, fp16 and bf16 alike (rows past n arrive as zeros)
_INTERLEAVE_NONE = 0
_SWIZZLE_128B = 3  # wgmma.cuh's shared layout: chunk c of row r at c ^ (r % 8) in 128-byte rows
_L2_PROMOTION_256B = 3
_OOB_FILL_ZEROS = 0
MAP_BYTES = 128  # sizeof(CUtensorMap)
BOX_COLUMNS = 64  # 64 16-bit elements: the 128 bytes the swizzle spans


@functools.lru_cache(maxsize=None)
def _encode_tiled():
    fn = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
                   ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return fn


class TensorMap:
    """The tensor map of a (B, H, n, D) array of 16-bit elements (strides in elements, the last dimension
    contiguous) for boxes of 64 columns x ``rows`` rows, in 64-byte aligned host memory (``slot``, what a kernel
    launch passes by value); :meth:`point_at` encodes it for an address."""

    def __init__(self, shape, strides, rows: int):
        B, H, n, D = shape
        sb, sh, sn = strides
        self.dims = (ctypes.c_uint64 * 4)(D, n, H, B)
        self.strides = (ctypes.c_uint64 * 3)(2 * sn, 2 * sh, 2 * sb)  # bytes, of dims 1..3
        self.box = (ctypes.c_uint32 * 4)(BOX_COLUMNS, rows, 1, 1)
        self.raw = (ctypes.c_uint8 * (MAP_BYTES + 64))()
        at = -ctypes.addressof(self.raw) % 64
        self.slot = (ctypes.c_uint8 * MAP_BYTES).from_buffer(self.raw, at)
        self.address = None

    def point_at(self, address: int):
        if address == self.address:
            return
        status = _encode_tiled()(ctypes.addressof(self.slot), _DATA_UINT16, 4, address, self.dims, self.strides,
                                 self.box, (ctypes.c_uint32 * 4)(1, 1, 1, 1), _INTERLEAVE_NONE, _SWIZZLE_128B,
                                 _L2_PROMOTION_256B, _OOB_FILL_ZEROS)
        if status != 0:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {status}) for a tensor of dims "
                               f"{tuple(self.dims)} and byte strides {tuple(self.strides)} at {address:#x}")
        self.address = address
