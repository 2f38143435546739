"""CUDA backend: plans on the device. The one-copy upload of a host plan (:func:`device_plan`, cached on the plan by
device), and the plans of dense boolean masks that live on a GPU, built there end to end (:func:`dense_plan`,
``gpu/dense_plan.cu``; :func:`plan_reference` is its NumPy twin).
"""

from __future__ import annotations

import functools

import numpy as np

from ..._maskprep.plan import PlanArrays, rank_levels
from ...plan import FULL, PARTIAL, PLAN_ARRAYS, BlockMask, check_tile
from .kernels import cached_per_sources, import_cupy, kernel_source, sources_key
from .launch import Launcher


def device_plan(plan: BlockMask) -> "DevicePlan":
    """The plan's arrays on the current device, uploaded once and cached on the plan by device id.

    Indexed by BlockMask attribute name (``row_ptr``, ``col_idx``, ``kind``, ``m_order``, ...) it gives CuPy arrays;
    arrays the plan lacks (``bit_pool`` of an interval plan, say) give None. The plan's arrays already lie in one host
    buffer (``plan.buffer``, laid out by the compiler): it travels in one host-to-device copy, with nothing to repack.
    Copied after it (:func:`upload_pieces`): ``m_levels`` and ``n_levels`` (int32 (rows, 2), ``rank_levels`` of the
    CTA orders: the kernels start each run of rows in one length band head by head; a plan built on the device has
    its own, written by ``dense_plan_fill``: a run ends wherever one mask group's band changes) and, for a plan with a
    node order, ``perm`` (int32).
    """
    if not isinstance(plan, BlockMask):
        raise TypeError(f"expected a BlockMask; got {type(plan).__name__}")
    cupy = import_cupy()
    device_id = cupy.cuda.Device().id
    cached = plan._device_cache.get(device_id)
    if cached is None:
        pieces, layout = upload_pieces(plan)
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


def upload_pieces(plan: BlockMask) -> tuple[tuple[np.ndarray, np.ndarray], dict]:
    """What :func:`device_plan` copies, in order (the plan's buffer, then a trailer of ``m_levels`` and ``n_levels``
    where a run holds more than one rank, and ``perm`` where the plan has one, each at a 16-byte aligned offset), and
    the layout of the two together. Without runs longer than a rank (one query block, as in decode) the kernels get
    none and skip the load."""
    host, layout = plan.buffer, dict(plan.layout)
    extra = {}
    for name, ptr, order in (("m_levels", plan.row_ptr, plan.m_order), ("n_levels", plan.col_ptr, plan.n_order)):
        levels = rank_levels(ptr, order)
        if np.any(levels[:, 1] - levels[:, 0] > 1):
            extra[name] = levels
    if plan.perm is not None:
        extra["perm"] = np.ascontiguousarray(plan.perm, dtype=np.int32)
    padded = {name: -(-x.nbytes // 16) * 16 for name, x in extra.items()}
    trailer, at = np.zeros(sum(padded.values()), np.uint8), 0
    for name, x in extra.items():
        trailer[at:at + x.nbytes] = x.reshape(-1).view(np.uint8)
        layout[name] = (host.nbytes + at, x.shape, x.dtype)  # host.nbytes: a multiple of 16
        at += padded[name]
    return (host, trailer), layout


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
        elif name not in PLAN_ARRAYS and name not in ("perm", "m_levels", "n_levels"):
            raise KeyError(name)
        return view


def rebind(launchers, old: BlockMask, new: BlockMask):
    """Moves the plan pointers of ``launchers`` (a launch prepared over plan ``old``) to plan ``new``, which must be
    laid out alike: two plans built on the device for the same geometry (``transient`` ones, which a prepared call
    runs one after another)."""
    was, now = device_plan(old), device_plan(new)
    same = (old.shape, old.tile, old.payload, old.perm) == (new.shape, new.tile, new.payload, new.perm)
    if not same or was.layout != now.layout or was.buffer.device.id != now.buffer.device.id:
        raise ValueError(f"a launch prepared over the plan of shape {old.shape}, tile {old.tile} cannot run one of "
                         f"shape {new.shape}, tile {new.tile} laid out otherwise")
    start = was.buffer.data.ptr
    for launcher in launchers:
        launcher.move_pointers(start, start + was.buffer.nbytes, now.buffer.data.ptr)


@functools.lru_cache(maxsize=None)
def _upload_stream(device_id: int):
    return import_cupy().cuda.Stream(non_blocking=True)


# Dense masks on the GPU -------------------------------------------------------------------------------------------
#
# A plan of a dense mask is built where the mask lives, in one device buffer laid out from the shapes alone: the
# number of entries and of PARTIAL tiles is known on the device only, so every entry array has room for every tile
# (9 bytes a tile in each direction) and the bit pool one slot per tile (tile_m * tile_n / 8 bytes, an eighth of the
# mask; only PARTIAL tiles' slots are written). A PARTIAL entry's payload index is its tile index, so the pool needs
# no compaction and the plan no copy to the host: nothing waits for the GPU. Entries past the entry count and the
# slots of other tiles are never read. The plan also has its CTA orders' runs (m_levels, n_levels, rank_levels of the
# plan, which upload_pieces gives a host plan). After the plan's arrays come the builder's counters and tile kinds.

_DENSE_ARRAYS = ("row_ptr", "col_idx", "kind", "payload_idx", "col_ptr", "row_idx", "bwd_kind", "bwd_payload_idx",
                 "m_order", "n_order", "m_levels", "n_levels", "tile_kind", "row_len", "col_len", "group_len",
                 "bit_pool")
_PLAN_THREADS = 256  # PLAN_THREADS in dense_plan.cu
_PLAN_SPAN = 4  # PLAN_SPAN there: the adjacent tiles of a query block one classifying CTA takes


@functools.lru_cache(maxsize=256)
def dense_layout(groups: int, n_q: int, n_k: int, tile) -> tuple[dict, int]:
    """The layout ``{name: (offset, shape, dtype)}`` (16-byte aligned, as ``PlanArrays``) of the device buffer of a
    dense mask's plan (groups, n_q, n_k) for ``tile``, and its size in bytes."""
    tile_m, tile_n = tile
    m, n = -(-n_q // tile_m), -(-n_k // tile_n)
    tiles = groups * m * n
    shapes = {"row_ptr": (groups, m + 1), "col_idx": (tiles,), "kind": (tiles,), "payload_idx": (tiles,),
              "col_ptr": (groups, n + 1), "row_idx": (tiles,), "bwd_kind": (tiles,), "bwd_payload_idx": (tiles,),
              "m_order": (groups, m), "n_order": (groups, n), "m_levels": (m, 2), "n_levels": (n, 2),
              "tile_kind": (tiles,), "row_len": (groups * m,), "col_len": (groups * n,), "group_len": (groups,),
              "bit_pool": (tiles, tile_m * tile_n // 32)}
    dtypes = {"tile_kind": np.dtype(np.uint8), "row_len": np.dtype(np.int32), "col_len": np.dtype(np.int32),
              "group_len": np.dtype(np.int32), "m_levels": np.dtype(np.int32), "n_levels": np.dtype(np.int32),
              **PLAN_ARRAYS}
    layout, size = {}, 0
    for name in _DENSE_ARRAYS:
        layout[name] = (size, shapes[name], dtypes[name])
        size += -(-int(np.prod(shapes[name])) * dtypes[name].itemsize // 16) * 16
    return layout, size


def _views(buffer, layout) -> dict:
    """NumPy views of a host copy of a dense plan's buffer (the bit pool where the copy holds it)."""
    return {name: np.ndarray(shape, dtype, buffer, offset) for name, (offset, shape, dtype) in layout.items()
            if offset + int(np.prod(shape)) * dtype.itemsize <= buffer.nbytes}


def _partial_tiles(views) -> np.ndarray:
    """The tiles of the PARTIAL forward entries, in entry order (their slots of the bit pool)."""
    nnz = int(views["row_ptr"][-1, -1])
    return views["payload_idx"][:nnz][views["kind"][:nnz] == PARTIAL]


def host_arrays(views, pool) -> PlanArrays:
    """The host arrays of a dense plan built in the device layout (:func:`dense_layout`; ``views`` as
    :func:`_views` gives them, ``pool``: the bit pool's slots at :func:`_partial_tiles`, in that order): the entry
    arrays cut to the entry count and the pool to the PARTIAL entries, payload indices renumbered to match."""
    nnz = int(views["row_ptr"][-1, -1])
    tiles = _partial_tiles(views)
    slot = np.full(views["tile_kind"].size, -1, np.int32)
    slot[tiles] = np.arange(tiles.size, dtype=np.int32)

    def renumber(payload):
        return np.where(payload >= 0, slot[np.maximum(payload, 0)], -1).astype(np.int32)

    arrays = {name: views[name][:nnz] for name in ("col_idx", "kind", "row_idx", "bwd_kind")}
    arrays.update({name: views[name] for name in ("row_ptr", "col_ptr", "m_order", "n_order")})
    arrays.update(payload_idx=renumber(views["payload_idx"][:nnz]),
                  bwd_payload_idx=renumber(views["bwd_payload_idx"][:nnz]), bit_pool=pool)
    out = PlanArrays({name: a.shape for name, a in arrays.items()}, tiles.size)
    for name, a in arrays.items():
        offset, shape, dtype = out.layout[name]
        np.ndarray(shape, dtype, out.buffer, offset)[...] = a
    return out


def plan_reference(mask, tile) -> np.ndarray:
    """The NumPy twin of ``gpu/dense_plan.cu``: the device buffer of a bool mask (B, H, n_q, n_k)'s plan, as the two
    kernels write it, byte for byte where they write (entry arrays up to the entry count, bit pool slots of PARTIAL
    tiles; the rest is zero here and left unwritten there)."""
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.ndim != 4:
        raise TypeError(f"mask must be a 4-d bool array; got {mask.dtype} of shape {mask.shape}")
    B, H, n_q, n_k = mask.shape
    tile_m, tile_n = check_tile(tile)
    groups, m, n = B * H, -(-n_q // tile_m), -(-n_k // tile_n)
    layout, size = dense_layout(groups, n_q, n_k, (tile_m, tile_n))
    buffer = np.zeros(size, np.uint8)
    v = _views(buffer, layout)
    padded = np.zeros((groups, m * tile_m, n * tile_n), bool)
    padded[:, :n_q, :n_k] = mask.reshape(groups, n_q, n_k)
    bits = padded.reshape(groups, m, tile_m, n, tile_n).transpose(0, 1, 3, 2, 4).reshape(groups * m * n, -1)
    ones = bits.sum(axis=1)
    valid = np.minimum(tile_m, n_q - np.arange(m) * tile_m)[:, None] * np.minimum(tile_n, n_k - np.arange(n) * tile_n)
    kind = np.where(ones == 0, 0, np.where(ones == np.tile(valid.ravel(), groups), FULL, PARTIAL)).astype(np.uint8)
    v["tile_kind"][:] = kind
    partial = kind == PARTIAL
    v["bit_pool"][partial] = np.packbits(bits[partial], axis=1, bitorder="little").view(np.uint32)
    listed = (kind != 0).reshape(groups, m, n)
    lengths = {"row": listed.sum(axis=2), "col": listed.sum(axis=1)}
    v["row_len"][:], v["col_len"][:] = lengths["row"].ravel(), lengths["col"].ravel()
    v["group_len"][:] = listed.sum(axis=(1, 2))
    tile_ids = np.arange(groups * m * n).reshape(groups, m, n)
    # forward entries in (g, m, n) order: key block tile % n; backward ones in (g, n, m) order: query block
    # tile // n % m; offsets global across groups
    for ptr, idx, kinds, payload, order, per_line, ids, block in (
            ("row_ptr", "col_idx", "kind", "payload_idx", "m_order", lengths["row"], tile_ids, lambda t: t % n),
            ("col_ptr", "row_idx", "bwd_kind", "bwd_payload_idx", "n_order", lengths["col"],
             tile_ids.transpose(0, 2, 1), lambda t: t // n % m)):
        lines = per_line.shape[1]
        starts = np.concatenate([[0], np.cumsum(per_line.ravel())])
        v[ptr][:] = starts[np.arange(groups)[:, None] * lines + np.arange(lines + 1)]
        entries = ids.ravel()[kind[ids.ravel()] != 0]
        v[idx][:entries.size] = block(entries)
        v[kinds][:entries.size] = kind[entries]
        v[payload][:entries.size] = np.where(kind[entries] == PARTIAL, entries, -1)
        v[order][:] = np.argsort(-per_line, axis=1, kind="stable")
    v["m_levels"][:] = rank_levels(v["row_ptr"], v["m_order"])
    v["n_levels"][:] = rank_levels(v["col_ptr"], v["n_order"])
    return buffer


@cached_per_sources
def _plan_kernels(device_id: int):
    cupy = import_cupy()
    module = cupy.RawModule(code=kernel_source("dense_plan.cu"), options=("-std=c++17",))
    return module.get_function("dense_plan_classify"), module.get_function("dense_plan_fill")


class _DenseLaunch:
    """The two launches that build a dense plan for one geometry (mask shape and strides, tile, device), with every
    argument but the mask and the buffer fixed: ``zero``, ``classify`` and ``fill`` in that order (what a call does;
    scripts/probe_dense_plan.py times them one by one)."""

    CLASSIFY_ARRAYS = ("tile_kind", "bit_pool", "row_len", "col_len", "group_len")  # after the mask
    FILL_ARRAYS = ("tile_kind", "row_len", "col_len", "group_len", "row_ptr", "col_idx", "kind", "payload_idx",
                   "m_order", "col_ptr", "row_idx", "bwd_kind", "bwd_payload_idx", "n_order", "m_levels", "n_levels")

    def __init__(self, device_id, groups, mask_heads, n_q, n_k, tile, strides):
        tile_m, tile_n = tile
        m, n = -(-n_q // tile_m), -(-n_k // tile_n)
        self.layout, self.nbytes = dense_layout(groups, n_q, n_k, tile)
        classify, fill = _plan_kernels(device_id)
        i32, i64 = np.int32, np.int64
        self.classify_fixed = (*(i64(s) for s in strides), i32(mask_heads), i32(n_q), i32(n_k), i32(tile_m),
                               i32(tile_n), i32(m), i32(n))  # the classify kernel's arguments after its arrays
        self.classify_launch = Launcher(classify, (groups * m * -(-n // _PLAN_SPAN), 1, 1), (_PLAN_THREADS, 1, 1), 0,
                                        1 + len(self.CLASSIFY_ARRAYS), self.classify_fixed)
        warps = groups * (m + n)
        self.fill_launch = Launcher(fill, (-(-warps * 32 // _PLAN_THREADS), 1, 1), (_PLAN_THREADS, 1, 1), 0,
                                    len(self.FILL_ARRAYS), (i32(groups), i32(m), i32(n)))
        self.zero_from, self.zero_to = self.layout["row_len"][0], self.layout["bit_pool"][0]
        # the runs' bytes, set to 0xff: every first -1 and every end 0xffffffff, for dense_plan_fill's atomics
        self.runs_from, self.runs_to = self.layout["m_levels"][0], self.layout["tile_kind"][0]

    def arrays(self, buffer: int, names) -> list:
        """The device addresses of the named arrays of a plan's buffer."""
        return [buffer + self.layout[name][0] for name in names]

    def zero(self, stream: int, buffer: int):
        runtime = import_cupy().cuda.runtime
        runtime.memsetAsync(buffer + self.runs_from, 0xFF, self.runs_to - self.runs_from, stream)
        runtime.memsetAsync(buffer + self.zero_from, 0, self.zero_to - self.zero_from, stream)

    def classify(self, stream: int, mask: int, buffer: int):
        self.classify_launch(stream, mask, *self.arrays(buffer, self.CLASSIFY_ARRAYS))

    def fill(self, stream: int, buffer: int):
        self.fill_launch(stream, *self.arrays(buffer, self.FILL_ARRAYS))

    def __call__(self, stream: int, mask: int, buffer: int):
        self.zero(stream, buffer)
        self.classify(stream, mask, buffer)
        self.fill(stream, buffer)


@functools.lru_cache(maxsize=64)
def _dense_launch(sources, *geometry) -> _DenseLaunch:
    """The launches for a geometry, made inside its device's context (the kernels are looked up there); keyed by the
    kernel-source folder too (``sources``: kernels.sources_key), as the kernels they hold are."""
    return _DenseLaunch(*geometry)


def dense_plan(mask, tile, *, buffer=None, stream: int | None = None, transient: bool = False) -> BlockMask:
    """The plan of a CuPy bool mask (B, H, n_q, n_k) for ``tile``, built on the mask's GPU.

    Parameters
    ----------
    mask : cupy.ndarray of bool, 4-d
        Any strides (0 for a broadcast dimension); read 16 bytes at a time where a row's bytes are contiguous and
        aligned. The plan has its shape: mask groups ``b * H + h``.
    tile : (tile_m, tile_n)
    buffer : cupy.ndarray of uint8, optional
        The memory to build the plan in (``dense_layout(B * H, n_q, n_k, tile)[1]`` bytes, 16-byte aligned, on the
        mask's device: e.g. a view of a torch tensor, so that torch owns it); allocated when None.
    stream : int, optional
        The CUDA stream to build on (a ``cudaStream_t`` value, e.g. torch's current stream's); default CuPy's current
        stream.
    transient : bool
        The plan serves one call (see :class:`BlockMask`).

    Returns
    -------
    BlockMask
        Its arrays on the device (:func:`device_plan` returns them); the host arrays are copied back on first read.
        Nothing is synchronised: the launches are queued behind the work that made the mask.
    """
    cupy = import_cupy()
    if not isinstance(mask, cupy.ndarray) or mask.dtype != np.bool_ or mask.ndim != 4:
        raise TypeError(f"mask must be a 4-d bool cupy.ndarray; got {type(mask).__name__} "
                        f"{getattr(mask, 'dtype', '')} {getattr(mask, 'shape', '')}")
    tile = check_tile(tile)
    B, H, n_q, n_k = mask.shape
    device_id = mask.device.id
    with mask.device:
        launch = _dense_launch(sources_key(), device_id, B * H, H, n_q, n_k, tile, mask.strides)
        if buffer is None:
            buffer = cupy.empty(launch.nbytes, np.uint8)
        _check_buffer(buffer, launch.nbytes, device_id)
        launch(cupy.cuda.get_current_stream().ptr if stream is None else stream, mask.data.ptr, buffer.data.ptr)
    return wrap_dense_plan(buffer, mask.shape, tile, transient=transient)


def _check_buffer(buffer, nbytes, device_id):
    if buffer.dtype != np.uint8 or buffer.nbytes != nbytes or buffer.data.ptr % 16 or buffer.device.id != device_id:
        raise ValueError(f"the plan's buffer must be {nbytes} uint8 bytes, 16-byte aligned, on device {device_id}; "
                         f"got {buffer.dtype} of {buffer.nbytes} bytes at {buffer.data.ptr:#x} on device "
                         f"{buffer.device.id}")


def wrap_dense_plan(buffer, shape, tile, *, transient: bool = False) -> BlockMask:
    """The :class:`BlockMask` of a plan :func:`dense_plan` built in ``buffer`` for a mask of ``shape``, without
    building anything (the backward of ``maskattn.torch.scaled_dot_product_attention`` reads its forward's plan)."""
    B, H, n_q, n_k = shape
    tile = check_tile(tile)
    layout, nbytes = dense_layout(B * H, n_q, n_k, tile)
    device_id = buffer.device.id
    _check_buffer(buffer, nbytes, device_id)
    arrays = DevicePlan(buffer, layout)
    return BlockMask.built_on_device(shape, tile, device_id, arrays, functools.partial(_fetch, arrays, device_id),
                                     transient=transient)


def _fetch(arrays: DevicePlan, device_id: int) -> PlanArrays:
    """The host arrays of a plan built on the device: everything before the bit pool in one copy, then the PARTIAL
    tiles' slots of the pool (``host_arrays``)."""
    cupy = import_cupy()
    with cupy.cuda.Device(device_id) as device:
        device.synchronize()  # built on some stream: finished before it is read on this one
        host = cupy.asnumpy(arrays.buffer[:arrays.layout["bit_pool"][0]])
        views = _views(host, arrays.layout)
        tiles = _partial_tiles(views)
        words = arrays.layout["bit_pool"][1][1]
        pool = (cupy.asnumpy(arrays["bit_pool"][cupy.asarray(tiles)]) if tiles.size else
                np.empty((0, words), np.uint32))
    return host_arrays(views, pool)
