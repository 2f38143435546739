"""The NumPy reference backend against a naive dense float64 softmax, and its backward against finite
differences."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import maskattn
from maskattn import masks
from maskattn.backends import reference

# numpy reports NaN, overflow and log(0) as RuntimeWarnings: the reference must raise none of them
pytestmark = pytest.mark.filterwarnings("error")

TILES = [(16, 32), (64, 48), (32, 16), (16, 16)]


def dense_attention(q, k, v, mask, scale, do):
    """Naive float64 attention over a dense mask (B or 1, H or 1, n_q, n_k): out, lse, dq, dk, dv."""
    q, k, v, do = (x.astype(np.float64) for x in (q, k, v, do))
    rep = q.shape[1] // k.shape[1]
    kh, vh = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    mask = np.broadcast_to(mask, q.shape[:2] + mask.shape[2:])
    s = np.where(mask, scale * q @ kh.swapaxes(-1, -2), -np.inf)
    seen = mask.any(axis=-1)
    row_max = np.where(seen, s.max(axis=-1), 0)
    e = np.exp(s - row_max[..., None])
    total = e.sum(axis=-1)
    p = e / np.where(seen, total, 1)[..., None]
    lse = np.where(seen, row_max + np.log(np.where(seen, total, 1)), -np.inf)
    out = p @ vh
    ds = p * (do @ vh.swapaxes(-1, -2) - (do * out).sum(axis=-1, keepdims=True))
    dq = scale * ds @ kh
    dk = scale * ds.swapaxes(-1, -2) @ q
    dv = p.swapaxes(-1, -2) @ do
    # the query heads of one KV head add their gradients
    dk, dv = (x.reshape(k.shape[:2] + (rep,) + x.shape[2:]).sum(axis=2) for x in (dk, dv))
    return out, lse, dq, dk, dv


def inputs(rng, B, H, Hk, n_q, n_k, D, dtype=np.float64):
    q = rng.standard_normal((B, H, n_q, D))
    k = rng.standard_normal((B, Hk, n_k, D))
    v = rng.standard_normal((B, Hk, n_k, D))
    do = rng.standard_normal((B, H, n_q, D))
    return tuple(x.astype(dtype) for x in (q, k, v, do))


def check(spec, tile, *, B=1, H=1, Hk=1, D=8, seed=0, tol=1e-10):
    """Reference forward and backward of ``spec`` compiled for ``tile`` against :func:`dense_attention`."""
    rng = np.random.default_rng(seed)
    B = max(B, spec.shape[0])
    H = max(H, spec.shape[1])
    q, k, v, do = inputs(rng, B, H, Hk, spec.n_q, spec.n_k, D)
    scale = float(rng.uniform(0.2, 1.5))
    plan = maskattn.compile_mask(spec, tile)
    out, lse = reference.forward(q, k, v, plan, scale)
    grads = reference.backward(do, q, k, v, out, lse, plan, scale)
    want = dense_attention(q, k, v, spec.to_dense(), scale, do)
    for name, got, exp in zip(("out", "lse", "dq", "dk", "dv"), (out, lse, *grads), want):
        assert got.dtype == np.float64 and got.shape == exp.shape, name
        np.testing.assert_allclose(got, exp, rtol=tol, atol=tol, err_msg=name)
    return out, lse, grads


# ------------------------------------------------------------------------------------------------ mask families


@st.composite
def dense_masks(draw):
    """Random dense masks with forced empty rows and columns, sometimes per batch and head."""
    n_q, n_k = draw(st.integers(1, 80)), draw(st.integers(1, 80))
    B, H = draw(st.sampled_from([(1, 1), (1, 4), (2, 1), (2, 4)]))
    density = draw(st.sampled_from([0.0, 0.05, 0.3, 0.8, 1.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mask = rng.random((B, H, n_q, n_k)) < density
    mask[..., rng.random(n_q) < 0.15, :] = False
    mask[..., rng.random(n_k) < 0.15] = False
    return masks.from_dense(mask)


@settings(max_examples=100, deadline=None)
@given(spec=dense_masks(), tile=st.sampled_from(TILES), Hk=st.sampled_from([1, 2, 4]))
def test_dense_masks(spec, tile, Hk):
    check(spec, tile, H=4, Hk=Hk)


def random_startend(rng, B, H, n_q, n_k, C):
    """FlashMask startend_row_indices (B, H, n_k, C) with every interval ordered (start <= end)."""
    pairs = np.sort(rng.integers(0, n_q + 1, (B, H, n_k, C + C % 2)), axis=-1)
    return pairs[..., :C].astype(np.int32)


@pytest.mark.parametrize("C, causal", [(1, True), (2, True), (2, False), (4, False)])
@pytest.mark.parametrize("n_q, n_k, tile", [(77, 131, (16, 32)), (131, 77, (64, 48)), (96, 96, (32, 16))])
def test_interval_masks(C, causal, n_q, n_k, tile):
    rng = np.random.default_rng(C * 7 + causal)
    spec = masks.from_intervals(random_startend(rng, 1, 4, n_q, n_k, C), causal, n_q=n_q)
    check(spec, tile, H=4, Hk=2, seed=C)


BUILDERS = {
    "causal": lambda: masks.causal(77, 131),
    "causal_tall": lambda: masks.causal(131, 77),
    "window_sinks": lambda: masks.sliding_window(131, left=20, sinks=3),
    "document_padded": lambda: masks.document([30, 20, 17], n=77),
    "document_prefix": lambda: masks.document([40, 50, 41], prefix=[10, 0, 41]),
    "document_batch": lambda: masks.document([[30, 47], [10, 20, 30]], n=80),
    "longformer_dilated": lambda: masks.longformer(131, 20, global_tokens=3, dilation=2),
    "function_perm": lambda: masks.FunctionMask(lambda p, r: (p * 7 + r * 3) % 5 < 2, 131, 131,
                                                perm=np.random.default_rng(1).permutation(131)),
    "bigbird": lambda: masks.bigbird(131, 16, window_blocks=3, global_blocks=1, random_blocks=2, seed=1),
    "medusa": lambda: masks.medusa_tree([[0], [1], [0, 0], [0, 1], [1, 0]], prefix_len=70),
}


@pytest.mark.parametrize("tile", [(16, 32), (64, 48)])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_builders(name, tile):
    spec = BUILDERS[name]()
    check(spec, tile, B=2, H=4, Hk=1 if name.startswith("document") else 2)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 90), window=st.integers(0, 100), g=st.integers(0, 90), d=st.integers(1, 12),
       tile=st.sampled_from(TILES))
def test_longformer_through_the_api(n, window, g, d, tile):
    """maskattn.attention and attention_backward on NumPy inputs with a (dilated) Longformer, whose plan is in
    residue order with a perm, against dense float64 softmax over the mask in the caller's order."""
    g = min(g, n)
    spec = masks.longformer(n, window, global_tokens=g, dilation=d)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    dense = ((np.abs(i - j) <= window) & ((i - j) % d == 0)) | (i < g) | (j < g)
    q, k, v, do = inputs(np.random.default_rng(n * window + d), 1, 4, 2, n, n, 8)
    plan = maskattn.compile_mask(spec, tile)
    out, lse = maskattn.attention(q, k, v, plan, scale=0.5, return_lse=True)
    grads = maskattn.attention_backward(do, q, k, v, out, lse, plan, scale=0.5)
    for name, got, exp in zip(("out", "lse", "dq", "dk", "dv"), (out, lse, *grads),
                              dense_attention(q, k, v, dense[None, None], 0.5, do)):
        np.testing.assert_allclose(got, exp, rtol=1e-10, atol=1e-10, err_msg=name)


def test_head_dependent_dense_mask():
    rng = np.random.default_rng(5)
    mask = rng.random((2, 4, 77, 131)) < 0.2
    mask[1, 2] = False  # a whole (batch, head) with nothing visible
    check(masks.from_dense(mask), (16, 32), Hk=2)


# ------------------------------------------------------------------------------------------------ edge cases


def test_fully_masked_rows_and_columns():
    mask = np.tril(np.ones((40, 50), bool), k=10)
    mask[5:21] = False  # a whole query block of (16, 16) tiles, and rows inside partial blocks
    mask[:, 30:] = False
    out, lse, (dq, dk, dv) = check(masks.from_dense(mask), (16, 16), H=2, Hk=1)
    assert np.all(out[:, :, 5:21] == 0) and np.all(lse[:, :, 5:21] == -np.inf)
    assert np.all(dq[:, :, 5:21] == 0)
    assert np.all(dk[:, :, 30:] == 0) and np.all(dv[:, :, 30:] == 0)
    assert np.isfinite(lse[:, :, :5]).all() and np.isfinite(lse[:, :, 21:]).all()


def test_empty_plan():
    rng = np.random.default_rng(2)
    q, k, v, do = inputs(rng, 1, 2, 2, 20, 30, 4)
    plan = maskattn.compile_mask(masks.from_dense(np.zeros((20, 30), bool)), (16, 16))
    out, lse = reference.forward(q, k, v, plan, 0.5)
    grads = reference.backward(do, q, k, v, out, lse, plan, 0.5)
    assert np.all(out == 0) and np.all(lse == -np.inf)
    assert all(np.all(g == 0) for g in grads)


def test_strided_views():
    """bnhd inputs arrive as transposed views; results equal those of contiguous copies."""
    rng = np.random.default_rng(3)
    q, do = (rng.standard_normal((2, 37, 4, 8)).swapaxes(1, 2) for _ in range(2))  # (B, n, H, D) -> (B, H, n, D)
    k, v = (rng.standard_normal((2, 60, 2, 8)).swapaxes(1, 2) for _ in range(2))
    assert not q.flags.c_contiguous
    plan = maskattn.compile_mask(masks.causal(37, 60), (16, 32))
    out, lse = reference.forward(q, k, v, plan, 0.3)
    grads = reference.backward(do, q, k, v, out, lse, plan, 0.3)
    contiguous = [np.ascontiguousarray(x) for x in (q, k, v, do)]
    out_c, lse_c = reference.forward(*contiguous[:3], plan, 0.3)
    grads_c = reference.backward(contiguous[3], *contiguous[:3], out_c, lse_c, plan, 0.3)
    for got, want in zip((out, lse, *grads), (out_c, lse_c, *grads_c)):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def test_backward_matches_finite_differences():
    rng = np.random.default_rng(4)
    mask = rng.random((1, 2, 5, 7)) < 0.6
    mask[0, :, 1] = False  # a row that sees nothing
    mask[0, 0, 3, 2] = True
    plan = maskattn.compile_mask(masks.from_dense(mask), (16, 16))
    q, k, v, w = inputs(rng, 1, 2, 1, 5, 7, 3)
    scale = 0.7

    def loss(q, k, v):
        return float(np.sum(reference.forward(q, k, v, plan, scale)[0] * w))

    out, lse = reference.forward(q, k, v, plan, scale)
    grads = reference.backward(w, q, k, v, out, lse, plan, scale)
    eps = 1e-6
    for which, grad in enumerate(grads):
        numeric = np.zeros_like(grad)
        for idx in np.ndindex(grad.shape):
            args = [q.copy(), k.copy(), v.copy()]
            args[which][idx] += eps
            up = loss(*args)
            args[which][idx] -= 2 * eps
            numeric[idx] = (up - loss(*args)) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8, err_msg="qkv"[which])


@pytest.mark.parametrize("spec", [masks.causal(77, 131), masks.longformer(100, 10, dilation=3)], ids=["causal", "lf"])
def test_float32(spec):
    rng = np.random.default_rng(6)
    q, k, v, do = inputs(rng, 2, 4, 2, spec.n_q, spec.n_k, 16)
    plan = maskattn.compile_mask(spec, (16, 32))
    out64, lse64 = reference.forward(q, k, v, plan, 0.25)
    want = (out64, lse64, *reference.backward(do, q, k, v, out64, lse64, plan, 0.25))
    q, k, v, do = (x.astype(np.float32) for x in (q, k, v, do))
    out, lse = reference.forward(q, k, v, plan, 0.25)
    got = (out, lse, *reference.backward(do, q, k, v, out, lse, plan, 0.25))
    for name, g, w in zip(("out", "lse", "dq", "dk", "dv"), got, want):
        assert g.dtype == np.float32, name
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=name)


def test_plan_must_fit():
    rng = np.random.default_rng(7)
    q, k, v, _ = inputs(rng, 1, 2, 2, 20, 30, 4)
    plan = maskattn.compile_mask(masks.causal(20, 31), (16, 16))
    with pytest.raises(ValueError, match="does not fit"):
        reference.forward(q, k, v, plan, 0.5)
