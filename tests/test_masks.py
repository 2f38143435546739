"""Each builder's dense form against an independent element-by-element definition, FlashMask's interval
semantics case by case, and the builders' input errors."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maskattn import masks


def brute(n_q, n_k, visible):
    return np.array([[bool(visible(i, j)) for j in range(n_k)] for i in range(n_q)])


def dense2d(spec):
    d = spec.to_dense()
    assert d.dtype == np.bool_ and d.shape == spec.shape
    return d[0, 0]


@pytest.mark.parametrize("n_q,n_k", [(50, 50), (20, 57), (57, 20)])
def test_causal(n_q, n_k):
    s = n_k - n_q
    assert np.array_equal(dense2d(masks.causal(n_q, n_k)), brute(n_q, n_k, lambda i, j: j <= i + s))


@pytest.mark.parametrize("n_q,n_k,left,right,sinks", [
    (60, 60, 7, 0, 0), (60, 60, 7, 3, 4), (30, 75, 10, 0, 5), (75, 30, 4, 2, 2), (40, 40, 0, 0, 40),
    (40, 40, None, 5, 0),
])
def test_sliding_window(n_q, n_k, left, right, sinks):
    s = n_k - n_q

    def visible(i, j):
        window = (left is None or j >= i + s - left) and j <= i + s + right
        return window or (j < sinks and j <= i + s + right)

    spec = masks.sliding_window(n_q, n_k, left=left, right=right, sinks=sinks)
    assert np.array_equal(dense2d(spec), brute(n_q, n_k, visible))


def doc_ids(lengths, n):
    ids = np.full(n, -1)
    ids[: sum(lengths)] = np.repeat(np.arange(len(lengths)), lengths)
    return ids


@pytest.mark.parametrize("causal", [True, False])
def test_document(causal):
    lengths, prefix, n = [10, 3, 25, 1], [4, 3, 0, 1], 45
    ids = doc_ids(lengths, n)
    starts = np.concatenate([[0], np.cumsum(lengths)])

    def visible(i, j):
        if ids[i] < 0 or ids[i] != ids[j]:
            return False
        in_prefix = j < starts[ids[j]] + prefix[ids[j]]
        return not causal or j <= i or in_prefix

    spec = masks.document(lengths, causal=causal, prefix=prefix, n=n)
    assert np.array_equal(dense2d(spec), brute(n, n, visible))


def test_document_batch_has_one_mask_per_sample():
    spec = masks.document([[5, 5], [2, 7, 1], [4]])
    assert spec.shape == (3, 1, 10, 10)
    for b, lengths in enumerate([[5, 5], [2, 7, 1], [4]]):
        assert np.array_equal(spec.to_dense()[b, 0], dense2d(masks.document(lengths, n=10)))


def test_shared_question():
    questions, answers, n = [6, 3], [[4, 5, 2], [3, 3]], 30
    seg, doc = np.full(n, -1), np.full(n, -1)
    pos = 0
    for d, (q, ans) in enumerate(zip(questions, answers)):
        doc[pos:pos + q + sum(ans)] = d
        seg[pos:pos + q] = 0
        pos += q
        for k, a in enumerate(ans):
            seg[pos:pos + a] = k + 1
            pos += a

    def visible(i, j):
        if doc[i] < 0 or doc[i] != doc[j] or j > i:
            return False
        return seg[j] == 0 or seg[j] == seg[i]

    dense = dense2d(masks.shared_question(questions, answers, n=n))
    assert np.array_equal(dense, brute(n, n, visible))
    # answers never see each other
    for a, b in itertools.permutations(range(1, 4), 2):
        assert not dense[np.ix_((seg == a) & (doc == 0), (seg == b) & (doc == 0))].any()


def test_interleaved():
    segments = [("text", 5), ("image", 6), ("text", 3), ("image", 4), ("text", 2)]
    n = 24
    image = np.full(n, -1)
    pos = 0
    for k, (kind, length) in enumerate(segments):
        if kind == "image":
            image[pos:pos + length] = k
        pos += length

    def visible(i, j):
        if i >= pos or j >= pos:
            return False
        return j <= i or (image[i] >= 0 and image[i] == image[j])

    assert np.array_equal(dense2d(masks.interleaved(segments, n=n)), brute(n, n, visible))


def longformer_dense(n, window, g, d):
    """Longformer's definition: ``|i - j| <= window`` and ``(i - j) % d == 0``, or i or j a global token."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    return ((np.abs(i - j) <= window) & ((i - j) % d == 0)) | (i < g) | (j < g)


def check_longformer(n, window, g, d, tile):
    """The spec is the definition in the caller's order; its perm is residue order (global tokens, then each
    residue class in token order), None where that is the identity; the plan is the mask in perm order, exactly."""
    from maskattn import compile_mask

    spec = masks.longformer(n, window, global_tokens=g, dilation=d)
    assert isinstance(spec, masks.IntervalMask)
    assert np.array_equal(dense2d(spec), longformer_dense(n, window, g, d))
    perm = np.array(list(range(g)) + sorted(range(g, n), key=lambda i: (i % d, i)), np.int64)
    if spec.perm is None:
        assert np.array_equal(perm, np.arange(n))
    else:
        assert np.array_equal(spec.perm, perm) and not np.array_equal(perm, np.arange(n))
    plan = compile_mask(spec, tile)
    assert plan.perm is spec.perm
    assert np.array_equal(plan.to_dense()[0, 0], longformer_dense(n, window, g, d)[perm][:, perm])
    return spec, plan


@pytest.mark.parametrize("n,window,g,d", [
    (40, 5, 0, 1), (40, 5, 3, 1), (40, 6, 2, 2), (40, 9, 0, 3),
    (40, 7, 5, 3),                   # g not a multiple of d: classes start mid-way
    (40, 2, 4, 3), (41, 0, 0, 4),    # window < d: each class sees only itself
    (40, 100, 2, 3), (40, 39, 0, 1),  # window >= n - 1
    (40, 5, 40, 3), (40, 5, 39, 2),   # every token global, or all but one
    (40, 5, 2, 40), (40, 50, 2, 41), (40, 80, 0, 39),  # d >= n - 1: classes of one or two tokens
    (1, 0, 0, 1), (1, 3, 1, 2), (1, 3, 0, 5), (2, 1, 0, 2), (2, 2, 1, 2),
])
@pytest.mark.parametrize("tile", [(16, 16), (16, 48), (64, 32)])
def test_longformer(n, window, g, d, tile):
    check_longformer(n, window, g, d, tile)


@st.composite
def longformer_args(draw, most=300):
    """(n, window, global_tokens, dilation), windows and dilations past n included."""
    n = draw(st.integers(1, most))
    return n, draw(st.integers(0, n + 20)), draw(st.integers(0, n)), draw(st.integers(1, min(n + 5, 40)))


@settings(max_examples=200, deadline=None)
@given(args=longformer_args(), tile=st.sampled_from([(16, 16), (16, 48), (48, 80), (128, 128), (256, 16)]))
def test_longformer_any_shape(args, tile):
    check_longformer(*args, tile)


def test_interval_mask_with_a_perm():
    """Intervals in a token order of their own: the perm is checked and kept read-only (a copy), the dense form is
    in the caller's order, and what would hand out or reuse the intervals in the caller's order refuses."""
    from maskattn import compile_mask

    spec = masks.longformer(30, 4, global_tokens=3, dilation=2)
    perm = np.array(spec.perm)
    assert spec.perm.dtype == np.int64 and not spec.perm.flags.writeable
    again = masks.IntervalMask(spec.intervals, 30, perm)
    assert again.perm is not perm and np.array_equal(again.perm, perm)
    assert np.array_equal(again.to_dense(), spec.to_dense())
    plain = masks.IntervalMask(spec.intervals, 30)
    assert np.array_equal(plain.to_dense()[0, 0], spec.to_dense()[0, 0][perm][:, perm])
    assert compile_mask(again, (16, 16)).equals(compile_mask(spec, (16, 16)))
    assert not compile_mask(plain, (16, 16)).equals(compile_mask(spec, (16, 16)))
    assert np.array_equal(plain.startend_row_indices, spec.intervals)
    with pytest.raises(ValueError, match="own token order"):
        spec.startend_row_indices
    assert spec.repeat_rows(1) is spec and spec.repeat_rows(2) is None
    stacked = masks.stack([spec, again])
    assert stacked.shape == (2, 1, 30, 30) and np.array_equal(stacked.perm, perm)
    assert np.array_equal(stacked.to_dense(), np.concatenate([spec.to_dense()] * 2))
    with pytest.raises(ValueError, match="one token order"):
        masks.stack([spec, plain])
    with pytest.raises(ValueError, match="one token order"):
        masks.stack([spec, masks.longformer(30, 4, global_tokens=3, dilation=3)])
    with pytest.raises(ValueError, match=r"permutation of range\(30\)"):
        masks.IntervalMask(spec.intervals, 30, perm[::2])
    with pytest.raises(ValueError, match=r"permutation of range\(30\)"):
        masks.IntervalMask(spec.intervals, 30, np.zeros(30))
    with pytest.raises(ValueError, match="square"):
        masks.IntervalMask(spec.intervals, 31, perm)


@pytest.mark.parametrize("n,window,g,d", [(1000, 64, 8, 2), (777, 100, 0, 3), (300, 40, 5, 3), (50, 5, 49, 2),
                                          (4096, 256, 16, 2)])
@pytest.mark.parametrize("tile", [(128, 128), (64, 64), (16, 32)])
def test_dilated_longformer_plans_in_residue_order(n, window, g, d, tile):
    """The plan is the mask in residue order (global tokens, then each class a band): exactly the caller's mask,
    rows and columns taken in perm order, on no more tiles than the natural order's band, and on far fewer once
    the sequence is long."""
    from maskattn import compile_mask

    spec, plan = check_longformer(n, window, g, d, tile)
    assert plan.payload in ("intervals", "none")
    natural = compile_mask(masks.from_dense(dense2d(spec)), tile)
    assert plan.nnz <= natural.nnz
    assert n < 4096 or plan.nnz < 0.8 * natural.nnz


@pytest.mark.parametrize("tile", [(128, 128), (64, 64), (128, 64), (96, 96), (16, 32)])
def test_cell_constant_predicate_gives_the_elementwise_plan(tile):
    """bigbird declares its predicate constant on its blocks: evaluated once per cell and repeated (tiles that are
    multiples of the block) or per element (the others), the plan is the one of plain element-wise evaluation."""
    from maskattn import compile_mask

    spec = masks.bigbird(1000, 32, window_blocks=3, global_blocks=1, random_blocks=2, seed=3)
    assert spec.cell == (32, 32)
    plain = masks.FunctionMask(spec.mask_mod, 1000, 1000, spec.support)
    assert compile_mask(spec, tile).equals(compile_mask(plain, tile))


@st.composite
def cell_masks(draw):
    """(spec, tile): a predicate constant on cells of a random table, in a random token order or none, and a tile
    that is a multiple of the cell."""
    n, cell = draw(st.integers(1, 700)), draw(st.sampled_from([16, 32, 48, 64]))
    tile = tuple(cell * draw(st.integers(1, 256 // cell)) for _ in range(2))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    table = rng.random((-(-n // cell),) * 2) < draw(st.floats(0, 1))
    perm = rng.permutation(n) if draw(st.booleans()) else None
    return masks.FunctionMask(lambda i, j: table[i // cell, j // cell], n, n, cell=(cell, cell), perm=perm), tile


@settings(max_examples=150, deadline=None)
@given(cell_masks())
def test_cell_path_any_shape(spec_tile):
    """Tiles that are multiples of the cell are classified from the cells (once per cell over the whole grid, no
    element-wise strip): the plan is the element-wise one for every size, edge and density, and is the predicate
    (in the plan's token order)."""
    from maskattn import compile_mask

    spec, tile = spec_tile
    plain = masks.FunctionMask(spec.mask_mod, spec.n_q, spec.n_k, perm=spec.perm)
    plan = compile_mask(spec, tile)
    assert plan.equals(compile_mask(plain, tile))
    tokens = np.arange(spec.n_q)
    assert np.array_equal(plan.to_dense()[0, 0], spec.mask_mod(tokens[:, None], tokens[None, :]))


def test_bigbird():
    n, block, w, g, r = 100, 8, 3, 2, 3
    spec = masks.bigbird(n, block, window_blocks=w, global_blocks=g, random_blocks=r, seed=5)
    table = spec.block_table
    nb = table.shape[0]
    assert nb == 13
    rows = np.arange(nb)
    window = np.abs(rows[:, None] - rows[None, :]) <= w // 2
    assert table[:g].all() and table[:, :g].all() and table[window].all()
    structural = window.copy()
    structural[:g] = structural[:, :g] = True
    extra = (table & ~structural).sum(axis=1)
    assert np.all(extra[g:] == np.minimum(r, (~structural[g:]).sum(axis=1)))
    assert np.array_equal(dense2d(spec), brute(n, n, lambda i, j: table[i // block, j // block]))
    assert not np.array_equal(table, masks.bigbird(n, block, seed=6).block_table)


def test_medusa_tree():
    choices = [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1]]
    prefix = 7
    spec = masks.medusa_tree(choices, prefix_len=prefix)
    paths = [()] + sorted((tuple(c) for c in choices), key=lambda p: (len(p), p))
    t = len(paths)

    def visible(i, j):
        if j < prefix:
            return True
        ancestor = paths[j - prefix]
        return paths[i][: len(ancestor)] == ancestor  # j is i or an ancestor (the root is everyone's)

    assert np.array_equal(dense2d(spec), brute(t, prefix + t, visible))
    assert spec.position_ids.tolist() == [len(p) for p in paths]
    assert spec.parents.tolist() == [-1] + [paths.index(p[:-1]) for p in paths[1:]]
    leaves = sorted(p for p in paths[1:] if not any(q[:-1] == p for q in paths[1:]))
    assert len(spec.retrieve_indices) == len(leaves)
    for row, leaf in zip(spec.retrieve_indices, leaves):
        nodes = [paths.index(leaf[:d]) for d in range(len(leaf) + 1)]
        assert row.tolist() == nodes + [-1] * (len(row) - len(nodes))


def test_medusa_tree_errors():
    with pytest.raises(ValueError, match="parent"):
        masks.medusa_tree([[0, 1]])
    with pytest.raises(ValueError, match="twice"):
        masks.medusa_tree([[0], [0]])
    with pytest.raises(ValueError, match="non-empty path"):
        masks.medusa_tree([[]])


# ------------------------------------------------------------------------------------------- from_intervals


def flashmask_reference(se, n_q, causal):
    """FlashMask's definition, read literally, one column at a time."""
    B, H, n_k, C = se.shape
    s = n_k - n_q
    out = np.ones((B, H, n_q, n_k), bool)
    for b, h, j in itertools.product(range(B), range(H), range(n_k)):
        v = se[b, h, j]
        if C == 4:
            lts, lte, uts, ute = v
        elif C == 2 and causal:
            (lts, lte), (uts, ute) = v, (0, 0)
        elif C == 2:
            lts, lte, uts, ute = v[0], n_q, 0, v[1]
        else:
            lts, lte, uts, ute = v[0], n_q, 0, 0
        for i in range(n_q):
            masked = lts <= i < lte or uts <= i < ute or (causal and j > i + s)
            out[b, h, i, j] = not masked
    return out


@pytest.mark.parametrize("C,causal", [(1, True), (2, True), (2, False), (4, False)])
@pytest.mark.parametrize("n_q,n_k", [(17, 17), (9, 23), (23, 9)])
def test_from_intervals_semantics(C, causal, n_q, n_k):
    rng = np.random.default_rng(C * 100 + n_q)
    se = np.sort(rng.integers(0, n_q + 1, size=(2, 3, n_k, C)), axis=-1).astype(np.int32)
    if C == 2 and not causal:
        se = rng.integers(0, n_q + 1, size=(2, 3, n_k, 2)).astype(np.int32)
    spec = masks.from_intervals(se, causal=causal, n_q=n_q)
    assert np.array_equal(spec.to_dense(), flashmask_reference(se, n_q, causal))


def test_from_intervals_accepts_int64_and_broadcast_dims():
    se = np.array([[[[3], [5], [5], [4]]]], dtype=np.int64)
    spec = masks.from_intervals(se, causal=True, n_q=5)
    assert spec.shape == (1, 1, 5, 4)


@pytest.mark.parametrize("se,causal,n_q,match", [
    (np.zeros((1, 1, 4, 1), np.int32), False, None, "needs causal=True"),
    (np.zeros((1, 1, 4, 4), np.int32), True, None, "needs causal=False"),
    (np.zeros((1, 1, 4, 3), np.int32), False, None, "1, 2 or 4"),
    (np.full((1, 1, 4, 2), 5, np.int32), False, None, r"\[0, n_q=4\]"),
    (np.full((1, 1, 4, 2), -1, np.int32), False, None, r"\[0, n_q=4\]"),
    (np.array([[[[3, 1, 0, 0]] * 4]], np.int32), False, None, "ends before it starts"),
    (np.zeros((4, 2), np.int32), False, None, r"\(B, H, n_k, C\)"),
    (np.zeros((1, 1, 4, 2), np.float32), False, None, "integer"),
])
def test_from_intervals_errors(se, causal, n_q, match):
    with pytest.raises((ValueError, TypeError), match=match):
        masks.from_intervals(se, causal=causal, n_q=n_q)


# ------------------------------------------------------------------------------------------- other specs


def test_from_dense_shapes_and_errors():
    m = np.random.default_rng(0).random((6, 9)) < 0.5
    assert masks.from_dense(m).shape == (1, 1, 6, 9)
    assert masks.from_dense(m[None, None].repeat(2, 0)).shape == (2, 1, 6, 9)
    with pytest.raises(TypeError, match="boolean"):
        masks.from_dense(m.astype(np.uint8))
    with pytest.raises(ValueError, match="shape"):
        masks.from_dense(m[None])


def test_from_function_checks_the_predicate():
    with pytest.raises(TypeError, match="bool array"):
        masks.from_function(lambda i, j: i + j, 5).to_dense()


def test_stack():
    a, b = masks.causal(10), masks.sliding_window(10, left=2)
    spec = masks.stack([a, b])
    assert spec.shape == (2, 1, 10, 10)
    assert np.array_equal(spec.to_dense()[1], b.to_dense()[0])
    d = masks.stack([masks.from_dense(a.to_dense()), masks.from_dense(b.to_dense())])
    assert np.array_equal(d.to_dense(), spec.to_dense())
    with pytest.raises(ValueError, match="one shape"):
        masks.stack([masks.causal(10), masks.causal(11)])
    with pytest.raises(TypeError, match="one kind"):
        masks.stack([a, masks.from_dense(b.to_dense())])


@pytest.mark.parametrize("build,match", [
    (lambda: masks.causal(0), "n_q must be >= 1"),
    (lambda: masks.causal(4.5), "integer"),
    (lambda: masks.sliding_window(10, left=-1), "left must be >= 0"),
    (lambda: masks.sliding_window(10, left=2, sinks=11), "sinks=11 exceeds"),
    (lambda: masks.document([5, 6], n=10), "more than n=10"),
    (lambda: masks.document([5, 6], prefix=[6, 0]), "prefix.0.=6 exceeds"),
    (lambda: masks.document([5, 6], prefix=[1]), "prefix has 1"),
    (lambda: masks.shared_question([3, 4], [[1]]), "2 questions but 1"),
    (lambda: masks.interleaved([("audio", 3)]), "segments.0."),
    (lambda: masks.longformer(10, 3, global_tokens=11), "global_tokens=11 exceeds"),
])
def test_builder_errors(build, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build()


@pytest.mark.parametrize("n_q, lengths, n_k, left, sinks", [
    (4, [4, 9, 17, 6], 17, 5, 2), (4, [4, 9, 17, 6], 17, None, 0), (6, [2, 3, 30], 30, 0, 1),
    (6, [2, 3, 30], 30, 40, 0),
    (1, [1, 64, 33], 64, 7, 3), (9, [5, 9, 12], 12, 2, 20),
])
def test_kv_cache_per_sample_lengths(n_q, lengths, n_k, left, sinks):
    """Each sample equals its own sliding window over its length (queries longer than the cache included), and
    sees no slot past it."""
    spec = masks.kv_cache(n_q, lengths, n_k=n_k, left=left, sinks=sinks)
    assert spec.shape == (len(lengths), 1, n_q, n_k)
    for b, length in enumerate(lengths):
        alone = masks.sliding_window(n_q, length, left=left, sinks=min(sinks, length)).to_dense()[0, 0]
        assert np.array_equal(spec.to_dense()[b, 0, :, :length], alone)
        assert not spec.to_dense()[b, 0, :, length:].any()


def test_kv_cache_rejects_lengths_past_the_cache():
    with pytest.raises(ValueError, match="more than the cache's n_k=8"):
        masks.kv_cache(2, [3, 9], n_k=8)
