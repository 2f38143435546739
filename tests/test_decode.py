"""Decode-side host pieces: repeated mask rows for GQA packing, the split-KV heuristic, the MEDUSA tree workload,
and the CPU backend's acceptance of ``num_splits``."""

import numpy as np
import pytest

import maskattn
from maskattn import masks
from maskattn.backends import cuda
from maskattn.bench import workloads


@pytest.mark.parametrize("build", [
    lambda: masks.causal(3, 40),
    lambda: masks.kv_cache(2, [7, 40, 19], n_k=40, left=9, sinks=2),
    lambda: masks.medusa_tree([[0], [1], [0, 0], [0, 1], [1, 0]], prefix_len=30),
    lambda: masks.sliding_window(5, 40, left=7, sinks=3),
])
@pytest.mark.parametrize("factor", [1, 2, 4, 7])
def test_repeat_rows_repeats_each_row(build, factor):
    spec = build()
    rep = spec.repeat_rows(factor)
    assert rep.shape == spec.shape[:2] + (spec.n_q * factor, spec.n_k)
    assert np.array_equal(rep.to_dense(), np.repeat(spec.to_dense(), factor, axis=2))
    assert spec.repeat_rows(factor) is rep  # cached
    plan = maskattn.compile_mask(rep, tile=(16, 16))
    assert np.array_equal(plan.to_dense(), rep.to_dense())


def test_repeat_rows_is_none_where_rows_do_not_repeat_simply():
    assert masks.from_function(lambda i, j: i >= j, 8).repeat_rows(2) is None
    assert masks.longformer(8, 2, dilation=2).repeat_rows(2) is None  # intervals in an order of their own (perm)
    with pytest.raises(ValueError, match="factor"):
        masks.causal(4).repeat_rows(0)


def test_num_splits_heuristic():
    sms, smem = 132, 87040  # an H100 with the decode tile at head dim 128: two CTAs per SM
    # 64 CTAs (batch 8 x 8 KV heads) over 64 key blocks: split until about one full wave
    s = cuda.num_splits_for(64, 64, smem, sms)
    assert 2 <= s <= cuda.MAX_SPLITS and 64 * s <= 2 * 2 * sms
    assert (64 * s / 264) / np.ceil(64 * s / 264) >= 0.85
    assert cuda.num_splits_for(264, 64, smem, sms) == 1      # a wave already
    assert cuda.num_splits_for(8, 3, smem, sms) == 1         # too little work to split
    assert cuda.num_splits_for(1, 6, smem, sms) == 3         # at most one split per two key blocks
    assert 0.85 * cuda.MAX_SPLITS <= cuda.num_splits_for(1, 10_000, smem, sms) <= cuda.MAX_SPLITS


def test_tail_splits_heuristic():
    sms, piece = 132, cuda.fwd.forward_piece_blocks
    # the dense 16k forward at D = 128 (2048 CTAs of 128 key blocks: 15.5 waves): the last 68 CTAs split
    splits, start = cuda.tail_splits_for(2048, 128, sms, piece(128))
    assert start == 2048 - 68 and 3 <= splits <= cuda.MAX_SPLITS
    # D = 96 at 192 x 112 (1376 CTAs of 147 blocks: 56 past ten waves): halves fit the idle SMs
    assert cuda.tail_splits_for(1376, 147, sms, piece(112)) == (2, 1376 - 56)
    # D = 256 at 128 x 80 (1024 CTAs of 103 blocks: 100 past seven waves): the pieces' partials would cost more
    assert cuda.tail_splits_for(1024, 103, sms, piece(80)) == (1, 1024)
    assert cuda.tail_splits_for(2 * sms, 128, sms, piece(128)) == (1, 2 * sms)  # whole waves
    assert cuda.tail_splits_for(sms + 1, 3, sms, piece(128)) == (1, sms + 1)  # rows too short to split
    assert cuda.tail_splits_for(2 * sms - 1, 128, sms, piece(128)) == (1, 2 * sms - 1)  # a last wave all but full
    for ctas, blocks in ((2048, 128), (1376, 147), (152, 16), (500, 64), (4096, 64)):
        splits, start = cuda.tail_splits_for(ctas, blocks, sms, piece(128))
        assert ctas - 2 * sms < start <= ctas and 1 <= splits <= min(cuda.MAX_SPLITS, blocks // 2)


def test_decode_tile_only_for_few_rows():
    dtype = np.float16
    training = cuda.tile_for(128, dtype, device=None)
    assert cuda.tile_for(128, dtype, rows=64) == (64, 64)
    assert cuda.tile_for(128, dtype, rows=65) == training
    assert cuda.tile_for(128, dtype) == training


def test_mc_sim_7b_63_tree():
    spec = masks.medusa_tree(workloads.MC_SIM_7B_63, prefix_len=4096)
    assert spec.shape == (1, 1, 64, 4096 + 64)
    assert spec.retrieve_indices.shape == (42, 5)
    assert spec.position_ids.max() == 4


def test_cpu_backend_accepts_num_splits():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 3, 16))
    k, v = (rng.standard_normal((2, 2, 50, 16)) for _ in range(2))
    spec = masks.kv_cache(3, [20, 50], n_k=50)
    base = maskattn.attention(q, k, v, spec)
    assert np.array_equal(maskattn.attention(q, k, v, spec, num_splits=7), base)
    for b, length in enumerate([20, 50]):
        alone = maskattn.attention(q[b:b + 1], k[b:b + 1, :, :length], v[b:b + 1, :, :length],
                                   masks.causal(3, length))
        np.testing.assert_allclose(base[b:b + 1], alone, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_q, mask", [(1, None), (3, "causal"), (4, "window")])
def test_cache_seqlens_bound_the_keys(n_q, mask):
    """cache_seqlens masks keys j >= cache_seqlens[b] besides the mask: with one new token and no mask, each sample
    equals attention over its own cache; in general, the dense float64 softmax of mask & (j < length)."""
    rng = np.random.default_rng(n_q)
    B, H, Hk, n_k, D = 4, 6, 2, 333, 16
    lengths = np.array([333, 1, 0, 200])
    q = rng.standard_normal((B, H, n_q, D))
    k, v = (rng.standard_normal((B, Hk, n_k, D)) for _ in range(2))
    spec = {None: None, "causal": masks.causal(n_q, n_k),
            "window": masks.sliding_window(n_q, n_k, left=50, sinks=3)}[mask]
    out, lse = maskattn.attention(q, k, v, spec, cache_seqlens=lengths, return_lse=True)
    dense = np.ones((n_q, n_k), bool) if spec is None else spec.to_dense()[0, 0]
    for b, length in enumerate(lengths):
        visible = dense & (np.arange(n_k) < length)
        kk, vv = (np.repeat(x[b], H // Hk, axis=0) for x in (k, v))
        s = np.where(visible, q[b] @ kk.transpose(0, 2, 1) / np.sqrt(D), -np.inf)
        top = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
        p = np.exp(s - np.where(np.isfinite(top), top, 0))
        total = p.sum(axis=-1, keepdims=True)
        ref = np.where(total > 0, p @ vv / np.where(total > 0, total, 1), 0)
        ref_lse = np.where(total[..., 0] > 0, np.log(np.where(total > 0, total, 1))[..., 0] + top[..., 0], -np.inf)
        np.testing.assert_allclose(out[b], ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(np.isinf(lse[b]), np.isinf(ref_lse))
        np.testing.assert_allclose(lse[b][np.isfinite(ref_lse)], ref_lse[np.isfinite(ref_lse)], rtol=1e-12)
        if spec is None and length > 0:
            alone = maskattn.attention(q[b:b + 1], k[b:b + 1, :, :length], v[b:b + 1, :, :length])
            np.testing.assert_allclose(out[b:b + 1], alone, rtol=1e-12, atol=1e-12)


def test_cache_seqlens_checks():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 2, 1, 8))
    k, v = (rng.standard_normal((2, 2, 40, 8)) for _ in range(2))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        maskattn.attention(q, k, v, cache_seqlens=np.array([3]))
    with pytest.raises(ValueError, match="integer"):
        maskattn.attention(q, k, v, cache_seqlens=np.array([3.0, 4.0]))
    with pytest.raises(ValueError, match=r"\[0, n_k=40\]"):
        maskattn.attention(q, k, v, cache_seqlens=np.array([3, 41]))
    dilated = masks.longformer(40, 8, dilation=2)  # a plan with a node order
    q40 = rng.standard_normal((2, 2, 40, 8))
    with pytest.raises(ValueError, match="node order"):
        maskattn.attention(q40, k, v, dilated, cache_seqlens=np.array([3, 4]))
