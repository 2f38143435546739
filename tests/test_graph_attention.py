"""Attention through a reordered graph mask equals attention with the unpermuted dense mask: the API gathers
q, k, v in the plan's node order and scatters outputs and gradients back (reference backend, float64)."""

import numpy as np
import pytest
import scipy.sparse as sp

import maskattn
from maskattn import masks, testing


def qkv(shape_q, shape_kv, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape_q), rng.standard_normal(shape_kv), rng.standard_normal(shape_kv)


def forward_and_backward(q, k, v, do, mask, **kw):
    out, lse = maskattn.attention(q, k, v, mask, return_lse=True, **kw)
    return (out, lse) + maskattn.attention_backward(do, q, k, v, out, lse, mask, **kw)


def assert_same(got, expected):
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("family", list(testing.FAMILIES))
@pytest.mark.parametrize("reorder", ["rcm", "auto"])
def test_reordered_graph_attention_equals_the_dense_mask(family, reorder):
    adj = testing.FAMILIES[family](700, 1)
    n = adj.shape[0]
    spec = masks.from_graph(adj, reorder=reorder)
    if reorder == "rcm":
        assert spec.perm is not None and not np.array_equal(spec.perm, np.arange(n))
    q, k, v = qkv((2, 4, n, 16), (2, 2, n, 16), seed=n)  # GQA: 4 query heads on 2 KV heads
    do = np.random.default_rng(1).standard_normal(q.shape)
    dense = masks.from_dense(adj.toarray())
    assert_same(forward_and_backward(q, k, v, do, spec), forward_and_backward(q, k, v, do, dense))


def test_directed_graph_without_self_loops_in_bnhd_layout():
    # rows of nodes without out-edges see nothing: out 0, lse -inf, and their gradients 0, wherever they go
    n = 500
    rng = np.random.default_rng(2)
    rows, cols = rng.integers(0, n, (2, 3 * n))
    keep = rows % 7 != 0
    adj = sp.csr_array((np.ones(keep.sum(), bool), (rows[keep], cols[keep])), shape=(n, n))
    q, k, v = qkv((1, n, 2, 32), (1, n, 2, 32), seed=3)
    do = rng.standard_normal(q.shape)
    got = forward_and_backward(q, k, v, do, masks.from_graph(adj, reorder="rcm"), layout="bnhd")
    expected = forward_and_backward(q, k, v, do, masks.from_dense(adj.toarray()), layout="bnhd")
    assert np.isneginf(got[1][:, :, ::7]).all()
    assert_same(got, expected)


def test_graph_attention_against_naive_softmax():
    adj = testing.molecules(300, seed=4)
    q, k, v = qkv((1, 1, 300, 8), (1, 1, 300, 8), seed=5)
    out = maskattn.attention(q, k, v, masks.from_graph(adj))
    scores = np.where(adj.toarray(), q[0, 0] @ k[0, 0].T / np.sqrt(8), -np.inf)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out[0, 0], weights / weights.sum(axis=1, keepdims=True) @ v[0, 0], rtol=1e-12)
