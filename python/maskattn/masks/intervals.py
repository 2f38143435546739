"""Interval masks: column-wise row intervals (FlashMask's representation), O(n) memory; the kernels mask partial
tiles from them without a dense mask. Causal, sliding windows with sinks, KV caches, packed documents, prefix-LM,
shared questions, interleaved images and Longformer (dilated in a token order of its own) are all intervals.
"""

from __future__ import annotations

import numpy as np

from .._maskprep import plan as _maskprep
from .base import MaskSpec, _host_array, _int_list, _is_nested, _positive_int


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

    def _tiles(self, tile, threads):
        B, H, n_q, n_k = self.shape
        groups = self.intervals.reshape(B * H, n_k, 4)
        return _maskprep.interval_plan(groups, n_q, *tile, threads=threads)


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
    lengths = _int_list("cache_seqlens", cache_seqlens, empty_ok=False)
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
    lengths = _int_list("lengths", lengths, empty_ok=False)
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
    return _from_samples([_document_spans(s, causal_inside=causal, prefix=p) for s, p in zip(samples, prefixes)],
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
    questions = _int_list("question_len", question_len, empty_ok=False)
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
    if len(segments) == 0:
        raise ValueError("segments is empty; give at least one ('text' | 'image', length)")
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
