"""CUDA backend: plans on the device. The one-copy upload of a host plan (:func:`device_plan`, cached on the plan by
device), and the plans of dense boolean masks that live on a GPU, classified there (``gpu/classify.cu``).
"""

from __future__ import annotations

import functools

import numpy as np

from ..._maskprep import plan as _maskprep
from ...plan import PLAN_ARRAYS, BlockMask
from .kernels import import_cupy, source_dir


def device_plan(plan: BlockMask) -> "DevicePlan":
    """The plan's arrays on the current device, uploaded once and cached on the plan by device id.

    Indexed by BlockMask attribute name (``row_ptr``, ``col_idx``, ``kind``, ``m_order``, ...) it gives CuPy arrays;
    arrays the plan lacks (``bit_pool`` of an interval plan, say) give None. The plan's arrays already lie in one host
    buffer (``plan.buffer``, laid out by the compiler): it travels in one host-to-device copy, with nothing to repack.
    A plan with a node order also gives ``perm`` (int32), copied after the buffer.
    """
    if not isinstance(plan, BlockMask):
        raise TypeError(f"expected a BlockMask; got {type(plan).__name__}")
    cupy = import_cupy()
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
            view = self.views[name] = import_cupy().ndarray(shape, dtype, memptr=self.buffer.data + offset)
        elif name not in PLAN_ARRAYS and name != "perm":
            raise KeyError(name)
        return view


@functools.lru_cache(maxsize=None)
def _upload_stream(device_id: int):
    return import_cupy().cuda.Stream(non_blocking=True)



@functools.lru_cache(maxsize=None)
def _classify_kernel(device_id: int):
    cupy = import_cupy()
    module = cupy.RawModule(code=(source_dir() / "classify.cu").read_text(), options=("-std=c++17",))
    return module.get_function("classify_dense")


def dense_tiles(mask, tile):
    """The plan's arrays of a CuPy bool mask (groups, n_q, n_k) for ``tile``, as ``maskprep.dense_plan`` writes them
    for a host mask: the kernel classifies every tile on the device, and only the tile kinds and the bits of PARTIAL
    tiles come to the host, where the same deduplication and transpose as for host masks finish the plan."""
    cupy = import_cupy()
    tile_m, tile_n = tile
    mask = cupy.ascontiguousarray(mask)
    groups, n_q, n_k = mask.shape
    rows, cols = -(-n_q // tile_m), -(-n_k // tile_n)
    tiles = groups * rows * cols
    words = tile_m * tile_n // 32
    with mask.device:
        kind = cupy.empty(tiles, np.uint8)
        bits = cupy.empty((tiles, words), np.uint32)
        i32 = np.int32
        _classify_kernel(mask.device.id)((tiles,), (256,), (mask, kind, bits, i32(n_q), i32(n_k), i32(tile_m), i32(tile_n),
                                                  i32(rows), i32(cols)))
        kind = kind.get()
        listed = np.flatnonzero(kind)
        partial = kind[listed] == 2
        partial_bits = bits[cupy.asarray(listed[partial])].get()
    # global offsets: a group's first offset is the previous group's last
    ends = np.cumsum(np.bincount(listed // cols, minlength=groups * rows)).reshape(groups, rows)
    row_ptr = np.concatenate([np.concatenate([[0], ends[:-1, -1]])[:, None], ends], axis=1).astype(np.int64)
    raw = {
        "row_ptr": row_ptr,
        "col_idx": (listed % cols).astype(np.int32),
        "kind": kind[listed],
        "payload": np.where(partial, np.cumsum(partial) - 1, -1).astype(np.int32),
        "bits": partial_bits,
    }
    return _maskprep.finish_bits(raw, n_q, n_k, tile_m, tile_n)
