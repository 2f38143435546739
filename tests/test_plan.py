"""Plan invariants on every mask family: the plan encodes exactly the spec's mask, FULL tiles are all true,
no listed tile is all false, the backward CSR is the transpose of the forward, and every array lies in the plan's
one buffer."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import maskattn
from maskattn import masks
from maskattn._maskprep.plan import rank_levels
from maskattn.plan import FULL, PARTIAL, PLAN_ARRAYS

TILES = [(16, 16), (16, 48), (64, 32), (128, 128), (48, 80), (256, 16)]


def check_plan(spec, tile):
    plan = maskattn.compile_mask(spec, tile)
    dense = spec.to_dense()
    if spec.perm is not None:
        dense = dense[..., spec.perm, :][..., spec.perm]
    expected = np.broadcast_to(dense, plan.shape)
    assert np.array_equal(plan.to_dense(), expected), f"plan of {spec} at {tile} differs from the spec"
    flat = expected.reshape(plan.groups, *plan.shape[2:])
    tile_m, tile_n = plan.tile
    for g in range(plan.groups):
        for m in range(plan.n_mblocks):
            for n, kind, _ in plan.entries(g, m):
                block = flat[g, m * tile_m:(m + 1) * tile_m, n * tile_n:(n + 1) * tile_n]
                assert block.any(), f"listed tile ({g}, {m}, {n}) is all false"
                assert kind in (FULL, PARTIAL)
                assert (kind == FULL) == block.all(), f"tile ({g}, {m}, {n}) kind {kind} vs content"
        # every tile with a true element is listed (to_dense equality covers this, but say it plainly)
        grid = plan.block_grid(g)
        padded = np.zeros((plan.n_mblocks * tile_m, plan.n_nblocks * tile_n), bool)
        padded[: plan.shape[2], : plan.shape[3]] = flat[g]
        any_true = padded.reshape(plan.n_mblocks, tile_m, plan.n_nblocks, tile_n).any(axis=(1, 3))
        assert np.array_equal(grid > 0, any_true)
    check_transpose(plan)
    check_buffer(plan)
    return plan


def check_transpose(plan, deduplicated=True):
    for g in range(plan.groups):
        fwd = plan.block_grid(g)
        bwd = np.zeros_like(fwd)
        lo, hi = plan.col_ptr[g, 0], plan.col_ptr[g, -1]
        cols = np.repeat(np.arange(plan.n_nblocks), np.diff(plan.col_ptr[g]))
        bwd[plan.row_idx[lo:hi], cols] = plan.bwd_kind[lo:hi]
        assert np.array_equal(fwd, bwd), "backward CSR is not the transpose of the forward"
        for n in range(plan.n_nblocks):
            rows = plan.row_idx[plan.col_ptr[g, n]:plan.col_ptr[g, n + 1]]
            assert np.all(np.diff(rows) > 0), "backward rows must ascend"
        for m in range(plan.n_mblocks):
            cols = plan.col_idx[plan.row_ptr[g, m]:plan.row_ptr[g, m + 1]]
            assert np.all(np.diff(cols) > 0), "forward columns must ascend"
    if plan.payload_idx is not None:
        # the same tile in both directions points at the same bits
        for g in range(plan.groups):
            for n in range(plan.n_nblocks):
                for e in range(plan.col_ptr[g, n], plan.col_ptr[g, n + 1]):
                    m = plan.row_idx[e]
                    lo, hi = plan.row_ptr[g, m], plan.row_ptr[g, m + 1]
                    f = lo + np.searchsorted(plan.col_idx[lo:hi], n)
                    assert plan.bwd_payload_idx[e] == plan.payload_idx[f]
        pool = plan.bit_pool
        assert not deduplicated or len({row.tobytes() for row in pool}) == pool.shape[0], "bit pool holds duplicates"


def check_buffer(plan):
    for name in PLAN_ARRAYS:
        a = getattr(plan, name)
        assert (a is None) == (name not in plan.layout), name
        if a is not None:
            offset, shape, dtype = plan.layout[name]
            assert (a.shape, a.dtype) == (shape, dtype), name
            assert offset % 16 == 0 and a.ctypes.data == plan.buffer.ctypes.data + offset, name
            assert not a.flags.writeable, name
    spans = sorted((offset, offset + int(np.prod(shape)) * dtype.itemsize)
                   for offset, shape, dtype in plan.layout.values())
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), "arrays overlap in the buffer"
    assert spans[-1][1] <= plan.buffer.nbytes
    # the kernels' work orders: numpy's stable argsort of descending row lengths, in each group
    for order, ptr in ((plan.m_order, plan.row_ptr), (plan.n_order, plan.col_ptr)):
        expected = np.argsort(-np.diff(ptr, axis=1), axis=1, kind="stable").astype(np.int32)
        assert order.dtype == np.int32 and np.array_equal(order, expected)
        check_levels(ptr, order)


def check_levels(ptr, order):
    """rank_levels: the maximal runs of ranks whose rows lie in one band of lengths in every group (band b: lengths l
    with l * 2^(b+1) >= the group's longest > l * 2^b; empty rows last), each rank given its run."""
    levels = rank_levels(ptr, order)
    rows = order.shape[1]
    assert levels.dtype == np.int32 and levels.shape == (rows, 2)
    lengths = np.take_along_axis(np.diff(ptr, axis=1), order, axis=1)  # (G, rows), by rank
    longest = lengths.max(axis=1, keepdims=True, initial=0)
    with np.errstate(divide="ignore"):
        bands = np.where(lengths > 0, np.ceil(np.log2(longest / np.maximum(lengths, 1))) - 1, np.inf).clip(0)
    ends = [0] + [r for r in range(1, rows) if np.any(bands[:, r] != bands[:, r - 1])] + [rows]
    expected = np.zeros((rows, 2), np.int32)
    for first, end in zip(ends, ends[1:]):
        expected[first:end] = first, end
    assert np.array_equal(levels, expected)


def test_rank_levels_of_uniform_and_mixed_groups():
    # two groups: rows of one length in both (one run), then lengths that share a band (within 2x of the longest, then
    # within 2x of half of it) in one group only
    ptr = np.cumsum([[0, 8, 8, 5, 4, 3, 1], [0, 9, 9, 9, 4, 4, 4]], axis=1)
    order = np.tile(np.arange(6, dtype=np.int32), (2, 1))
    assert rank_levels(ptr[:1], order[:1]).tolist() == [[0, 4]] * 4 + [[4, 5]] + [[5, 6]]
    assert rank_levels(ptr[1:], order[1:]).tolist() == [[0, 3]] * 3 + [[3, 6]] * 3
    assert rank_levels(ptr, order).tolist() == [[0, 3]] * 3 + [[3, 4]] + [[4, 5]] + [[5, 6]]
    # causal's rows: bands of 128..64, 63..32, 31..16, ... entries; empty rows last, in one run
    causal = np.concatenate([[0], np.cumsum(np.arange(128, -1, -1))])[None]
    runs = np.unique(rank_levels(causal, np.arange(129, dtype=np.int32)[None]), axis=0)
    assert (runs[:, 1] - runs[:, 0]).tolist() == [65, 32, 16, 8, 4, 2, 1, 1]
    with pytest.raises(ValueError, match="does not fit an order"):
        rank_levels(ptr[:, :-1], order)


BUILDERS = {
    "full": lambda: masks.full(77, 131),
    "causal": lambda: masks.causal(300),
    "causal_nq_lt_nk": lambda: masks.causal(77, 333),
    "causal_nq_gt_nk": lambda: masks.causal(333, 77),
    "sliding": lambda: masks.sliding_window(301, left=37, right=5, sinks=9),
    "sliding_kv": lambda: masks.sliding_window(50, 301, left=64, sinks=4),
    "document": lambda: masks.document([100, 17, 64, 40], prefix=[10, 0, 64, 3], n=250),
    "document_bidir": lambda: masks.document([33, 70], causal=False, n=111),
    "document_batch": lambda: masks.document([[50, 50, 27], [127], [3, 100]], prefix=[[0, 5, 1], [20], [3, 0]]),
    "shared_question": lambda: masks.shared_question([40, 13], [[20, 30, 25], [7, 7]], n=160),
    "interleaved": lambda: masks.interleaved([("text", 30), ("image", 64), ("text", 7), ("image", 33), ("text", 50)]),
    "longformer": lambda: masks.longformer(300, 40, global_tokens=17),
    "longformer_dilated": lambda: masks.longformer(300, 40, global_tokens=5, dilation=3),
    "bigbird": lambda: masks.bigbird(300, 24, window_blocks=3, global_blocks=2, random_blocks=2, seed=3),
    "kv_cache": lambda: masks.kv_cache(70, [40, 300, 7, 301], n_k=301, left=64, sinks=4),
    "medusa": lambda: masks.medusa_tree([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]], prefix_len=100),
    "dense_batch_heads": lambda: masks.from_dense(np.random.default_rng(0).random((2, 3, 70, 90)) < 0.3),
    "function": lambda: masks.from_function(lambda i, j: (i * 7 + j * 3) % 5 == 0, 100, 130),
    "function_perm": lambda: masks.FunctionMask(lambda p, r: (p * 7 + r * 3) % 5 == 0, 100, 100,
                                                perm=np.random.default_rng(1).permutation(100)),
}


@pytest.mark.parametrize("tile", TILES, ids=str)
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_builder_plans(name, tile):
    check_plan(BUILDERS[name](), tile)


@st.composite
def interval_specs(draw):
    n_q = draw(st.integers(1, 200))
    n_k = draw(st.integers(1, 200))
    B = draw(st.sampled_from([1, 2]))
    H = draw(st.sampled_from([1, 3]))
    C = draw(st.sampled_from([1, 2, 4]))
    causal = C == 1 or (C == 2 and draw(st.booleans()))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    se = np.sort(rng.integers(0, n_q + 1, size=(B, H, n_k, C)), axis=-1)
    if C == 2 and not causal:
        se = rng.integers(0, n_q + 1, size=(B, H, n_k, 2))  # (LTS, UTE): any values
    return masks.from_intervals(se.astype(np.int32), causal=causal, n_q=n_q)


@st.composite
def dense_specs(draw):
    n_q = draw(st.integers(1, 150))
    n_k = draw(st.integers(1, 150))
    B = draw(st.sampled_from([1, 2]))
    H = draw(st.sampled_from([1, 2]))
    density = draw(st.sampled_from([0.0, 0.02, 0.5, 0.97, 1.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    mask = rng.random((B, H, n_q, n_k)) < density
    if draw(st.booleans()):  # blocky structure, so FULL tiles and duplicate PARTIAL tiles appear
        mask = np.repeat(np.repeat(mask[..., ::8, ::8], 8, axis=-2), 8, axis=-1)[..., :n_q, :n_k]
        mask = np.ascontiguousarray(np.broadcast_to(mask, (B, H, n_q, n_k)))
    return masks.from_dense(mask)


tiles = st.tuples(st.sampled_from([16, 32, 48, 64, 128]), st.sampled_from([16, 32, 80, 128, 256]))
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(interval_specs(), tiles)
def test_random_interval_plans(spec, tile):
    check_plan(spec, tile)


@FAST
@given(dense_specs(), tiles)
def test_random_dense_plans(spec, tile):
    check_plan(spec, tile)


@pytest.mark.parametrize("seed", range(5))
def test_work_orders_on_random_plans(seed):
    """Many groups, long rows and many equal lengths: the compiler's counting sort against numpy's argsort."""
    rng = np.random.default_rng(seed)
    mask = rng.random((2, 3, 700, 900)) < rng.uniform(0.001, 0.02)
    check_buffer(maskattn.compile_mask(masks.from_dense(mask), (16, 16)))
    lengths = rng.integers(1, 60, size=(2, 20)).tolist()
    check_buffer(maskattn.compile_mask(masks.document(lengths, n=1200), (16, 32)))


def test_dense_and_interval_paths_agree():
    spec = masks.document([100, 17, 64, 40], prefix=[10, 0, 64, 3], n=250)
    dense = masks.from_dense(spec.to_dense())
    a, b = maskattn.compile_mask(spec, (32, 32)), maskattn.compile_mask(dense, (32, 32))
    for name in ("row_ptr", "col_idx", "kind", "col_ptr", "row_idx", "bwd_kind"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_threads_do_not_change_the_plan():
    mask = np.random.default_rng(1).random((1, 2, 500, 300)) < 0.01
    one = maskattn.compile_mask(masks.from_dense(mask), (32, 64), threads=1)
    many = maskattn.compile_mask(masks.from_dense(mask), (32, 64), threads=4)
    assert one.equals(many)


def test_sparse_path_matches_dense_path():
    import scipy.sparse as sp

    adj = sp.random(300, 300, density=0.02, random_state=3, format="csr") != 0
    spec = masks.from_graph(adj, reorder=None)
    dense = masks.from_dense(adj.toarray())
    assert maskattn.compile_mask(spec, (32, 48)).equals(maskattn.compile_mask(dense, (32, 48)))


def test_plans_are_cached_per_tile():
    spec = masks.causal(100)
    assert maskattn.compile_mask(spec, (32, 32)) is maskattn.compile_mask(spec, (32, 32))
    assert maskattn.compile_mask(spec, (32, 32)) is not maskattn.compile_mask(spec, (64, 32))


def test_stats_and_repr():
    plan = maskattn.compile_mask(masks.causal(256), (64, 64))
    s = plan.stats(head_dim=64)
    assert (s["active_blocks"], s["full_blocks"], s["partial_blocks"], s["total_blocks"]) == (10, 6, 4, 16)
    assert s["density"] == pytest.approx(256 * 257 / 2 / 256**2)
    assert s["computed_pairs"] == 10 * 64 * 64
    assert s["fwd_flops"] == 4 * 64 * 10 * 64 * 64
    assert repr(plan).splitlines()[1:] == ["P . . .", "F P . .", "F F P .", "F F F P"]
    dense = maskattn.compile_mask(masks.from_dense(np.tril(np.ones((256, 256), bool))), (64, 64))
    assert dense.stats(head_dim=64) == {**s, "bit_tiles": 1}


def test_large_interval_plan_uses_int64_offsets():
    n = 1 << 20
    spec = masks.sliding_window(n, left=1024, sinks=64)
    plan = maskattn.compile_mask(spec, (128, 128))
    assert plan.row_ptr.dtype == np.int64 and plan.row_ptr[0, -1] == plan.nnz
    m = plan.n_mblocks - 1
    cols = [n for n, _, _ in plan.entries(0, m)]
    assert cols[0] == 0 and cols[-9:] == list(range(plan.n_nblocks - 9, plan.n_nblocks))


@pytest.mark.parametrize("tile", [(8, 16), (16, 300), (24, 16), (16, "a")])
def test_bad_tiles(tile):
    with pytest.raises((ValueError, TypeError), match="tile"):
        maskattn.compile_mask(masks.causal(64), tile)


def test_compile_mask_rejects_non_specs():
    with pytest.raises(TypeError, match="mask spec"):
        maskattn.compile_mask(np.ones((4, 4), bool))
    plan = maskattn.compile_mask(masks.causal(64))
    with pytest.raises(TypeError, match="already a compiled"):
        maskattn.compile_mask(plan)
