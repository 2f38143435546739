"""Node orderings of graph masks (maskprep.rcm, maskattn.masks.reorder): every order is a permutation on every
graph, the reordered plan is the permuted adjacency, and on the test corpus reorder="auto" leaves no more
active 128 x 128 tiles than scipy's reverse_cuthill_mckee (the yardstick of DESIGN.md), and fewer on average."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import connected_components
from scipy.sparse.csgraph import reverse_cuthill_mckee as scipy_rcm

import maskattn
from maskattn import masks, testing
from maskattn._maskprep import rcm
from maskattn.masks.reorder import TILE, active_tiles, node_order, reverse_cuthill_mckee

SIZES = (1000, 5000, 20000)
CORPUS = {(family, n): adj for family, n, adj in testing.corpus(SIZES, seed=0)}


def assert_permutation(perm, n):
    assert perm.dtype == np.int64 and perm.shape == (n,)
    assert np.array_equal(np.sort(perm), np.arange(n))


def assert_components_contiguous(adj, perm):
    """Each connected component of A + A^T occupies one run of positions."""
    _, label = connected_components(adj, directed=True, connection="weak")
    runs = np.flatnonzero(np.diff(label[perm])) if perm.size else []
    assert len(runs) + 1 == np.unique(label).size


def numpy_tiles(adj, perm, tile=TILE):
    position = np.empty_like(perm)
    position[perm] = np.arange(perm.size)
    coo = sp.coo_array(adj)
    blocks = position[coo.row] // tile * (perm.size // tile + 1) + position[coo.col] // tile
    return np.unique(blocks).size


def scrambled(adj):
    """The same graph as a non-canonical CSR: rows reversed, each row's first entry twice, an explicit zero."""
    rows = [adj.indices[a:b][::-1] for a, b in zip(adj.indptr[:-1], adj.indptr[1:])]
    rows = [np.r_[r, r[:1]] for r in rows]
    stranger = np.setdiff1d(np.arange(adj.shape[0]), rows[0])[0]
    rows[0] = np.r_[rows[0], stranger]
    data = np.ones(sum(r.size for r in rows), bool)
    data[rows[0].size - 1] = False
    indptr = np.r_[0, np.cumsum([r.size for r in rows])]
    return sp.csr_array((data, np.concatenate(rows), indptr), shape=adj.shape)


def random_graph(n, edges, seed, directed=False):
    rng = np.random.default_rng(seed)
    rows, cols = rng.integers(0, n, (2, edges))
    adj = sp.csr_array((np.ones(edges, bool), (rows, cols)), shape=(n, n))
    return adj if directed else (adj + adj.T).tocsr()


# ------------------------------------------------------------------------------------------------- the corpus


@pytest.mark.parametrize("family,n", list(CORPUS), ids=[f"{f}-{n}" for f, n in CORPUS])
def test_corpus_orders_are_permutations_and_auto_is_no_worse_than_scipy(family, n):
    adj = CORPUS[family, n]
    plain, auto = node_order(adj, "rcm"), node_order(adj, "auto")
    assert_permutation(plain, adj.shape[0])
    assert_permutation(auto, adj.shape[0])
    assert_components_contiguous(adj, plain)
    assert active_tiles(adj, auto) <= active_tiles(adj, scipy_rcm(adj))


def test_auto_leaves_at_least_five_percent_fewer_tiles_than_scipy_on_average():
    ratios = {key: active_tiles(adj, node_order(adj, "auto")) / active_tiles(adj, scipy_rcm(adj))
              for key, adj in CORPUS.items()}
    assert np.mean(list(ratios.values())) <= 0.95, ratios


def test_batches_of_molecules_fill_one_tile_per_row_block():
    for n in SIZES:
        adj = CORPUS["molecules", n]
        assert active_tiles(adj, node_order(adj, "auto")) == -(-adj.shape[0] // TILE)


def test_generators_shuffle_symmetric_graphs_with_self_loops():
    for (family, n), adj in CORPUS.items():
        assert abs(adj.shape[0] - n) <= n // 50, family
        assert (adj != adj.T).nnz == 0 and adj.diagonal().all(), family
    blocks = -(-5000 // TILE)
    assert active_tiles(CORPUS["geometric_2d", 5000]) > 0.9 * blocks * blocks


# ------------------------------------------------------------------------------------------- end to end, plans


@pytest.mark.parametrize("family", list(testing.FAMILIES))
@pytest.mark.parametrize("reorder", [None, "rcm", "auto"])
def test_reordered_plan_is_the_permuted_adjacency(family, reorder):
    adj = testing.FAMILIES[family](1500, 3)
    spec = masks.from_graph(adj, reorder=reorder)
    perm = np.arange(adj.shape[0]) if spec.perm is None else spec.perm
    plan = maskattn.compile_mask(spec, (TILE, TILE))
    assert plan.perm is spec.perm
    assert np.array_equal(plan.to_dense()[0, 0], adj.toarray()[perm][:, perm])
    assert plan.stats()["active_blocks"] == active_tiles(adj, perm) == numpy_tiles(adj, perm)


def test_auto_keeps_a_given_order_that_is_already_best():
    # a banded graph in its natural order: no reordering leaves fewer tiles
    band = sp.diags_array([np.ones(4000 - abs(k)) for k in range(-3, 4)], offsets=list(range(-3, 4))).tocsr()
    assert np.array_equal(node_order(band, "auto"), np.arange(4000))


# ------------------------------------------------------------------------------------------ any graph at all


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 400), density=st.floats(0, 3), seed=st.integers(0, 2**32 - 1),
       directed=st.booleans(), tile=st.sampled_from([1, 7, 16, 128, 256]))
def test_every_order_is_a_permutation_and_plain_rcm_keeps_components_together(n, density, seed, directed, tile):
    adj = random_graph(n, int(density * n), seed, directed)
    for perm in (reverse_cuthill_mckee(adj), reverse_cuthill_mckee(adj, tile=tile), node_order(adj, "auto")):
        assert_permutation(perm, n)
    assert_components_contiguous(adj, reverse_cuthill_mckee(adj))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**32 - 1))
def test_a_wrong_promise_of_symmetry_still_gives_permutations(n, seed):
    adj = random_graph(n, 2 * n, seed, directed=True)
    for tile in (0, 16, 128):
        assert_permutation(rcm.reverse_cuthill_mckee(adj.indptr, adj.indices, symmetric=True, tile=tile), n)


@pytest.mark.parametrize("tile", [0, 128])
def test_int32_and_int64_indices_and_every_input_format_give_one_order(tile):
    adj = CORPUS["geometric_3d", 5000]
    expected = rcm.reverse_cuthill_mckee(adj.indptr, adj.indices, tile=tile)
    wide = rcm.reverse_cuthill_mckee(adj.indptr.astype(np.int64), adj.indices.astype(np.int64), tile=tile)
    assert np.array_equal(wide, expected)
    given_tile = None if tile == 0 else tile
    for form in (adj.tocoo(), adj.tocsc(), sp.csr_matrix(adj), adj.tolil(), adj.toarray()):
        assert np.array_equal(reverse_cuthill_mckee(form, tile=given_tile), expected), type(form)
    # explicit zeros are not edges; unsorted rows and duplicate entries change nothing
    assert np.array_equal(reverse_cuthill_mckee(scrambled(adj), tile=given_tile), expected)


def test_symmetric_flag_skips_only_the_transpose():
    adj = CORPUS["sbm", 5000]
    for tile in (0, 128):
        assert np.array_equal(rcm.reverse_cuthill_mckee(adj.indptr, adj.indices, symmetric=True, tile=tile),
                              rcm.reverse_cuthill_mckee(adj.indptr, adj.indices, tile=tile))


@pytest.mark.parametrize("tile", [0, 128])
def test_threads_change_nothing(tile):
    directed = sp.triu(CORPUS["geometric_2d", 20000], format="csr")
    one = rcm.reverse_cuthill_mckee(directed.indptr, directed.indices, tile=tile)
    for threads in (2, 3, 8):
        assert np.array_equal(rcm.reverse_cuthill_mckee(directed.indptr, directed.indices, tile=tile,
                                                        threads=threads), one)
    assert np.array_equal(one, reverse_cuthill_mckee(CORPUS["geometric_2d", 20000], tile=tile or None))


def test_plain_rcm_of_a_shuffled_path_is_the_path():
    n = 1000
    label = np.random.default_rng(0).permutation(n)
    path = sp.csr_array((np.ones(n - 1, bool), (label[:-1], label[1:])), shape=(n, n))
    perm = reverse_cuthill_mckee(path)
    position = np.empty(n, np.int64)
    position[perm] = np.arange(n)
    assert np.abs(position[label[:-1]] - position[label[1:]]).max() == 1


def test_isolated_nodes_and_tiny_graphs():
    for n in (1, 2, 129, 5000):
        eye = sp.eye_array(n, format="csr", dtype=bool)
        for tile in (None, 16, 128):
            assert_permutation(reverse_cuthill_mckee(eye, tile=tile), n)
    empty = rcm.reverse_cuthill_mckee(np.zeros(1, np.int64), np.zeros(0, np.int32))
    assert empty.shape == (0,)


def test_many_small_components_pack_into_tiles():
    # 40000 pairs and 10000 triangles: every tile can be filled exactly
    pairs = sp.kron(sp.eye_array(40000), np.ones((2, 2)))
    triangles = sp.kron(sp.eye_array(10000), np.ones((3, 3)))
    adj = sp.block_diag([pairs, triangles], format="csr").astype(bool)
    label = np.random.default_rng(1).permutation(adj.shape[0])
    adj = adj[label][:, label]
    perm = node_order(adj, "auto")
    assert_permutation(perm, adj.shape[0])
    assert active_tiles(adj, perm) == -(-adj.shape[0] // TILE)


def test_active_tiles_counts_as_numpy_and_the_plan_do():
    rng = np.random.default_rng(2)
    for n in (1, 100, 1000):
        adj = random_graph(n, 3 * n, seed=n, directed=True)
        perm = rng.permutation(n)
        for tile in (16, 128):
            assert rcm.active_tiles(adj.indptr, adj.indices, perm, tile) == numpy_tiles(adj, perm, tile)


# ---------------------------------------------------------------------------------------------------- errors


def test_errors_name_the_value():
    adj = CORPUS["grid_2d", 1000]
    with pytest.raises(ValueError, match="reorder must be 'auto', 'rcm' or None; got 'metis'"):
        masks.from_graph(adj, reorder="metis")
    with pytest.raises(ValueError, match=r"must be square; got shape \(3, 4\)"):
        node_order(sp.csr_array((3, 4), dtype=bool), "auto")
    with pytest.raises(ValueError, match="tile size from 1 to 256; got 512"):
        rcm.reverse_cuthill_mckee(adj.indptr, adj.indices, tile=512)
    with pytest.raises(ValueError, match="threads must be at least 1; got 0"):
        rcm.reverse_cuthill_mckee(adj.indptr, adj.indices, threads=0)
    with pytest.raises(ValueError, match=r"indices must lie in \[0, n=3\); got \[0, 7\]"):
        rcm.reverse_cuthill_mckee(np.array([0, 1, 2, 2]), np.array([7, 0]))
    with pytest.raises(ValueError, match="indptr must start at 0"):
        rcm.reverse_cuthill_mckee(np.array([0, 2, 1]), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"perm must be a permutation of range\(2\)"):
        rcm.active_tiles(np.array([0, 1, 2]), np.array([1, 0]), np.array([0, 0]))
    with pytest.raises(ValueError, match="tile must be positive; got 0"):
        rcm.active_tiles(np.array([0, 1, 2]), np.array([1, 0]), np.array([0, 1]), tile=0)
