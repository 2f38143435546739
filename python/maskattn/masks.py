"""Mask specs: small immutable descriptions of attention masks, and their builders.

A spec knows its shape ``(B, H, n_q, n_k)`` (B and H are 1 where the mask is shared across the batch or the
heads), expands itself to a dense boolean array (``to_dense()``, True = attend) and compiles to a block plan
(``maskattn.compile_mask``). Interval-expressible masks (causal, windows, sinks, documents, prefix-LM, shared
question, interleaved, Longformer) are :class:`IntervalMask`: O(n) memory, and the kernels mask partial tiles from
the intervals. The rest carry bits: :class:`DenseMask`, :class:`GraphMask`, :class:`FunctionMask`.

A spec may hold ``perm``, the token order its plan is built in (a reordered graph, a dilated Longformer): position
p of the plan is the caller's token ``perm[p]``. Attention gathers and scatters rows through it, and ``to_dense``
keeps the caller's order.

Queries and keys are aligned bottom-right when ``n_q != n_k`` (as FlashAttention 2.1+): query i sits at
key position ``i + s`` with ``s = n_k - n_q``.
"""

from __future__ import annotations

import numbers
from typing import Callable, Sequence

import numpy as np

from ._maskprep import plan as _maskprep
from .plan import BlockMask, inverse_permutation

__all__ = [
    "MaskSpec", "IntervalMask", "DenseMask", "GraphMask", "FunctionMask", "TreeMask",
    "causal", "sliding_window", "document", "shared_question", "interleaved", "longformer", "bigbird",
    "medusa_tree", "from_intervals", "from_dense", "from_graph", "from_function", "stack", "full",
    "coarse_support", "from_flex_block_mask", "kv_cache",
]


def _positive_int(name, value, minimum=1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return int(value)


def _int_list(name, values, minimum=1) -> list[int]:
    if isinstance(values, numbers.Integral):
        values = [values]
    return [_positive_int(f"{name}[{i}]", v, minimum) for i, v in enumerate(values)]


def _is_nested(values) -> bool:
    return isinstance(values, Sequence) and len(values) > 0 and not isinstance(values[0], numbers.Integral)


def _checked_perm(perm, n_q: int, n_k: int) -> np.ndarray | None:
    """A read-only int64 copy of ``perm`` (None stays None), which must be a permutation of range(n) of a square
    mask."""
    if perm is None:
        return None
    perm = np.array(perm, dtype=np.int64)
    if n_q != n_k or perm.shape != (n_q,) or not np.array_equal(np.sort(perm), np.arange(n_q)):
        raise ValueError(f"perm must be a permutation of range({n_q}) of a square mask; got {perm.shape} "
                         f"for a {n_q} x {n_k} mask")
    perm.setflags(write=False)
    return perm


class MaskSpec:
    """Base of every mask spec. Subclasses set ``shape`` and implement ``to_dense`` and ``_compile``."""

    shape: tuple[int, int, int, int]

    def __init__(self, shape, perm=None):
        B, H, n_q, n_k = (int(s) for s in shape)
        if min(B, H, n_q, n_k) < 1:
            raise ValueError(f"mask shape must be positive; got {tuple(shape)}")
        self.shape = (B, H, n_q, n_k)
        self.perm = _checked_perm(perm, n_q, n_k)
        self._plans = {}
        self._repeats = {}

    @property
    def n_q(self) -> int:
        return self.shape[2]

    @property
    def n_k(self) -> int:
        return self.shape[3]

    def to_dense(self) -> np.ndarray:
        """bool (B, H, n_q, n_k), True where a query attends to a key (in the caller's order)."""
        raise NotImplementedError

    def _caller_order(self, dense):
        """A dense mask in ``perm`` order, (..., n, n), taken back to the caller's order."""
        if self.perm is None:
            return dense
        order = inverse_permutation(self.perm)  # the caller's token i sits at position order[i]
        return dense[..., order, :][..., order]

    def _compile(self, tile, threads) -> BlockMask:
        raise NotImplementedError

    def repeat_rows(self, factor: int) -> "MaskSpec | None":
        """This mask with each query row repeated ``factor`` times (row i becomes rows ``i * factor`` to
        ``i * factor + factor - 1``): the rows of GQA packing, where one tile holds the ``factor`` query heads of a
        KV head token by token. Cached on the spec; None for kinds that do not repeat (graphs, functions) and for
        masks with a ``perm`` (the repeated rows would need an order of their own), which attention then runs
        unpacked."""
        factor = _positive_int("factor", factor)
        if factor == 1:
            return self
        if self.perm is not None:
            return None
        if factor not in self._repeats:
            self._repeats[factor] = self._repeat_rows(factor)
        return self._repeats[factor]

    def _repeat_rows(self, factor):
        return None

    def __repr__(self):
        return f"{type(self).__name__}(shape={self.shape})"


# ---------------------------------------------------------------------------------------------------- intervals


class IntervalMask(MaskSpec):
    """Column-wise row intervals, FlashMask's representation normalised to four columns.

    ``intervals`` is int32 ``(B, H, n_k, 4)``: per key column j (LTS, LTE, UTS, UTE); row i is masked iff
    ``LTS <= i < LTE`` or ``UTS <= i < UTE``. Build it with :func:`from_intervals` or the builders.

    ``perm`` (square masks): the token order the intervals speak of, as :class:`GraphMask`'s: row and column p are
    the caller's token ``perm[p]`` (a dilated :func:`longformer` is intervals only in an order of its own), while
    :meth:`to_dense` and attention keep the caller's order.
    """

    def __init__(self, intervals: np.ndarray, n_q: int, perm=None):
        intervals = np.ascontiguousarray(intervals, dtype=np.int32)
        if intervals.ndim != 4 or intervals.shape[-1] != 4:
            raise ValueError(f"intervals must have shape (B, H, n_k, 4); got {intervals.shape}")
        super().__init__((intervals.shape[0], intervals.shape[1], n_q, intervals.shape[2]), perm)
        if intervals.size and (intervals.min() < 0 or intervals.max() > n_q):
            raise ValueError(f"interval rows must lie in [0, n_q={n_q}]; got [{intervals.min()}, {intervals.max()}]")
        intervals.setflags(write=False)
        self.intervals = intervals

    @property
    def startend_row_indices(self) -> np.ndarray:
        """The FlashMask-style (B, H, n_k, 4) array: LTS, LTE, UTS, UTE.

        Raises ValueError for a mask with a ``perm``: its intervals hold in that order only, and FlashMask, which
        takes q, k, v in the caller's order, has no intervals for its mask."""
        if self.perm is not None:
            raise ValueError("this mask's intervals hold in its own token order (perm), where FlashMask's would be "
                             "in the caller's: read .intervals with .perm, or .to_dense() for the caller's order")
        return self.intervals

    def to_dense(self):
        rows = np.arange(self.n_q)[:, None]
        iv = self.intervals[..., None, :, :]
        masked = ((iv[..., 0] <= rows) & (rows < iv[..., 1])) | ((iv[..., 2] <= rows) & (rows < iv[..., 3]))
        return self._caller_order(~masked)

    def _repeat_rows(self, factor):
        # row p of the repeated mask is row p // factor: LTS <= p // factor < LTE  <=>  LTS * f <= p < LTE * f
        return IntervalMask(self.intervals * factor, self.n_q * factor)

    def _compile(self, tile, threads):
        B, H, n_q, n_k = self.shape
        groups = self.intervals.reshape(B * H, n_k, 4)
        blocks = _maskprep.interval_plan(groups, n_q, *tile, threads=threads)
        return BlockMask(self.shape, tile, blocks, perm=self.perm)


def _columns(lower_start, lower_end, upper_start, upper_end, n_q) -> np.ndarray:
    """(n_k, 4) int32 intervals from per-column bounds, clipped to [0, n_q]; empty where end <= start."""
    cols = [np.clip(np.asarray(x, dtype=np.int64), 0, n_q) for x in (lower_start, lower_end, upper_start, upper_end)]
    n_k = max(np.size(c) for c in cols)
    cols = [np.broadcast_to(c, (n_k,)) for c in cols]
    lts, lte, uts, ute = cols
    return np.stack([lts, np.maximum(lte, lts), uts, np.maximum(ute, uts)], axis=-1).astype(np.int32)


def _single(columns: np.ndarray, n_q: int) -> IntervalMask:
    return IntervalMask(columns[None, None], n_q)


def full(n_q: int, n_k: int | None = None) -> IntervalMask:
    """Every query attends to every key."""
    n_q = _positive_int("n_q", n_q)
    n_k = n_q if n_k is None else _positive_int("n_k", n_k)
    return _single(_columns(0, 0, 0, 0, n_q) * np.ones((n_k, 1), np.int32), n_q)


def sliding_window(n_q: int, n_k: int | None = None, *, left: int | None, right: int = 0,
                   sinks: int = 0) -> IntervalMask:
    """Query i attends to keys ``j`` in ``[i + s - left, i + s + right]`` (``s = n_k - n_q``), plus the first
    ``sinks`` keys wherever ``j <= i + s + right``.

    ``left=None`` is unbounded (``sliding_window(n, left=None)`` is causal); ``right=0`` makes it causal.
    """
    n_q = _positive_int("n_q", n_q)
    n_k = n_q if n_k is None else _positive_int("n_k", n_k)
    right = _positive_int("right", right, 0)
    sinks = _positive_int("sinks", sinks, 0)
    if sinks > n_k:
        raise ValueError(f"sinks={sinks} exceeds n_k={n_k}")
    j = np.arange(n_k, dtype=np.int64)
    s = n_k - n_q
    if left is None:
        lower_start = np.full(n_k, n_q)
    else:
        lower_start = np.where(j < sinks, n_q, j - s + _positive_int("left", left, 0) + 1)
    return _single(_columns(lower_start, n_q, 0, j - s - right, n_q), n_q)


def kv_cache(n_q: int, cache_seqlens, n_k: int | None = None, *, left: int | None = None,
             sinks: int = 0) -> IntervalMask:
    """New queries over a KV cache whose valid length differs per sample (``flash_attn_with_kvcache``'s
    ``cache_seqlens``): sample b's keys are positions ``[0, cache_seqlens[b])`` of a cache of n_k slots (the new
    tokens included), its n_q queries are the last n_q of them, causal (bottom-right aligned), optionally
    within a window of ``left`` keys plus ``sinks``; cache slots past ``cache_seqlens[b]`` are never seen.

    Examples
    --------
    >>> kv_cache(2, [3, 5], n_k=5).to_dense()[:, 0].astype(int)
    array([[[1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0]],
    <BLANKLINE>
           [[1, 1, 1, 1, 0],
            [1, 1, 1, 1, 1]]])
    """
    n_q = _positive_int("n_q", n_q)
    lengths = _int_list("cache_seqlens", cache_seqlens)
    n_k = max(lengths) if n_k is None else _positive_int("n_k", n_k)
    if max(lengths) > n_k:
        raise ValueError(f"cache_seqlens reach {max(lengths)}, more than the cache's n_k={n_k} slots")
    sinks = _positive_int("sinks", sinks, 0)
    left = None if left is None else _positive_int("left", left, 0)
    # sliding_window(n_q, length, left=left, sinks=min(sinks, length)) per sample: column j < length is masked above
    # row j - s (s = length - n_q) and, with a window, from row j - s + left + 1 on (not for sinks); columns past the
    # length for every row. Each column's four bounds are one 16-byte record, so the samples' runs of identical
    # columns fill like scalars (a decode step rebuilds this for every sample and cache slot).
    cols = np.empty((len(lengths), n_k, 4), np.int32)
    records = cols.view("V16")[..., 0]
    seen, past = (np.array(bounds, np.int32).view("V16")[0] for bounds in ((n_q, n_q, 0, 0), (0, n_q, 0, n_q)))
    for b, length in enumerate(lengths):
        shift = length - n_q
        records[b, :length] = seen
        records[b, length:] = past
        first = max(shift, 0)  # the columns that the queries see only in part
        cols[b, first:length, 3] = np.arange(first - shift, n_q, dtype=np.int32)
        if left is not None:  # rows j - s + left + 1 and down, where that is above n_q
            lo, hi = min(sinks, length), max(min(sinks, length), length - left - 1)
            cols[b, lo:hi, 0] = np.clip(np.arange(lo - shift + left + 1, hi - shift + left + 1), 0, n_q)
    return IntervalMask(cols[:, None], n_q)


def causal(n_q: int, n_k: int | None = None) -> IntervalMask:
    """Query i attends to keys ``j <= i + (n_k - n_q)``: bottom-right aligned, as FlashAttention 2.1+."""
    return sliding_window(n_q, n_k, left=None)


def _packed_columns(n, spans) -> np.ndarray:
    """Intervals of packed spans, each ``(a, b, lower_start, causal_from)``: columns [a, b) are masked from row
    ``lower_start`` on, and above row a for columns before ``causal_from``, above themselves after it.
    Columns outside every span (padding) are masked in every row, by both intervals (so a key block that
    mixes padding and document columns still has tight bounds on each)."""
    j = np.arange(n, dtype=np.int64)
    lower_start = np.zeros(n, np.int64)
    upper_end = np.full(n, n, np.int64)
    for a, b, lower, causal_from in spans:
        lower_start[a:b] = lower
        upper_end[a:b] = np.where(j[a:b] < causal_from, a, j[a:b])
    return _columns(lower_start, n, 0, upper_end, n)


def _document_spans(lengths, *, causal_inside, prefix):
    lengths = _int_list("lengths", lengths)
    prefix = [0] * len(lengths) if prefix is None else _int_list("prefix", prefix, 0)
    if len(prefix) != len(lengths):
        raise ValueError(f"prefix has {len(prefix)} entries for {len(lengths)} documents")
    spans, a = [], 0
    for d, (length, p) in enumerate(zip(lengths, prefix)):
        if p > length:
            raise ValueError(f"prefix[{d}]={p} exceeds the document's length {length}")
        spans.append((a, a + length, a + length, a + p if causal_inside else a + length))
        a += length
    return spans, a


def _from_samples(samples, n, what) -> IntervalMask:
    """One interval spec from per-sample ``(spans, total)``, padded to n (default: the longest sample)."""
    longest = max(total for _, total in samples)
    n = longest if n is None else _positive_int("n", n)
    if longest > n:
        raise ValueError(f"{what} hold {longest} tokens, more than n={n}")
    return IntervalMask(np.stack([_packed_columns(n, spans) for spans, _ in samples])[:, None], n)


def document(lengths, *, causal: bool = True, prefix=None, n: int | None = None) -> IntervalMask:
    """Packed documents: tokens attend only within their document (causally when ``causal``).

    Parameters
    ----------
    lengths : list of int, or list of lists (one per sample: a batch of different packings)
    causal : bool
        Causal inside each document; False gives bidirectional documents.
    prefix : list of int, optional
        ``prefix[d]`` leading tokens of document d are bidirectional among themselves and seen by the whole
        document (prefix-LM, ALPACA input-bidirectional). Nested like ``lengths`` for a batch.
    n : int, optional
        Sequence length; tokens after the last document are padding that attends to nothing and that
        nothing attends to. Default: the total length (the longest sample's in a batch).

    Examples
    --------
    >>> document([2, 3], prefix=[0, 2]).to_dense()[0, 0].astype(int)
    array([[1, 0, 0, 0, 0],
           [1, 1, 0, 0, 0],
           [0, 0, 1, 1, 0],
           [0, 0, 1, 1, 0],
           [0, 0, 1, 1, 1]])
    """
    nested = _is_nested(lengths)
    samples = lengths if nested else [lengths]
    prefixes = prefix if nested and prefix is not None else [prefix] * len(samples)
    if len(prefixes) != len(samples):
        raise ValueError(f"prefix has {len(prefixes)} samples for {len(samples)} samples of lengths")
    return _from_samples([_document_spans(l, causal_inside=causal, prefix=p) for l, p in zip(samples, prefixes)],
                         n, "documents")


def shared_question(question_len, answer_lens, *, n: int | None = None) -> IntervalMask:
    """DPO / reward-model packing: each answer sees the question and itself (causally), never another answer.

    Parameters
    ----------
    question_len : int or list of int (one per packed document)
    answer_lens : list of int, or list of lists (one list of answers per document)
    n : int, optional
        Sequence length; tokens after the last document are padding (attend to nothing).

    Examples
    --------
    >>> shared_question(2, [1, 2]).to_dense()[0, 0].astype(int)
    array([[1, 0, 0, 0, 0],
           [1, 1, 0, 0, 0],
           [1, 1, 1, 0, 0],
           [1, 1, 0, 1, 0],
           [1, 1, 0, 1, 1]])
    """
    questions = _int_list("question_len", question_len)
    answers = answer_lens if _is_nested(answer_lens) else [answer_lens]
    if len(answers) != len(questions):
        raise ValueError(f"{len(questions)} questions but {len(answers)} lists of answers")
    spans, a = [], 0
    for q, ans in zip(questions, answers):
        ans = _int_list("answer_lens", ans)
        end = a + q + sum(ans)
        spans.append((a, a + q, end, a))  # the question: seen, causally, by its whole document
        p = a + q
        for length in ans:
            spans.append((p, p + length, p + length, p))  # an answer: seen by itself only
            p += length
        a = end
    return _from_samples([(spans, a)], n, "questions and answers")


def interleaved(segments, *, n: int | None = None) -> IntervalMask:
    """Interleaved text and images (VLM): text tokens are causal over everything before them; an image's
    tokens also see each other (bidirectional inside the image).

    Parameters
    ----------
    segments : list of (kind, length) with kind "text" or "image", in sequence order
    n : int, optional
        Sequence length; tokens after the segments are padding (attend to nothing).
    """
    spans, total = [], 0
    for i, seg in enumerate(segments):
        if not (isinstance(seg, (tuple, list)) and len(seg) == 2 and seg[0] in ("text", "image")):
            raise ValueError(f"segments[{i}] must be ('text' | 'image', length); got {seg!r}")
        length = _positive_int(f"segments[{i}] length", seg[1])
        # text is causal from its first token; an image's tokens all see the image's first token onwards
        spans.append((total, total + length, None, total if seg[0] == "text" else total + length))
        total += length
    return _from_samples([([(a, b, total, c) for a, b, _, c in spans], total)], n, "segments")


def from_intervals(startend_row_indices, causal: bool = False, *, n_q: int | None = None) -> IntervalMask:
    """A mask from FlashMask's ``startend_row_indices`` (NumPy, or anything NumPy or DLPack can read, such as
    a torch tensor).

    Parameters
    ----------
    startend_row_indices : int array (B or 1, H or 1, n_k, C), C in {1, 2, 4}
        Column j masks rows ``LTS <= i < LTE`` and ``UTS <= i < UTE``. C=4: (LTS, LTE, UTS, UTE), not causal.
        C=2 with causal: (LTS, LTE). C=2 without: (LTS, UTE) with LTE = n_q, UTS = 0. C=1 (causal): LTS,
        LTE = n_q.
    causal : bool
        Also mask ``j > i + (n_k - n_q)``.
    n_q : int, optional
        Number of query rows (default n_k).
    """
    se = _host_array(startend_row_indices, "startend_row_indices")
    if not np.issubdtype(se.dtype, np.integer):
        raise TypeError(f"startend_row_indices must be an integer array; got {se.dtype}")
    if se.ndim != 4:
        raise ValueError(f"startend_row_indices must have shape (B, H, n_k, C); got {se.shape}")
    B, H, n_k, C = se.shape
    n_q = n_k if n_q is None else _positive_int("n_q", n_q)
    flat = _maskprep.normalize_intervals(se.reshape(B * H, n_k, C), n_q, bool(causal))
    return IntervalMask(flat.reshape(B, H, n_k, 4), n_q)


def _host_array(x, name):
    """A NumPy view of a host array (NumPy, or a CPU DLPack / array-interface object); GPU arrays copy once."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack_device__") and x.__dlpack_device__()[0] != 1:  # kDLCPU = 1
        if hasattr(x, "get"):  # CuPy
            return x.get()
        if hasattr(x, "cpu"):  # torch
            return x.cpu().numpy()
        raise TypeError(f"{name} lives on device {x.__dlpack_device__()}; pass a host array")
    if hasattr(x, "__dlpack__"):
        return np.from_dlpack(x)
    return np.asarray(x)


# ---------------------------------------------------------------------------------------------------- bits


class DenseMask(MaskSpec):
    """An arbitrary boolean mask held densely, ``(B or 1, H or 1, n_q, n_k)``: a NumPy array, or a CuPy array
    that stays on its GPU (its plan is classified there; only tile kinds and partial tiles reach the host)."""

    def __init__(self, mask):
        if mask.dtype != np.bool_:
            raise TypeError(f"a dense mask must be boolean; got dtype {mask.dtype}")
        if mask.ndim == 2:
            mask = mask[None, None]
        if mask.ndim != 4:
            raise ValueError(f"a dense mask must have shape (n_q, n_k) or (B, H, n_q, n_k); got {mask.shape}")
        super().__init__(mask.shape)
        self.mask = mask

    @property
    def on_device(self) -> bool:
        return not isinstance(self.mask, np.ndarray)

    def to_dense(self):
        return self.mask.get() if self.on_device else self.mask

    def _repeat_rows(self, factor):
        return DenseMask(self.mask.repeat(factor, axis=2))  # NumPy or CuPy alike

    def _compile(self, tile, threads):
        B, H, n_q, n_k = self.shape
        groups = self.mask.reshape(B * H, n_q, n_k)
        if self.on_device:
            from ._classify import device_dense_blocks

            blocks = device_dense_blocks(groups, tile)
        else:
            blocks = _maskprep.dense_plan(groups, *tile, threads=threads)
        return BlockMask(self.shape, tile, blocks)


class GraphMask(MaskSpec):
    """Graph adjacency as a mask: node i attends to node j iff ``adjacency[i, j]``.

    ``perm`` (or None) is the node order the plan is built in: attention gathers q, k, v rows in that order
    and scatters the results back, so callers see their own order.
    """

    def __init__(self, adjacency, perm=None):
        import scipy.sparse as sp

        adj = sp.csr_array(adjacency, dtype=bool)
        n = adj.shape[0]
        if adj.shape != (n, n):
            raise ValueError(f"a graph adjacency must be square; got shape {adj.shape}")
        super().__init__((1, 1, n, n), perm)
        adj.sum_duplicates()
        adj.eliminate_zeros()
        self.adjacency = adj

    def to_dense(self):
        return self.adjacency.toarray()[None, None]

    def reordered(self):
        """The adjacency in plan order (rows and columns permuted by ``perm``)."""
        if self.perm is None:
            return self.adjacency
        # the CSC round trip (two O(nnz) counting sorts) leaves each row's columns sorted, which the plan compiler
        # needs: 3x faster than sort_indices() on the permuted rows (16k graph_rcm, 404k edges: 2.5 vs 7.6 ms)
        return self.adjacency[self.perm][:, self.perm].tocsc().tocsr()

    def _compile(self, tile, threads):
        adj = self.reordered()
        adj.sort_indices()  # a no-op when sorted: checked by a flag
        n = self.shape[2]
        blocks = _maskprep.csr_plan(adj.indptr, adj.indices, n, n, *tile, threads=threads)
        return BlockMask(self.shape, tile, blocks, perm=self.perm)


class FunctionMask(MaskSpec):
    """A mask given by a vectorised predicate ``mask_mod(q_idx, kv_idx) -> bool`` (as FlexAttention's
    ``mask_mod`` on NumPy index arrays), evaluated only on the tiles ``support(tile)`` marks.

    ``support(tile)`` returns a bool array (n_mblocks, n_nblocks) that must cover every true element; None
    means every tile (cost O(n_q * n_k) at compile time). ``cell = (rows, cols)`` says the predicate is constant
    on cells of that size (a block pattern): where the tile is a multiple of it, the predicate is evaluated once
    per cell over the whole grid (O(n_q * n_k / cell area)) and the tiles are classified from their cells.

    ``perm`` (square masks): the token order the plan is built in, as :class:`GraphMask`'s; ``mask_mod`` and
    ``support`` then speak of positions in that order (position p is the caller's token ``perm[p]``), while
    :meth:`to_dense` and attention keep the caller's order.
    """

    def __init__(self, mask_mod: Callable, n_q: int, n_k: int, support: Callable | None = None, cell=None,
                 perm=None):
        super().__init__((1, 1, _positive_int("n_q", n_q), _positive_int("n_k", n_k)), perm)
        self.mask_mod = mask_mod
        self.support = support
        self.cell = None if cell is None else (_positive_int("cell rows", cell[0]), _positive_int("cell cols", cell[1]))

    def _eval(self, rows, cols):
        out = np.asarray(self.mask_mod(rows[:, None], cols[None, :]))
        if out.dtype != np.bool_ or out.shape != (rows.size, cols.size):
            raise TypeError(f"mask_mod must return a bool array of shape {(rows.size, cols.size)}; "
                            f"got {out.dtype} {out.shape}")
        return out

    def to_dense(self):
        return self._caller_order(self._eval(np.arange(self.n_q), np.arange(self.n_k)))[None, None]

    def _compile(self, tile, threads):
        tile_m, tile_n = tile
        rows_b, cols_b = -(-self.n_q // tile_m), -(-self.n_k // tile_n)
        support = np.ones((rows_b, cols_b), bool) if self.support is None else np.asarray(self.support(tile))
        if support.shape != (rows_b, cols_b):
            raise ValueError(f"support returned shape {support.shape}; expected {(rows_b, cols_b)}")
        on_cells = self.cell is not None and tile_m % self.cell[0] == 0 and tile_n % self.cell[1] == 0
        raw = self._cell_tiles(tile, support) if on_cells else self._element_tiles(tile, support)
        return BlockMask(self.shape, tile, _maskprep.finish_bits(raw, self.n_q, self.n_k, tile_m, tile_n),
                         perm=self.perm)

    def _element_tiles(self, tile, support):
        """The forward tiles, the predicate evaluated per element on each query-block strip's supported tiles."""
        tile_m, tile_n = tile
        n_q, n_k = self.n_q, self.n_k
        row_ptr, col_idx, kind, payload, bits = [0], [], [], [], []
        partial = 0
        for m in range(support.shape[0]):
            blocks = np.flatnonzero(support[m])
            if blocks.size == 0:
                row_ptr.append(row_ptr[-1])
                continue
            cols = (blocks[:, None] * tile_n + np.arange(tile_n)).ravel()
            cols = cols[cols < n_k]
            rows = np.arange(m * tile_m, min(n_q, (m + 1) * tile_m))
            piece = _maskprep.dense_tiles(self._eval(rows, cols)[None], tile_m, tile_n)
            col_idx.append(blocks[piece["col_idx"]])
            kind.append(piece["kind"])
            payload.append(np.where(piece["payload"] >= 0, piece["payload"] + partial, -1))
            bits.append(piece["bits"])
            partial += piece["bits"].shape[0]
            row_ptr.append(row_ptr[-1] + piece["col_idx"].size)
        words = tile_m * tile_n // 32
        return {
            "row_ptr": np.asarray(row_ptr, np.int64)[None],
            "col_idx": np.concatenate(col_idx) if col_idx else np.empty(0, np.int32),
            "kind": np.concatenate(kind) if kind else np.empty(0, np.uint8),
            "payload": np.concatenate(payload) if payload else np.empty(0, np.int32),
            "bits": np.concatenate(bits) if bits else np.empty((0, words), np.uint32),
        }

    def _cell_tiles(self, tile, support):
        """The forward tiles where the tile is a multiple of the cell: the predicate once per cell of the whole
        grid, each tile classified from its cells (FULL: every cell holding a valid element is true), one bit tile
        per distinct (cells, valid rows, valid columns) of the PARTIAL tiles."""
        (tile_m, tile_n), (cm, cn) = tile, self.cell
        n_q, n_k = self.n_q, self.n_k
        rows_b, cols_b = support.shape
        per_m, per_n = tile_m // cm, tile_n // cn
        first_row, first_col = np.arange(rows_b * per_m) * cm, np.arange(cols_b * per_n) * cn
        in_rows, in_cols = first_row < n_q, first_col < n_k
        cells = np.zeros((first_row.size, first_col.size), bool)  # cells past the edges hold no element: false
        cells[np.ix_(in_rows, in_cols)] = self._eval(first_row[in_rows], first_col[in_cols])
        cells &= np.repeat(np.repeat(support, per_m, axis=0), per_n, axis=1)

        def per_tile(reduce, x):  # (rows_b * per_m, cols_b * per_n) cells -> (rows_b, cols_b), two passes
            return reduce(reduce(x.reshape(rows_b, per_m, -1), axis=1).reshape(rows_b, cols_b, per_n), axis=2)

        listed = per_tile(np.logical_or.reduce, cells)
        m_idx, n_idx = np.nonzero(listed)  # row-major: key blocks ascending in each query block
        full = per_tile(np.logical_and.reduce, cells | ~(in_rows[:, None] & in_cols[None, :]))[m_idx, n_idx]
        pm, pn = m_idx[~full], n_idx[~full]
        valid_rows = np.minimum(tile_m, n_q - pm * tile_m).astype(np.int32)
        valid_cols = np.minimum(tile_n, n_k - pn * tile_n).astype(np.int32)
        by_tile = cells.reshape(rows_b, per_m, cols_b, per_n).swapaxes(1, 2)  # (rows_b, cols_b, per_m, per_n)
        keys = np.concatenate([np.packbits(by_tile[pm, pn].reshape(pm.size, per_m * per_n), axis=1),
                               valid_rows[:, None].view(np.uint8), valid_cols[:, None].view(np.uint8)], axis=1)
        # one bytes value per key (np.unique over rows, axis=0, is ten times slower)
        _, first, which = np.unique(keys.view(f"V{keys.shape[1]}").ravel(), return_index=True, return_inverse=True)
        elements = np.repeat(np.repeat(by_tile[pm[first], pn[first]], cm, axis=1), cn, axis=2)
        elements &= np.arange(tile_m)[None, :, None] < valid_rows[first, None, None]
        elements &= np.arange(tile_n)[None, None, :] < valid_cols[first, None, None]
        payload = np.full(m_idx.size, -1, np.int32)
        payload[~full] = which.ravel()
        bits = np.packbits(elements.reshape(first.size, tile_m * tile_n), axis=1, bitorder="little")
        return {
            "row_ptr": np.concatenate([[0], np.cumsum(listed.sum(axis=1))]).astype(np.int64)[None],
            "col_idx": n_idx.astype(np.int32),
            "kind": np.where(full, 1, 2).astype(np.uint8),  # FULL, PARTIAL
            "payload": payload,
            "bits": bits.view(np.uint32),  # element (r, c) at bit r * tile_n + c, as dense_tiles writes them
        }


def coarse_support(table, cell, n_q: int, n_k: int):
    """``support`` for a :class:`FunctionMask` that can be true only inside the true cells of a coarse grid
    ``table`` of ``cell = (rows, cols)``-sized cells (a block pattern, another library's block mask)."""
    # 0/1 matrices multiplied in float32 (BLAS; integer matmul has none): each entry counts the true cells a tile
    # meets, at most the cells of one tile, exact in float32 below 2**24
    table = np.asarray(table, bool).astype(np.float32)

    def meets(t, size, n, cells):
        first = np.arange(-(-n // t)) * t
        last = np.minimum(first + t, n) - 1
        c = np.arange(cells)
        return ((first[:, None] // size <= c) & (c <= last[:, None] // size)).astype(np.float32)

    def support(tile):
        rows = meets(tile[0], cell[0], n_q, table.shape[0])
        cols = meets(tile[1], cell[1], n_k, table.shape[1])
        return (rows @ table @ cols.T) > 0

    return support


def from_function(mask_mod: Callable, n_q: int, n_k: int | None = None, *, support=None) -> FunctionMask:
    """A mask from a vectorised predicate over NumPy index arrays, ``mask_mod(q_idx, kv_idx) -> bool``
    (FlexAttention's ``mask_mod`` without batch and head). See :class:`FunctionMask` for ``support``."""
    return FunctionMask(mask_mod, n_q, n_q if n_k is None else n_k, support)


def longformer(n: int, window: int, *, global_tokens: int = 0, dilation: int = 1) -> IntervalMask:
    """Longformer: ``|i - j| <= window`` with ``(i - j) % dilation == 0``, plus global tokens (the first
    ``global_tokens`` rows and columns attend and are attended everywhere).

    With dilation the intervals are in residue order (``perm``): the global tokens first, then the others with
    ``i = c (mod dilation)`` together, class by class. Inside a class consecutive positions are consecutive steps
    ``i // dilation``, so each class sees a plain band of ``window // dilation`` positions either side: every column
    sees the global rows and one run of rows. On long sequences that visits about ``1 / dilation`` of the tiles of
    the natural order, most of them FULL; attention gathers and scatters rows through the plan's ``perm``, so
    callers keep their own order.

    Examples
    --------
    >>> spec = longformer(6, 2, global_tokens=1, dilation=2)
    >>> spec.perm.tolist()
    [0, 2, 4, 1, 3, 5]
    >>> spec.to_dense()[0, 0].astype(int)
    array([[1, 1, 1, 1, 1, 1],
           [1, 1, 0, 1, 0, 0],
           [1, 0, 1, 0, 1, 0],
           [1, 1, 0, 1, 0, 1],
           [1, 0, 1, 0, 1, 0],
           [1, 0, 0, 1, 0, 1]])
    """
    n = _positive_int("n", n)
    window = _positive_int("window", window, 0)
    g = _positive_int("global_tokens", global_tokens, 0)
    dilation = _positive_int("dilation", dilation)
    if g > n:
        raise ValueError(f"global_tokens={g} exceeds n={n}")
    w = min(window // dilation, n)  # n spans any class already, and keeps huge windows inside int64
    rest = np.arange(g, n)  # the tokens that are not global; in residue order they fill positions g to n - 1
    perm = np.concatenate([np.arange(g), rest[np.argsort(rest % dilation, kind="stable")]])
    # position p >= g: its class fills positions [start, end); its column is masked in the rows from g on that lie
    # outside the class or more than w positions from p. Global columns (p < g) mask nothing.
    residue = perm[g:] % dilation
    start = g + np.searchsorted(residue, residue, side="left")
    end = g + np.searchsorted(residue, residue, side="right")
    lower_start = np.concatenate([np.full(g, n), np.minimum(end, rest + w + 1)])
    upper_end = np.concatenate([np.full(g, g), np.maximum(start, rest - w)])
    columns = _columns(lower_start, n, g, upper_end, n)
    return IntervalMask(columns[None, None], n, None if np.array_equal(perm, np.arange(n)) else perm)


def bigbird(n: int, block: int, window_blocks: int = 3, global_blocks: int = 2, random_blocks: int = 3,
            seed: int = 0) -> FunctionMask:
    """BigBird's block pattern on ``block``-token blocks: each block row sees ``window_blocks`` blocks around
    its diagonal, the first ``global_blocks`` block rows and columns are global, and each block row sees
    ``random_blocks`` other blocks drawn (seeded) from those it does not see yet."""
    n = _positive_int("n", n)
    block = _positive_int("block", block)
    nb = -(-n // block)
    w = _positive_int("window_blocks", window_blocks, 0)
    g = min(_positive_int("global_blocks", global_blocks, 0), nb)
    r = _positive_int("random_blocks", random_blocks, 0)
    bi = np.arange(nb)
    table = np.abs(bi[:, None] - bi[None, :]) <= w // 2
    table[:g] = True
    table[:, :g] = True
    rng = np.random.default_rng(seed)
    for row in range(g, nb):
        free = np.flatnonzero(~table[row])
        table[row, rng.choice(free, size=min(r, free.size), replace=False)] = True

    def mask_mod(i, j):
        return table[i // block, j // block]

    support = coarse_support(table, (block, block), n, n)
    spec = FunctionMask(mask_mod, n, n, support, cell=(block, block))
    spec.block_table = table
    return spec


class TreeMask(DenseMask):
    """A speculative-decoding tree over a KV prefix (see :func:`medusa_tree`).

    Attributes
    ----------
    choices : list of tuple
        The tree's paths, sorted as Medusa sorts them (by depth, then lexicographically); node k + 1 is
        ``choices[k]``, node 0 the root.
    position_ids : int64 (T,)
        Depth of each node (root 0): add ``prefix_len`` for the tokens' positions.
    retrieve_indices : int64 (leaves, depth + 1)
        Per leaf (leaves in lexicographic path order), the nodes from the root down to it, padded with -1.
    parents : int64 (T,)
        Each node's parent (-1 for the root).
    """


def medusa_tree(choices, prefix_len: int = 0) -> TreeMask:
    """Tree-verification mask of Medusa / EAGLE ``choices`` over a KV prefix.

    The T = len(choices) + 1 tree tokens (the root and one per path) are the queries; the keys are the
    ``prefix_len`` cached tokens followed by the tree tokens. Each node sees the whole prefix, its ancestors
    and itself.

    Examples
    --------
    >>> spec = medusa_tree([[0], [1], [0, 0]], prefix_len=2)
    >>> spec.to_dense()[0, 0].astype(int)
    array([[1, 1, 1, 0, 0, 0],
           [1, 1, 1, 1, 0, 0],
           [1, 1, 1, 0, 1, 0],
           [1, 1, 1, 1, 0, 1]])
    >>> spec.position_ids.tolist(), spec.retrieve_indices.tolist()
    ([0, 1, 1, 2], [[0, 1, 3], [0, 2, -1]])
    """
    prefix_len = _positive_int("prefix_len", prefix_len, 0)
    paths = []
    for i, c in enumerate(choices):
        path = tuple(int(x) for x in c)
        if not path or min(path) < 0:
            raise ValueError(f"choices[{i}] must be a non-empty path of non-negative ints; got {c!r}")
        paths.append(path)
    if len(set(paths)) != len(paths):
        raise ValueError("choices contains a path twice")
    paths.sort(key=lambda p: (len(p), p))
    node = {p: k + 1 for k, p in enumerate(paths)}
    t = len(paths) + 1
    parents = np.full(t, -1, np.int64)
    for p, k in node.items():
        if len(p) > 1 and p[:-1] not in node:
            raise ValueError(f"choices has {list(p)} but not its parent {list(p[:-1])}")
        parents[k] = node[p[:-1]] if len(p) > 1 else 0
    tree = np.eye(t, dtype=bool)
    tree[:, 0] = True
    for p, k in node.items():
        for d in range(1, len(p)):
            tree[k, node[p[:d]]] = True
    mask = np.concatenate([np.ones((t, prefix_len), bool), tree], axis=1)
    spec = TreeMask(mask)
    spec.choices = paths
    spec.position_ids = np.array([0] + [len(p) for p in paths], np.int64)
    # leaves in lexicographic path order, as Medusa orders its retrieve paths
    leaves = sorted(p for p in paths if not any(len(q) == len(p) + 1 and q[:-1] == p for q in paths))
    depth = max((len(p) for p in paths), default=0)
    retrieve = np.full((len(leaves), depth + 1), -1, np.int64)
    for row, p in enumerate(leaves):
        retrieve[row, 0] = 0
        for d in range(1, len(p) + 1):
            retrieve[row, d] = node[p[:d]]
    spec.retrieve_indices = retrieve
    spec.parents = parents
    return spec


def from_dense(mask) -> DenseMask:
    """An arbitrary boolean mask, ``(n_q, n_k)`` or ``(B or 1, H or 1, n_q, n_k)``. True = attend.

    NumPy or CPU DLPack masks are compiled on the host; CuPy or CUDA DLPack masks (a torch CUDA tensor) stay
    on their GPU and are classified there, without copying the ``n_q x n_k`` mask to the host.
    """
    from ._arrays import ingest

    views, _, _ = ingest(mask=mask)
    return DenseMask(views["mask"])


def from_graph(adjacency, reorder: str | None = "auto") -> GraphMask:
    """A graph transformer's mask: node i attends to node j iff ``adjacency[i, j]`` (any scipy.sparse
    matrix or dense array; add self loops yourself if nodes should see themselves).

    Parameters
    ----------
    reorder : {"auto", "rcm", None}
        Node order the plan uses: None keeps the given order; "rcm" is Reverse Cuthill-McKee; "auto" picks,
        among its candidate orderings, the one that leaves the fewest active 128 x 128 tiles. Attention
        permutes q, k, v and un-permutes the results, so callers never see the order.
    """
    from ._reorder import node_order

    spec = GraphMask(adjacency)
    if reorder is None:
        return spec
    perm = node_order(spec.adjacency, reorder)
    if np.array_equal(perm, np.arange(perm.size)):  # the given order won: no gathers in attention
        return spec
    return GraphMask(spec.adjacency, perm)


def stack(specs: Sequence[MaskSpec]) -> MaskSpec:
    """A batch of masks, one per sample (each of batch size 1, same head count and lengths)."""
    specs = list(specs)
    if not specs:
        raise ValueError("stack needs at least one spec")
    kinds = {type(s) for s in specs}
    shapes = {s.shape for s in specs}
    if len(shapes) != 1 or next(iter(shapes))[0] != 1:
        raise ValueError(f"stack needs specs of one shape with B=1; got {sorted(shapes)}")
    if kinds <= {IntervalMask}:
        perm = specs[0].perm
        if any(not np.array_equal(s.perm, perm) for s in specs):  # a plan has one token order for every sample
            raise ValueError("stack needs interval specs of one token order (perm); these have different ones")
        return IntervalMask(np.concatenate([s.intervals for s in specs]), specs[0].n_q, perm)
    if all(isinstance(s, DenseMask) for s in specs):
        return DenseMask(np.concatenate([np.asarray(s.mask) for s in specs]))
    raise TypeError(f"stack takes interval or dense specs of one kind; got {sorted(k.__name__ for k in kinds)}")


def from_flex_block_mask(block_mask) -> "FunctionMask":
    """The mask of a FlexAttention ``BlockMask`` (see :func:`maskattn.interop.from_flex_block_mask`)."""
    from .interop import from_flex_block_mask as convert

    return convert(block_mask)
