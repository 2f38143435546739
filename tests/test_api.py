"""The public API on the CPU: layouts, GQA, masks as specs or plans, return types, and every input error."""

import numpy as np
import pytest

import maskattn
from maskattn import masks
from maskattn.testing import dense_softmax_attention


def qkv(B=2, H=4, Hk=2, n_q=70, n_k=90, D=16, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((B, H, n_q, D)).astype(dtype), rng.standard_normal((B, Hk, n_k, D)).astype(dtype),
            rng.standard_normal((B, Hk, n_k, D)).astype(dtype))


def test_attention_matches_dense_softmax_with_gqa_and_bottom_right_causal():
    q, k, v = qkv()
    spec = masks.causal(70, 90)
    out, lse = maskattn.attention(q, k, v, spec, return_lse=True)
    ref = dense_softmax_attention(q, k, v, spec.to_dense(), 1 / 4)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12)
    assert lse.shape == (2, 4, 70) and out.dtype == np.float64 and out.flags.c_contiguous


def test_no_mask_is_full_attention_and_scale_is_used():
    q, k, v = qkv(seed=1)
    out = maskattn.attention(q, k, v, scale=0.3)
    np.testing.assert_allclose(out, dense_softmax_attention(q, k, v, np.ones((70, 90), bool), 0.3), atol=1e-12)


def test_bnhd_layout_equals_bhnd():
    q, k, v = qkv(seed=2)
    spec = masks.sliding_window(70, 90, left=20, sinks=3)
    ref = maskattn.attention(q, k, v, spec)
    t = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # noqa: E731
    out = maskattn.attention(t(q), t(k), t(v), spec, layout="bnhd")
    assert out.shape == (2, 70, 4, 16)
    np.testing.assert_allclose(out.transpose(0, 2, 1, 3), ref, atol=1e-13)
    do = np.random.default_rng(3).standard_normal(ref.shape)
    _, lse = maskattn.attention(q, k, v, spec, return_lse=True)
    grads = maskattn.attention_backward(do, q, k, v, ref, lse, spec)
    grads_t = maskattn.attention_backward(t(do), t(q), t(k), t(v), t(ref), lse, spec, layout="bnhd")
    for g, gt in zip(grads, grads_t):
        np.testing.assert_allclose(gt.transpose(0, 2, 1, 3), g, atol=1e-12)


def test_plan_and_spec_give_the_same_result_and_any_tile_works_on_cpu():
    q, k, v = qkv(seed=4)
    spec = masks.document([30, 40], n=70)
    spec = masks.from_intervals(np.pad(spec.intervals, ((0, 0), (0, 0), (0, 20), (0, 0))), n_q=70)
    a = maskattn.attention(q, k, v, spec)
    b = maskattn.attention(q, k, v, maskattn.compile_mask(spec, (16, 48)))
    np.testing.assert_allclose(a, b, atol=1e-13)


def test_backward_matches_finite_differences_through_the_api():
    q, k, v = qkv(B=1, H=2, Hk=1, n_q=9, n_k=11, D=4, seed=5)
    spec = masks.from_dense(np.random.default_rng(6).random((9, 11)) < 0.5)
    w = np.random.default_rng(7).standard_normal(q.shape)
    out, lse = maskattn.attention(q, k, v, spec, return_lse=True)
    dq, dk, dv = maskattn.attention_backward(w, q, k, v, out, lse, spec)
    eps = 1e-6
    for x, g in ((q, dq), (k, dk), (v, dv)):
        idx = (0, 0, 3, 1)
        x[idx] += eps
        up = np.sum(maskattn.attention(q, k, v, spec) * w)
        x[idx] -= 2 * eps
        down = np.sum(maskattn.attention(q, k, v, spec) * w)
        x[idx] += eps
        assert abs((up - down) / (2 * eps) - g[idx]) < 1e-7


def test_fully_masked_rows_are_zero_with_minus_inf_lse():
    q, k, v = qkv(B=1, H=2, Hk=2, n_q=40, n_k=40, seed=8)
    spec = masks.document([10, 10], n=40)  # rows 20.. are padding
    out, lse = maskattn.attention(q, k, v, spec, return_lse=True)
    assert np.all(out[:, :, 20:] == 0) and np.all(np.isneginf(lse[:, :, 20:]))
    dq, dk, dv = maskattn.attention_backward(np.ones_like(out), q, k, v, out, lse, spec)
    assert np.all(dq[:, :, 20:] == 0) and np.all(dk[:, :, 20:] == 0) and np.all(dv[:, :, 20:] == 0)


def test_float32_runs_in_float32():
    q, k, v = qkv(dtype=np.float32, seed=9)
    out = maskattn.attention(q, k, v, masks.causal(70, 90))
    assert out.dtype == np.float32


def test_torch_cpu_tensors_in_torch_out():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in qkv(seed=10))
    out = maskattn.attention(q, k, v, masks.causal(70, 90))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    np.testing.assert_allclose(out.numpy(), maskattn.attention(q.numpy(), k.numpy(), v.numpy(), masks.causal(70, 90)))


# ------------------------------------------------------------------------------------------------- errors

def _call(**over):
    q, k, v = qkv(B=1, H=4, Hk=2, n_q=8, n_k=8, D=8)
    args = {"q": q, "k": k, "v": v, "mask": None, **over}
    return maskattn.attention(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("mask"), **args)


@pytest.mark.parametrize("over,error,match", [
    ({"q": np.zeros((4, 8, 8))}, ValueError, r"q must have 4 dimensions \(B, H, n, D\).*\(4, 8, 8\)"),
    ({"layout": "nhd"}, ValueError, "layout must be one of"),
    ({"k": np.zeros((1, 3, 8, 8))}, ValueError, "k and v must have the same shape"),
    ({"k": np.zeros((1, 3, 8, 8)), "v": np.zeros((1, 3, 8, 8))}, ValueError, "4 heads and k/v 3"),
    ({"k": np.zeros((1, 2, 8, 4)), "v": np.zeros((1, 2, 8, 4))}, ValueError,
     "head_dim 4; q has batch 1 and head_dim 8"),
    ({"q": np.zeros((1, 4, 8, 8), np.float16)}, TypeError, "one dtype"),
    ({"q": np.zeros((1, 4, 8, 8), np.float16), "k": np.zeros((1, 2, 8, 8), np.float16),
      "v": np.zeros((1, 2, 8, 8), np.float16)}, TypeError, "float16; the CPU backend supports float32, float64"),
    ({"q": np.zeros((1, 4, 8, 8), np.int64), "k": np.zeros((1, 2, 8, 8), np.int64),
      "v": np.zeros((1, 2, 8, 8), np.int64)}, TypeError, "int64"),
    ({"q": [[1.0]]}, TypeError, "q must be a NumPy array, a CuPy array or a DLPack tensor"),
    ({"mask": masks.causal(9)}, ValueError,
     r"mask has shape \(B=1, H=1, n_q=9, n_k=9\); attention has B=1, H=4, n_q=8"),
    ({"mask": masks.from_dense(np.ones((3, 1, 8, 8), bool))}, ValueError, "mask has shape"),
    ({"mask": np.ones((8, 8), bool)}, TypeError,
     r"mask must be None, a spec.*; for a boolean array use maskattn.masks.from_dense\(mask\)"),
    ({"scale": float("nan")}, ValueError, "scale must be finite"),
    ({"q": np.full((1, 4, 8, 8), np.inf)}, ValueError, "q holds inf or NaN"),
    ({"v": np.full((1, 2, 8, 8), np.nan)}, ValueError, "v holds inf or NaN"),
])
def test_attention_errors(over, error, match):
    with pytest.raises(error, match=match):
        _call(**over)


def test_finite_check_can_be_turned_off():
    with np.errstate(invalid="ignore"):
        out = _call(q=np.full((1, 4, 8, 8), np.inf), check_finite=False)
    assert out.shape == (1, 4, 8, 8)


def test_backward_errors():
    q, k, v = qkv(B=1, H=2, Hk=2, n_q=8, n_k=8, D=8)
    out, lse = maskattn.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match=r"lse must have shape \(B, H, n_q\)"):
        maskattn.attention_backward(out, q, k, v, out, lse[0])
    with pytest.raises(ValueError, match="do must have 4 dimensions"):
        maskattn.attention_backward(out[0], q, k, v, out, lse)
    with pytest.raises(ValueError, match="do holds inf"):
        maskattn.attention_backward(np.full_like(out, np.inf), q, k, v, out, lse)


def test_mixed_devices_are_named():
    cupy = pytest.importorskip("cupy")
    try:
        k = cupy.zeros((1, 2, 8, 8), cupy.float16)
    except Exception as err:  # CuPy installed without a usable GPU
        pytest.skip(f"no CUDA device: {err}")
    q = np.zeros((1, 2, 8, 8), np.float16)
    with pytest.raises(ValueError, match=r"q on cpu, k on cuda:0"):
        maskattn.attention(q, k, k)


def test_kv_cache_lengths_equal_each_sample_alone():
    rng = np.random.default_rng(11)
    lengths, n_q, n_k = [5, 37, 64, 20], 3, 64
    q = rng.standard_normal((4, 4, n_q, 16))
    k, v = (rng.standard_normal((4, 2, n_k, 16)) for _ in range(2))
    out, lse = maskattn.attention(q, k, v, masks.kv_cache(n_q, lengths, n_k=n_k), return_lse=True)
    for b, length in enumerate(lengths):
        alone, alone_lse = maskattn.attention(q[b:b + 1], k[b:b + 1, :, :length], v[b:b + 1, :, :length],
                                              masks.causal(n_q, length), return_lse=True)
        np.testing.assert_allclose(out[b:b + 1], alone, atol=1e-13)
        np.testing.assert_allclose(lse[b:b + 1], alone_lse, atol=1e-13)
