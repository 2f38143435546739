# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""maskprep.plan: compile masks into block lists (the arrays behind maskattn.BlockMask).

Each ``def`` validates and normalises its inputs, releases the GIL and calls a C++ worker from the
headers beside this file. The plan compilers return :class:`PlanArrays`: every array of the plan written in place
into one host buffer, which ``maskattn.plan.BlockMask`` views and the CUDA backend uploads in one copy.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy
from libcpp.vector cimport vector

import numpy as np


cdef extern from "blocks.hpp" namespace "maskprep" nogil:
    cdef cppclass BlockList:
        vector[int64_t] ptr
        vector[int32_t] idx
        vector[uint8_t] kind
        vector[int32_t] payload
    int64_t tile_words(int64_t tile_m, int64_t tile_n)
    vector[uint32_t] dedup_tiles(const vector[uint32_t]& bits, int64_t words, vector[int32_t]& payload) except +
    BlockList transpose(const BlockList& fwd, int64_t groups, int64_t rows, int64_t cols) except +
    void order_by_length(const int64_t* ptr, int64_t groups, int64_t rows, int32_t* order)
    void order_levels(const int64_t* ptr, const int32_t* order, int64_t groups, int64_t rows, int32_t* levels)


cdef extern from "dense_bits.hpp" namespace "maskprep" nogil:
    void classify_dense(const uint8_t* mask, int64_t groups, int64_t n_q, int64_t n_k, int64_t tile_m,
                        int64_t tile_n, int threads, BlockList& out, vector[uint32_t]& bits) except +
    void classify_csr(const int64_t* indptr, const int32_t* indices, int64_t n_q, int64_t n_k,
                      int64_t tile_m, int64_t tile_n, int threads, BlockList& out,
                      vector[uint32_t]& bits) except +


cdef extern from "intervals.hpp" namespace "maskprep" nogil:
    cdef cppclass IntervalRuns:
        int64_t rows, cols
        vector[int32_t] minmax
    void interval_runs(const int32_t* iv, int64_t groups, int64_t n_q, int64_t n_k, int64_t tile_m,
                       int64_t tile_n, IntervalRuns& out) except +
    void interval_counts(const IntervalRuns& r, int64_t* fwd_ptr, int64_t* bwd_ptr) except +
    void count_entries(const IntervalRuns& r, int64_t& listed, int64_t& partial)
    void interval_fill(const IntervalRuns& r, const int64_t* fwd_ptr, int32_t* col_idx, uint8_t* fwd_kind,
                       const int64_t* bwd_ptr, int32_t* row_idx, uint8_t* bwd_kind, int threads) except +


# The arrays of a plan (BlockMask's attribute names) and their dtypes.
PLAN_ARRAYS = {
    "row_ptr": np.dtype(np.int64), "col_idx": np.dtype(np.int32), "kind": np.dtype(np.uint8),
    "payload_idx": np.dtype(np.int32), "col_ptr": np.dtype(np.int64), "row_idx": np.dtype(np.int32),
    "bwd_kind": np.dtype(np.uint8), "bwd_payload_idx": np.dtype(np.int32), "bit_pool": np.dtype(np.uint32),
    "intervals": np.dtype(np.int32), "interval_minmax": np.dtype(np.int32), "m_order": np.dtype(np.int32),
    "n_order": np.dtype(np.int32),
}


cdef class PlanArrays:
    """The arrays of one plan in one host buffer, each at a 16-byte aligned offset. The compilers write them in
    place, so the plan reaches a device in one copy of ``buffer``.

    Attributes
    ----------
    buffer : ndarray of uint8
    layout : dict
        ``name -> (offset in bytes, shape, dtype)`` of each array the plan has (names and dtypes of
        ``PLAN_ARRAYS``).
    partial_count : int
        PARTIAL entries (in each direction).
    """
    cdef readonly object buffer
    cdef readonly dict layout
    cdef readonly int64_t partial_count
    cdef uint8_t* data

    def __cinit__(self, dict shapes, int64_t partial_count):
        cdef int64_t size = 0, nbytes
        cdef tuple shape
        self.layout = {}
        for name, shape in shapes.items():
            dtype = PLAN_ARRAYS[name]
            nbytes = dtype.itemsize
            for extent in shape:
                nbytes *= <int64_t>extent
            self.layout[name] = (size, shape, dtype)
            size += (nbytes + 15) // 16 * 16
        # every plan has a row_ptr of at least two offsets: the buffer is never empty
        self.buffer = np.empty(size, np.uint8)
        cdef uint8_t[::1] raw = self.buffer
        self.data = &raw[0]
        self.partial_count = partial_count

    cdef void* at(self, str name) except NULL:
        return self.data + <int64_t>self.layout[name][0]

    cdef void put(self, str name, const void* data, size_t nbytes) except *:
        if nbytes:
            memcpy(self.at(name), data, nbytes)


cdef object _copy(const void* data, size_t count, dtype):
    out = np.empty(count, dtype=dtype)
    cdef uint8_t[::1] raw = out.view(np.uint8)
    if count:
        memcpy(&raw[0], data, raw.shape[0])
    return out


cdef dict _block_shapes(const BlockList& b, str ptr, str idx, str kind, str payload, int64_t groups, int64_t rows):
    return {ptr: (groups, rows + 1), idx: (b.idx.size(),), kind: (b.kind.size(),), payload: (b.payload.size(),)}


cdef void _put_blocks(PlanArrays out, const BlockList& b, str ptr, str idx, str kind, str payload) except *:
    out.put(ptr, b.ptr.data(), b.ptr.size() * sizeof(int64_t))
    out.put(idx, b.idx.data(), b.idx.size() * sizeof(int32_t))
    out.put(kind, b.kind.data(), b.kind.size() * sizeof(uint8_t))
    out.put(payload, b.payload.data(), b.payload.size() * sizeof(int32_t))


cdef void _put_orders(PlanArrays out, int64_t groups, int64_t rows, int64_t cols) except *:
    """m_order and n_order from the plan's row_ptr and col_ptr."""
    cdef const int64_t* row_ptr = <const int64_t*>out.at("row_ptr")
    cdef const int64_t* col_ptr = <const int64_t*>out.at("col_ptr")
    cdef int32_t* m_order = <int32_t*>out.at("m_order")
    cdef int32_t* n_order = <int32_t*>out.at("n_order")
    with nogil:
        order_by_length(row_ptr, groups, rows, m_order)
        order_by_length(col_ptr, groups, cols, n_order)


cdef void _check_tile(int tile_m, int tile_n) except *:
    for name, t in (("tile_m", tile_m), ("tile_n", tile_n)):
        if t < 16 or t > 256 or t % 16:
            raise ValueError(f"{name} is {t}; tiles must be multiples of 16 from 16 to 256")


cdef PlanArrays _finish(BlockList& fwd, vector[uint32_t]& bits, int64_t groups, int64_t n_q, int64_t n_k,
                        int tile_m, int tile_n):
    """Deduplicates the PARTIAL tiles of a bit plan, adds the backward direction and lays the plan out."""
    cdef int64_t rows = (n_q + tile_m - 1) // tile_m
    cdef int64_t cols = (n_k + tile_n - 1) // tile_n
    cdef int64_t words = tile_words(tile_m, tile_n)
    cdef vector[uint32_t] pool
    cdef BlockList bwd
    with nogil:
        pool = dedup_tiles(bits, words, fwd.payload)
        bwd = transpose(fwd, groups, rows, cols)
    shapes = _block_shapes(fwd, "row_ptr", "col_idx", "kind", "payload_idx", groups, rows)
    shapes.update(_block_shapes(bwd, "col_ptr", "row_idx", "bwd_kind", "bwd_payload_idx", groups, cols))
    shapes.update(bit_pool=(<int64_t>pool.size() // words, words), m_order=(groups, rows), n_order=(groups, cols))
    cdef PlanArrays out = PlanArrays(shapes, <int64_t>bits.size() // words)
    _put_blocks(out, fwd, "row_ptr", "col_idx", "kind", "payload_idx")
    _put_blocks(out, bwd, "col_ptr", "row_idx", "bwd_kind", "bwd_payload_idx")
    out.put("bit_pool", pool.data(), pool.size() * sizeof(uint32_t))
    _put_orders(out, groups, rows, cols)
    return out


cdef (int64_t, int64_t, int64_t) _classify_dense(mask, int tile_m, int tile_n, int threads, BlockList& fwd,
                                                 vector[uint32_t]& bits) except *:
    """Fills the forward block list and one raw bit tile per PARTIAL entry of a dense mask; returns its
    (groups, n_q, n_k)."""
    _check_tile(tile_m, tile_n)
    if getattr(mask, "dtype", None) != np.bool_ or mask.ndim != 3:
        raise TypeError(f"mask must be a 3-d bool array (groups, n_q, n_k); got {getattr(mask, 'dtype', type(mask))} "
                        f"of shape {np.shape(mask)}")
    if mask.size == 0:
        raise ValueError(f"mask shape {mask.shape} has an empty dimension")
    cdef const uint8_t[:, :, ::1] m = np.ascontiguousarray(mask).view(np.uint8)
    with nogil:
        classify_dense(&m[0, 0, 0], m.shape[0], m.shape[1], m.shape[2], tile_m, tile_n, threads, fwd, bits)
    return m.shape[0], m.shape[1], m.shape[2]


def dense_plan(mask, int tile_m, int tile_n, int threads=1):
    """dense_plan(mask, tile_m, tile_n, threads=1)

    Block lists and bit tiles of a dense boolean mask.

    Parameters
    ----------
    mask : ndarray of bool, shape (groups, n_q, n_k)
    tile_m, tile_n : int
        Tile shape; multiples of 16 from 16 to 256.
    threads : int
        Worker threads over query blocks.

    Returns
    -------
    PlanArrays
        ``row_ptr, col_idx, kind, payload_idx`` (forward), ``col_ptr, row_idx, bwd_kind, bwd_payload_idx``
        (backward), ``bit_pool`` (distinct PARTIAL tiles, ``tile_m * tile_n / 32`` words each), ``m_order`` and
        ``n_order``.
    """
    cdef BlockList fwd
    cdef vector[uint32_t] bits
    cdef int64_t groups, n_q, n_k
    groups, n_q, n_k = _classify_dense(mask, tile_m, tile_n, threads, fwd, bits)
    return _finish(fwd, bits, groups, n_q, n_k, tile_m, tile_n)


def dense_tiles(mask, int tile_m, int tile_n, int threads=1):
    """dense_tiles(mask, tile_m, tile_n, threads=1)

    The forward block list of a dense boolean mask with one bit tile per PARTIAL entry (``payload`` counts
    them in order), before deduplication: pieces of a plan that :func:`finish_bits` joins.
    """
    cdef BlockList fwd
    cdef vector[uint32_t] bits
    cdef int64_t groups = _classify_dense(mask, tile_m, tile_n, threads, fwd, bits)[0]
    return {
        "row_ptr": _copy(fwd.ptr.data(), fwd.ptr.size(), np.int64).reshape(groups, -1),
        "col_idx": _copy(fwd.idx.data(), fwd.idx.size(), np.int32),
        "kind": _copy(fwd.kind.data(), fwd.kind.size(), np.uint8),
        "payload": _copy(fwd.payload.data(), fwd.payload.size(), np.int32),
        "bits": _copy(bits.data(), bits.size(), np.uint32).reshape(-1, tile_words(tile_m, tile_n)),
    }


def finish_bits(blocks, int64_t n_q, int64_t n_k, int tile_m, int tile_n):
    """finish_bits(blocks, n_q, n_k, tile_m, tile_n)

    A whole bit plan from a forward block list with raw tiles (the dict of :func:`dense_tiles`, rows of all
    groups): deduplicates the tiles and adds the backward direction. Returns the :class:`PlanArrays` of
    :func:`dense_plan`.
    """
    _check_tile(tile_m, tile_n)
    cdef const int64_t[:, ::1] ptr = np.ascontiguousarray(blocks["row_ptr"], dtype=np.int64)
    cdef const int32_t[::1] idx = np.ascontiguousarray(blocks["col_idx"], dtype=np.int32)
    cdef const uint8_t[::1] kind = np.ascontiguousarray(blocks["kind"], dtype=np.uint8)
    cdef const int32_t[::1] payload = np.ascontiguousarray(blocks["payload"], dtype=np.int32)
    cdef const uint32_t[::1] bits = np.ascontiguousarray(blocks["bits"], dtype=np.uint32).reshape(-1)
    cdef BlockList fwd
    cdef vector[uint32_t] raw
    cdef Py_ssize_t i
    fwd.ptr.assign(&ptr[0, 0], &ptr[0, 0] + ptr.shape[0] * ptr.shape[1])
    for i in range(idx.shape[0]):
        fwd.idx.push_back(idx[i])
        fwd.kind.push_back(kind[i])
        fwd.payload.push_back(payload[i])
    for i in range(bits.shape[0]):
        raw.push_back(bits[i])
    return _finish(fwd, raw, ptr.shape[0], n_q, n_k, tile_m, tile_n)


def csr_plan(indptr, indices, int64_t n_q, int64_t n_k, int tile_m, int tile_n, int threads=1):
    """csr_plan(indptr, indices, n_q, n_k, tile_m, tile_n, threads=1)

    Block lists and bit tiles of a sparse mask given in CSR form (one group): row i is true at the
    columns ``indices[indptr[i]:indptr[i + 1]]``. O(nnz + touched tiles).

    Returns the same :class:`PlanArrays` as :func:`dense_plan`.
    """
    _check_tile(tile_m, tile_n)
    indptr = np.asarray(indptr)
    indices = np.asarray(indices)
    if indptr.shape != (n_q + 1,):
        raise ValueError(f"indptr has shape {indptr.shape}; expected ({n_q + 1},)")
    if indices.size and (indices.min() < 0 or indices.max() >= n_k):
        raise ValueError(f"column indices must lie in [0, {n_k}); got [{indices.min()}, {indices.max()}]")
    # no negative indices in this module: it is compiled with wraparound=False
    if indptr[0] != 0 or indptr[n_q] != indices.size or np.any(np.diff(indptr) < 0):
        raise ValueError("indptr must start at 0, never decrease, and end at len(indices)")
    cdef const int64_t[::1] p = np.ascontiguousarray(indptr, dtype=np.int64)
    cdef const int32_t[::1] j = np.ascontiguousarray(indices, dtype=np.int32)
    cdef const int32_t* jp = &j[0] if j.shape[0] else NULL
    cdef BlockList fwd
    cdef vector[uint32_t] bits
    with nogil:
        classify_csr(&p[0], jp, n_q, n_k, tile_m, tile_n, threads, fwd, bits)
    return _finish(fwd, bits, 1, n_q, n_k, tile_m, tile_n)


def interval_plan(intervals, int64_t n_q, int tile_m, int tile_n, int threads=1):
    """interval_plan(intervals, n_q, tile_m, tile_n, threads=1)

    Block lists of an interval mask: ``intervals[g, j] = (LTS, LTE, UTS, UTE)``; in column j of group g, row
    i is masked iff ``LTS <= i < LTE`` or ``UTS <= i < UTE``. O(n_k + active blocks).

    Returns
    -------
    PlanArrays
        ``row_ptr, col_idx, kind``, ``col_ptr, row_idx, bwd_kind``, ``m_order`` and ``n_order`` as
        :func:`dense_plan` (no payload indices: PARTIAL tiles are masked from the intervals), ``intervals`` (a
        copy of the input) and ``interval_minmax`` of shape (groups, key blocks, 8): min and max of LTS, LTE,
        UTS, UTE over each key block's columns.
    """
    _check_tile(tile_m, tile_n)
    cdef const int32_t[:, :, ::1] iv = np.ascontiguousarray(intervals, dtype=np.int32)
    cdef int64_t groups = iv.shape[0], n_k = iv.shape[1]
    if iv.shape[2] != 4:
        raise ValueError(f"intervals must have shape (groups, n_k, 4); got {np.shape(intervals)}")
    cdef IntervalRuns runs
    cdef int64_t nnz, partial
    with nogil:
        interval_runs(&iv[0, 0, 0], groups, n_q, n_k, tile_m, tile_n, runs)
        count_entries(runs, nnz, partial)
    cdef PlanArrays out = PlanArrays({
        "row_ptr": (groups, runs.rows + 1), "col_idx": (nnz,), "kind": (nnz,),
        "col_ptr": (groups, runs.cols + 1), "row_idx": (nnz,), "bwd_kind": (nnz,),
        "intervals": (groups, n_k, 4), "interval_minmax": (groups, runs.cols, 8),
        "m_order": (groups, runs.rows), "n_order": (groups, runs.cols),
    }, partial)
    cdef int64_t* fp = <int64_t*>out.at("row_ptr")
    cdef int64_t* bp = <int64_t*>out.at("col_ptr")
    cdef int32_t* ci = <int32_t*>out.at("col_idx")
    cdef int32_t* ri = <int32_t*>out.at("row_idx")
    cdef uint8_t* fk = <uint8_t*>out.at("kind")
    cdef uint8_t* bk = <uint8_t*>out.at("bwd_kind")
    with nogil:
        interval_counts(runs, fp, bp)
        interval_fill(runs, fp, ci, fk, bp, ri, bk, threads)
    out.put("intervals", &iv[0, 0, 0], groups * n_k * 4 * sizeof(int32_t))
    out.put("interval_minmax", runs.minmax.data(), runs.minmax.size() * sizeof(int32_t))
    _put_orders(out, groups, runs.rows, runs.cols)
    return out


cdef void _normalize(const int32_t[:, ::1] se, int32_t[:, ::1] out, int64_t n_q, int64_t shift,
                     bint causal) noexcept nogil:
    cdef Py_ssize_t j, c = se.shape[1]
    cdef int64_t n = n_q, lim
    for j in range(se.shape[0]):
        if c == 4:
            out[j, 0] = se[j, 0]; out[j, 1] = se[j, 1]; out[j, 2] = se[j, 2]; out[j, 3] = se[j, 3]
        elif c == 2 and causal:
            out[j, 0] = se[j, 0]; out[j, 1] = se[j, 1]; out[j, 2] = 0; out[j, 3] = 0
        elif c == 2:
            out[j, 0] = se[j, 0]; out[j, 1] = <int32_t>n; out[j, 2] = 0; out[j, 3] = se[j, 1]
        else:
            out[j, 0] = se[j, 0]; out[j, 1] = <int32_t>n; out[j, 2] = 0; out[j, 3] = 0
        if causal:
            # j > i + shift is masked: rows [0, j - shift) of column j
            lim = j - shift
            out[j, 2] = 0
            out[j, 3] = <int32_t>(0 if lim < 0 else (n if lim > n else lim))


def rank_levels(ptr, order):
    """rank_levels(ptr, order)

    The runs of about one length in a plan's CTA order: ``ptr`` a plan's ``row_ptr`` (G, rows + 1) or ``col_ptr``,
    ``order`` its ``m_order`` (G, rows) or ``n_order`` (heaviest first). Returns int32 (rows, 2): for each rank, the
    first rank of its run and the rank after the run, where a run is a stretch of ranks whose rows lie in one band
    of lengths in every group: band b holds the lengths l with ``l * 2**(b+1) >= longest > l * 2**b``, ``longest``
    the group's longest row (band 0: at least half of it); empty rows share the last band. The CUDA kernels start a
    run's CTAs head by head.
    """
    cdef const int64_t[:, ::1] p = np.ascontiguousarray(ptr, dtype=np.int64)
    cdef const int32_t[:, ::1] o = np.ascontiguousarray(order, dtype=np.int32)
    cdef int64_t groups = o.shape[0], rows = o.shape[1]
    if p.shape[0] != groups or p.shape[1] != rows + 1:
        raise ValueError(f"ptr of shape {(p.shape[0], p.shape[1])} does not fit an order of shape {(groups, rows)}")
    out = np.empty((rows, 2), np.int32)
    cdef int32_t[:, ::1] levels = out
    if rows and groups:
        with nogil:
            order_levels(&p[0, 0], &o[0, 0], groups, rows, &levels[0, 0])
    elif rows:
        out[:, 0], out[:, 1] = 0, rows
    return out


def normalize_intervals(startend, int64_t n_q, bint causal):
    """normalize_intervals(startend, n_q, causal)

    FlashMask's ``startend_row_indices`` (shape ``(G, n_k, C)``, C in 1, 2, 4) as four columns
    (LTS, LTE, UTS, UTE) with ``causal`` folded into the upper interval (bottom-right aligned:
    column j masks rows ``[0, j - (n_k - n_q))``).

    Raises
    ------
    ValueError
        When C does not fit ``causal`` (C=1 needs causal, C=4 needs not causal) or a value lies outside
        ``[0, n_q]`` or an interval ends before it starts.
    """
    se = np.asarray(startend)
    if se.ndim != 3 or se.shape[2] not in (1, 2, 4):
        raise ValueError(f"startend_row_indices must end in a dimension of 1, 2 or 4; got shape {se.shape}")
    cdef int c = se.shape[2]
    if c == 1 and not causal:
        raise ValueError("startend_row_indices with 1 column (LTS) needs causal=True")
    if c == 4 and causal:
        raise ValueError("startend_row_indices with 4 columns (LTS, LTE, UTS, UTE) needs causal=False")
    if se.size and (se.min() < 0 or se.max() > n_q):
        raise ValueError(f"startend_row_indices values must lie in [0, n_q={n_q}]; got [{se.min()}, {se.max()}]")
    if c == 4 and (np.any(se[..., 0] > se[..., 1]) or np.any(se[..., 2] > se[..., 3])):
        raise ValueError("startend_row_indices: an interval ends before it starts (LTS > LTE or UTS > UTE)")
    if c == 2 and causal and np.any(se[..., 0] > se[..., 1]):
        raise ValueError("startend_row_indices: an interval ends before it starts (LTS > LTE)")
    se32 = np.ascontiguousarray(se, dtype=np.int32)
    out = np.empty(se.shape[:2] + (4,), np.int32)
    cdef int64_t n_k = se.shape[1], g
    for g in range(se.shape[0]):
        _normalize(se32[g], out[g], n_q, n_k - n_q, causal)
    return out
