# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""maskprep.attention: block-sparse attention on the CPU over a compiled block plan, forward and backward.

Each ``def`` checks and normalises its arrays (one float dtype, 4-d shapes that fit the plan, a contiguous last
dimension), fills an ``AttentionProblem`` with pointers and element strides, releases the GIL and runs the C++
kernels of ``attention_kernels.hpp`` for the widest instruction set the CPU has (AVX-512, AVX2 + FMA, or plain
16-byte vectors), on ``threads`` worker threads. The plan is read through the attributes of
:class:`maskattn.plan.BlockMask` (any object with them will do: this layer does not import the plan module).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy
from libcpp cimport bool as cbool
from libcpp.vector cimport vector

import numpy as np
cimport numpy as cnp

cnp.import_array()


cdef extern from "attention.hpp" namespace "maskprep" nogil:
    cdef struct PlanPointers:
        const int64_t* row_ptr
        const int32_t* col_idx
        const uint8_t* kind
        const int32_t* payload_idx
        const int64_t* col_ptr
        const int32_t* row_idx
        const uint8_t* bwd_kind
        const int32_t* bwd_payload_idx
        const uint32_t* bit_pool
        int64_t pool_tiles
        const int32_t* intervals
        const int32_t* m_order
        const int64_t* perm
    cdef struct AttentionProblem:
        int64_t B, H, Hk, n_q, n_k, D
        int64_t tile_m, tile_n
        int64_t mask_B, mask_H
        double scale
        int dtype_bytes
        const void* q
        int64_t q_stride[3]
        const void* k
        int64_t k_stride[3]
        const void* v
        int64_t v_stride[3]
        const void* dout
        int64_t do_stride[3]
        const void* out
        int64_t o_stride[3]
        const void* lse
        void* out_w
        void* lse_w
        void* dq
        void* dk
        void* dv
        PlanPointers plan
        const int64_t* key_lens
        uint32_t* not_finite
        const uint8_t* fwd_sparse
        const int64_t* erow_ptr
        const int32_t* ecols
        const uint8_t* bwd_sparse
        const int64_t* ecol_ptr
        const int32_t* erows
    cdef enum NotFinite:
        NOT_FINITE_DOUT
        NOT_FINITE_Q
        NOT_FINITE_K
        NOT_FINITE_V
        NOT_FINITE_OUT
    int c_best_isa "maskprep::best_isa"()
    void c_workspace_release "maskprep::workspace_release"()
    cbool c_isa_available "maskprep::isa_available"(int isa)
    void c_forward "maskprep::attention_forward"(const AttentionProblem& p, int threads, int isa) except +
    void c_backward "maskprep::attention_backward"(const AttentionProblem& p, int threads, int isa) except +


cdef extern from "element_lists.hpp" namespace "maskprep" nogil:
    cdef cppclass ElementLists:
        vector[uint8_t] fwd_sparse
        vector[int64_t] row_ptr
        vector[int32_t] cols
        vector[uint8_t] bwd_sparse
        vector[int64_t] col_ptr
        vector[int32_t] rows
        vector[int64_t] order
    cdef struct BitsPlan:
        PlanPointers arrays
        int64_t groups, n_q, n_k, tile_m, tile_n
    void c_element_lists "maskprep::element_lists"(const BitsPlan& p, double max_density, cbool ordered,
                                                   ElementLists& out) except +


ISAS = ("generic", "avx2", "avx512")
# the inputs the kernels check (check_finite), in the order an error names them
_CHECKED = ((NOT_FINITE_DOUT, "do"), (NOT_FINITE_Q, "q"), (NOT_FINITE_K, "k"), (NOT_FINITE_V, "v"),
            (NOT_FINITE_OUT, "out"))
# A query (key) block of a bits plan takes the element path where the true elements of its tiles are at most this
# share of their area (measured: docs/performance.md, "CPU backend").
SPARSE_DENSITY = 0.2


def available_isas():
    """available_isas()

    The instruction sets the kernels were built for and this CPU runs, narrowest first.
    """
    return [name for i, name in enumerate(ISAS) if c_isa_available(i)]


def release_workspace():
    """release_workspace()

    Frees the workspace the kernels keep from call to call (buffers of recent calls, up to 1 GiB in all, handed to
    later calls so that they do not fault their pages in anew).
    """
    with nogil:
        c_workspace_release()


def best_isa():
    """best_isa()

    The instruction set a call with ``isa=None`` runs: the widest of :func:`available_isas`.
    """
    return ISAS[c_best_isa()]


cdef int _isa_code(isa) except -2:
    if isa is None:
        return -1
    if isa not in ISAS:
        raise ValueError(f"isa must be None or one of {ISAS}; got {isa!r}")
    if isa not in available_isas():
        raise ValueError(f"isa {isa!r} does not run here (available: {', '.join(available_isas())})")
    return ISAS.index(isa)


cdef object _rows(x, str name, dtype):
    """x as the kernels read it: dtype ``dtype``, 4-d, aligned, unit stride in the last dimension and element
    strides elsewhere (copied only where it is not)."""
    x = np.asarray(x)
    if x.dtype != dtype:
        raise TypeError(f"{name} has dtype {x.dtype}; expected {dtype} like q")
    if x.ndim != 4:
        raise ValueError(f"{name} must have 4 dimensions (B, H, n, D); got shape {x.shape}")
    size = x.dtype.itemsize
    if not x.flags.aligned or (x.shape[3] > 1 and x.strides[3] != size) or any(s % size for s in x.strides):
        x = np.ascontiguousarray(x)
    return x


cdef void _strides(x, int64_t* out):
    size = x.dtype.itemsize
    for i in range(3):
        out[i] = x.strides[i] // size


cdef const void* _data(x):
    return cnp.PyArray_DATA(<cnp.ndarray>x)


cdef class _PlanView:
    """The plan's arrays, held (so their memory stays alive) while a call reads them through raw pointers."""
    cdef object arrays

    def __cinit__(self, plan, int64_t B, int64_t H, int64_t n_q, int64_t n_k):
        tile_m, tile_n = map(int, plan.tile)
        if tuple(plan.shape[2:]) != (n_q, n_k) or plan.shape[0] not in (1, B) or plan.shape[1] not in (1, H):
            raise ValueError(f"plan of shape {tuple(plan.shape)} does not fit B={B}, H={H}, n_q={n_q}, n_k={n_k}")
        if tile_m < 16 or tile_m > 256 or tile_m % 16 or tile_n < 16 or tile_n > 256 or tile_n % 16:
            raise ValueError(f"plan tile {plan.tile}: tiles must be multiples of 16 from 16 to 256")
        if plan.perm is not None and n_q != n_k:
            raise ValueError(f"a plan with a node order (perm) needs n_q == n_k; got {n_q} and {n_k}")
        self.arrays = {}
        for name, dtype in (("row_ptr", np.int64), ("col_idx", np.int32), ("kind", np.uint8),
                            ("payload_idx", np.int32), ("col_ptr", np.int64), ("row_idx", np.int32),
                            ("bwd_kind", np.uint8), ("bwd_payload_idx", np.int32), ("bit_pool", np.uint32),
                            ("intervals", np.int32), ("m_order", np.int32), ("perm", np.int64)):
            x = getattr(plan, name)
            self.arrays[name] = None if x is None else np.ascontiguousarray(x, dtype=dtype)
        if self.arrays["intervals"] is None and self.arrays["bit_pool"] is None:
            if bool(np.any(self.arrays["kind"] != 1)):
                raise ValueError("plan has PARTIAL tiles but neither intervals nor a bit pool")

    cdef const void* at(self, str name):
        x = self.arrays[name]
        return NULL if x is None or x.size == 0 else cnp.PyArray_DATA(<cnp.ndarray>x)

    cdef void fill(self, PlanPointers* p):
        p.row_ptr = <const int64_t*>self.at("row_ptr")
        p.col_idx = <const int32_t*>self.at("col_idx")
        p.kind = <const uint8_t*>self.at("kind")
        p.payload_idx = <const int32_t*>self.at("payload_idx")
        p.col_ptr = <const int64_t*>self.at("col_ptr")
        p.row_idx = <const int32_t*>self.at("row_idx")
        p.bwd_kind = <const uint8_t*>self.at("bwd_kind")
        p.bwd_payload_idx = <const int32_t*>self.at("bwd_payload_idx")
        p.bit_pool = <const uint32_t*>self.at("bit_pool")
        p.pool_tiles = 0 if self.arrays["bit_pool"] is None else self.arrays["bit_pool"].shape[0]
        p.intervals = <const int32_t*>self.at("intervals")
        p.m_order = <const int32_t*>self.at("m_order")
        p.perm = <const int64_t*>self.at("perm")

    cdef void problem(self, plan, AttentionProblem* p):
        p.tile_m, p.tile_n = map(int, plan.tile)
        p.mask_B, p.mask_H = int(plan.shape[0]), int(plan.shape[1])
        self.fill(&p.plan)


cdef object _vector_array(const void* data, size_t count, dtype):
    out = np.empty(count, dtype)
    if count:
        memcpy(cnp.PyArray_DATA(<cnp.ndarray>out), data, count * out.itemsize)
    return out


def element_lists(plan, double max_density=SPARSE_DENSITY, cbool ordered=True):
    """element_lists(plan, max_density=SPARSE_DENSITY, ordered=True)

    The element path's lists of a bits plan: which query and key blocks hold so few true elements that the kernels
    take them one by one, and those elements (``element_lists.hpp``). O(bit pool + true elements of those blocks).

    Parameters
    ----------
    plan : maskattn.plan.BlockMask
    max_density : float
        A block is sparse where the true elements of its listed tiles are at most this share of their area.
    ordered : bool
        Where every block is sparse and the plan is one square mask without a node order of its own, give the lists
        in an execution order (a Reverse Cuthill-McKee order of their pattern) that the kernels follow as they follow
        a node order: consecutive rows then read neighbouring keys. Calls with ``key_lens`` need lists without one.

    Returns
    -------
    tuple of ndarray or None
        ``(fwd_sparse (G, M) uint8, row_ptr (G, n_q + 1) int64, cols int32, bwd_sparse (G, N) uint8,
        col_ptr (G, n_k + 1) int64, rows int32, order (n_q,) int64 or None)`` for :func:`attention_forward` and
        :func:`attention_backward`, positions in ``order`` where there is one (``order[i]`` the plan position at
        position i); None where no block is sparse (and for plans without bits).
    """
    if plan.bit_pool is None or plan.payload_idx is None:
        return None
    G = int(plan.shape[0]) * int(plan.shape[1])
    cdef _PlanView view = _PlanView(plan, int(plan.shape[0]), int(plan.shape[1]), int(plan.shape[2]),
                                    int(plan.shape[3]))
    cdef BitsPlan b
    b.groups, b.n_q, b.n_k = G, int(plan.shape[2]), int(plan.shape[3])
    b.tile_m, b.tile_n = map(int, plan.tile)
    view.fill(&b.arrays)
    cdef ElementLists out
    with nogil:
        c_element_lists(b, max_density, ordered, out)
    fwd = _vector_array(out.fwd_sparse.data(), out.fwd_sparse.size(), np.uint8).reshape(G, -1)
    bwd = _vector_array(out.bwd_sparse.data(), out.bwd_sparse.size(), np.uint8).reshape(G, -1)
    if not fwd.any() and not bwd.any():
        return None
    return (fwd, _vector_array(out.row_ptr.data(), out.row_ptr.size(), np.int64).reshape(G, -1),
            _vector_array(out.cols.data(), out.cols.size(), np.int32),
            bwd, _vector_array(out.col_ptr.data(), out.col_ptr.size(), np.int64).reshape(G, -1),
            _vector_array(out.rows.data(), out.rows.size(), np.int32),
            _vector_array(out.order.data(), out.order.size(), np.int64) if out.order.size() else None)


cdef object _lists(AttentionProblem* p, lists, int64_t G, int64_t n_q, int64_t n_k, int64_t M, int64_t N):
    """Checks ``element_lists``'s arrays against the problem and points p at them; returns them (held by the
    caller while the kernels run)."""
    p.fwd_sparse = p.bwd_sparse = NULL
    p.erow_ptr = p.ecol_ptr = NULL
    p.ecols = p.erows = NULL
    if lists is None:
        return None
    fwd, row_ptr, cols, bwd, col_ptr, rows, order = lists
    fwd, bwd = np.ascontiguousarray(fwd, np.uint8), np.ascontiguousarray(bwd, np.uint8)
    row_ptr, col_ptr = np.ascontiguousarray(row_ptr, np.int64), np.ascontiguousarray(col_ptr, np.int64)
    cols, rows = np.ascontiguousarray(cols, np.int32), np.ascontiguousarray(rows, np.int32)
    if (fwd.shape != (G, M) or bwd.shape != (G, N) or row_ptr.shape != (G, n_q + 1) or col_ptr.shape != (G, n_k + 1)
            or row_ptr[-1, -1] != cols.size or col_ptr[-1, -1] != rows.size):
        raise ValueError("element lists do not fit this plan (made by element_lists for another one?)")
    p.fwd_sparse = <const uint8_t*>_data(fwd)
    p.bwd_sparse = <const uint8_t*>_data(bwd)
    p.erow_ptr = <const int64_t*>_data(row_ptr)
    p.ecol_ptr = <const int64_t*>_data(col_ptr)
    if cols.size:
        p.ecols = <const int32_t*>_data(cols)
    if rows.size:
        p.erows = <const int32_t*>_data(rows)
    if order is not None:  # followed as a node order: every block takes the element path, none reads the plan's tiles
        order = np.ascontiguousarray(order, np.int64)
        if (p.plan.perm != NULL or G != 1 or n_q != n_k or order.shape != (n_q,) or not fwd.all()
                or not bwd.all()):
            raise ValueError("element lists with an execution order do not fit this plan")
        p.plan.perm = <const int64_t*>_data(order)
    return fwd, row_ptr, cols, bwd, col_ptr, rows, order


cdef void _check(AttentionProblem* p, uint32_t* not_finite, cbool check_finite):
    not_finite[0] = 0
    p.not_finite = not_finite if check_finite else NULL


cdef object _raise_not_finite(uint32_t not_finite):
    for bit, name in _CHECKED:
        if not_finite & bit:
            raise ValueError(f"{name} holds inf or NaN; attention inputs must be finite")


cdef object _inputs(AttentionProblem* p, q, k, v):
    """Checks q, k, v and fills their part of p; returns them as the kernels read them."""
    q = np.asarray(q)
    if q.dtype not in (np.float32, np.float64):
        raise TypeError(f"q has dtype {q.dtype}; the CPU kernels take float32 or float64")
    q, k, v = _rows(q, "q", q.dtype), _rows(k, "k", q.dtype), _rows(v, "v", q.dtype)
    B, H, n_q, D = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D or k.shape[1] < 1 or H % k.shape[1]:
        raise ValueError(f"k {k.shape} and v {v.shape} do not fit q {q.shape} (B, Hk dividing H, n_k, D)")
    if min(B, H, n_q, D, k.shape[2]) < 1:
        raise ValueError(f"empty inputs: q {q.shape}, k {k.shape}")
    p.B, p.H, p.Hk, p.n_q, p.n_k, p.D = B, H, k.shape[1], n_q, k.shape[2], D
    p.dtype_bytes = q.dtype.itemsize
    p.q, p.k, p.v = _data(q), _data(k), _data(v)
    _strides(q, p.q_stride)
    _strides(k, p.k_stride)
    _strides(v, p.v_stride)
    return q, k, v


def attention_forward(q, k, v, plan, double scale, key_lens=None, int threads=1, isa=None, lists=None,
                      cbool check_finite=False):
    """attention_forward(q, k, v, plan, scale, key_lens=None, threads=1, isa=None, lists=None, check_finite=False)

    Masked attention ``softmax(scale * q k^T + mask) v`` over the tiles the plan lists.

    Parameters
    ----------
    q : ndarray (B, H, n_q, D), float32 or float64
    k, v : ndarray (B, Hk, n_k, D) of q's dtype, ``H % Hk == 0``
        Query head h reads KV head ``h // (H // Hk)``. Any strides; a last dimension that is not contiguous is
        copied.
    plan : maskattn.plan.BlockMask
        For shape ``(1 or B, 1 or H, n_q, n_k)``, any tile; a plan with a node order (``perm``) is followed.
    scale : float
    key_lens : (B,) integers, optional
        Per batch the number of keys to see (keys ``j >= key_lens[b]`` are masked besides the plan).
    threads : int
        Worker threads.
    isa : {None, "generic", "avx2", "avx512"}
        The kernels' instruction set; None: :func:`best_isa`.
    lists : tuple, optional
        What :func:`element_lists` returned for this plan: its sparse blocks take the element path.
    check_finite : bool
        Raise ValueError, naming the input, where q, k or v holds inf or NaN: the kernels check every element as
        they read it (at the cost of a few vector instructions per row, no further pass over memory).

    Returns
    -------
    out : ndarray (B, H, n_q, D) of q's dtype, C-contiguous; 0 on rows that see no key
    lse : ndarray (B, H, n_q) of q's dtype; natural log, -inf on rows that see no key
    """
    cdef AttentionProblem p
    q, k, v = _inputs(&p, q, k, v)
    cdef _PlanView view = _PlanView(plan, p.B, p.H, p.n_q, p.n_k)
    view.problem(plan, &p)
    held = _lists(&p, lists, p.mask_B * p.mask_H, p.n_q, p.n_k, (p.n_q + p.tile_m - 1) // p.tile_m,
                  (p.n_k + p.tile_n - 1) // p.tile_n)
    lens = None
    if key_lens is not None:
        lens = np.ascontiguousarray(key_lens, dtype=np.int64)
        if lens.shape != (p.B,):
            raise ValueError(f"key_lens must have shape ({p.B},); got {lens.shape}")
        if plan.perm is not None:
            raise ValueError("key_lens needs a plan without a node order (perm)")
        if lists is not None and lists[6] is not None:
            raise ValueError("key_lens needs element lists without an execution order (element_lists(ordered=False))")
    p.key_lens = NULL
    if lens is not None:
        p.key_lens = <const int64_t*>_data(lens)
    p.scale = scale
    p.dout = p.out = p.lse = NULL
    p.dq = p.dk = p.dv = NULL
    out = np.empty(q.shape, q.dtype)
    lse = np.empty(q.shape[:3], q.dtype)
    p.out_w = cnp.PyArray_DATA(<cnp.ndarray>out)
    p.lse_w = cnp.PyArray_DATA(<cnp.ndarray>lse)
    cdef int code = _isa_code(isa)
    threads = max(1, threads)
    cdef uint32_t not_finite
    _check(&p, &not_finite, check_finite)
    with nogil:
        c_forward(p, threads, code)
    _raise_not_finite(not_finite)
    return out, lse


def attention_backward(do, q, k, v, out, lse, plan, double scale, int threads=1, isa=None, lists=None,
                       cbool check_finite=False):
    """attention_backward(do, q, k, v, out, lse, plan, scale, threads=1, isa=None, lists=None, check_finite=False)

    Gradients of :func:`attention_forward` with respect to q, k and v, recomputing the probabilities from lse.

    Parameters
    ----------
    do : ndarray like q
        Gradient of the loss with respect to ``out``.
    q, k, v, plan, scale, threads, isa, lists :
        As given to :func:`attention_forward`.
    check_finite : bool
        As :func:`attention_forward`'s, for do, q, k, v and out.
    out, lse :
        What :func:`attention_forward` returned (lse in any float dtype; -inf marks rows that see no key).

    Returns
    -------
    dq : ndarray (B, H, n_q, D) of q's dtype
    dk, dv : ndarray (B, Hk, n_k, D) of q's dtype
        Summed over the query heads of each KV head.

    Notes
    -----
    Deterministic: a result does not depend on how the work fell to the threads. With fewer than 8 (batch, head)
    pairs a thread, each pair's key blocks are split into ranges whose dq shares are summed in order, so dq's
    rounding depends on ``threads``.
    """
    cdef AttentionProblem p
    q, k, v = _inputs(&p, q, k, v)
    do, out = _rows(do, "do", q.dtype), _rows(out, "out", q.dtype)
    if do.shape != q.shape or out.shape != q.shape:
        raise ValueError(f"do {do.shape} and out {out.shape} must have q's shape {q.shape}")
    lse = np.ascontiguousarray(lse, dtype=q.dtype)
    if lse.shape != q.shape[:3]:
        raise ValueError(f"lse must have shape {q.shape[:3]}; got {lse.shape}")
    cdef _PlanView view = _PlanView(plan, p.B, p.H, p.n_q, p.n_k)
    view.problem(plan, &p)
    held = _lists(&p, lists, p.mask_B * p.mask_H, p.n_q, p.n_k, (p.n_q + p.tile_m - 1) // p.tile_m,
                  (p.n_k + p.tile_n - 1) // p.tile_n)
    p.key_lens = NULL
    p.scale = scale
    p.dout, p.out, p.lse = _data(do), _data(out), _data(lse)
    _strides(do, p.do_stride)
    _strides(out, p.o_stride)
    p.out_w = p.lse_w = NULL
    dq = np.empty(q.shape, q.dtype)
    dk = np.empty(k.shape, q.dtype)
    dv = np.empty(k.shape, q.dtype)
    p.dq = cnp.PyArray_DATA(<cnp.ndarray>dq)
    p.dk = cnp.PyArray_DATA(<cnp.ndarray>dk)
    p.dv = cnp.PyArray_DATA(<cnp.ndarray>dv)
    cdef int code = _isa_code(isa)
    threads = max(1, threads)
    cdef uint32_t not_finite
    _check(&p, &not_finite, check_finite)
    with nogil:
        c_backward(p, threads, code)
    _raise_not_finite(not_finite)
    return dq, dk, dv
