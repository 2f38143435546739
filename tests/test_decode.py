"""Decode-side host pieces: repeated mask rows for GQA packing, the split-KV heuristic, the MEDUSA tree workload,
and the CPU backend's acceptance of ``num_splits``."""

import numpy as np
import pytest

import maskattn
from maskattn import _cuda, masks, workloads


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
    s = _cuda.num_splits_for(64, 64, smem, sms)
    assert 2 <= s <= _cuda.MAX_SPLITS and 64 * s <= 2 * 2 * sms
    assert (64 * s / 264) / np.ceil(64 * s / 264) >= 0.85
    assert _cuda.num_splits_for(264, 64, smem, sms) == 1      # a wave already
    assert _cuda.num_splits_for(8, 3, smem, sms) == 1         # too little work to split
    assert _cuda.num_splits_for(1, 6, smem, sms) == 3         # at most one split per two key blocks
    assert 0.85 * _cuda.MAX_SPLITS <= _cuda.num_splits_for(1, 10_000, smem, sms) <= _cuda.MAX_SPLITS


def test_decode_tile_only_for_few_rows():
    dtype = np.float16
    training = _cuda.tile_for(128, dtype, device=None)
    assert _cuda.tile_for(128, dtype, rows=64) == (64, 64)
    assert _cuda.tile_for(128, dtype, rows=65) == training
    assert _cuda.tile_for(128, dtype) == training


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
