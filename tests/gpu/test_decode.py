"""Inference shapes on the CUDA forward: split-KV against unsplit, GQA packing, the decode tile, per-sample cache
lengths and MEDUSA tree verification, each against the float64 reference with the output poisoned beforehand.

Needs CuPy and a CUDA device; skipped, with the reason shown, without them.
"""

import numpy as np
import pytest

from families import (N_K, N_Q, check_forward, device_input, dtype_of, graph_rcm, poisoned, reference_forward,
                      require_gpu)

cp = require_gpu()

import maskattn  # noqa: E402
from maskattn import compile_mask, masks  # noqa: E402
from maskattn.backends import cuda  # noqa: E402
from maskattn.bench import workloads  # noqa: E402


def _inputs(rng, B, H, Hk, n_q, n_k, D, dtype, layout="bhnd"):
    return (device_input(rng, (B, H, n_q, D), dtype, layout), device_input(rng, (B, Hk, n_k, D), dtype, layout),
            device_input(rng, (B, Hk, n_k, D), dtype, layout))


def _host(x):
    return cp.asnumpy(x.view(cp.uint16)).view(x.dtype).astype(np.float64)


def _forward(spec, inputs, dtype_name, *, pack=1, num_splits=None, layout="bhnd", split_from=None):
    """cuda.forward over the spec (rows repeated `pack` times, the tile for that many rows) into a poisoned
    output, checked against the float64 reference. Returns out and lse on the host."""
    (q64, q), (k64, k), (v64, v) = inputs
    dtype = dtype_of(dtype_name)
    plan = compile_mask(spec.repeat_rows(pack), tile=cuda.tile_for(q.shape[-1], dtype, rows=spec.n_q * pack))
    out = poisoned(q.shape, dtype, layout)
    scale = q.shape[-1] ** -0.5
    _, lse = cuda.forward(q, k, v, plan, scale, out=out, num_splits=num_splits, pack=pack, split_from=split_from)
    ref_out, ref_lse = reference_forward(q64, k64, v64, spec.to_dense(), scale)
    check_forward(out, lse, ref_out, ref_lse, dtype_name)
    return _host(out), cp.asnumpy(lse)


def _assert_rounding_close(a, b, dtype_name):
    """Equal up to a few units in the last place of the 16-bit output (the merge rounds in float32)."""
    ulp = 2.0 ** (-10 if dtype_name == "float16" else -7)
    tol = 2 * ulp * np.maximum(np.abs(a), np.abs(b)) + 1e-6
    bad = np.abs(a - b) > tol
    assert not bad.any(), f"{bad.sum()} elements differ by more than 2 ulp; worst {np.abs(a - b).max():.3g}"


def _assert_split_matches(split, unsplit, dtype_name, what, exact=False):
    """A split launch's (out, lse) against the unsplit one's: to float32 rounding where every probability is exact
    (``exact``), else to the rounding of P to 16 bits in each split (relative L2 <= 2e-3); the same rows see nothing
    (0 and -inf) and the LSE moves by at most 5e-5."""
    (out, lse), (base_out, base_lse) = split, unsplit
    if exact:
        _assert_rounding_close(out, base_out, dtype_name)
    else:
        diff = np.linalg.norm(out - base_out) / np.linalg.norm(base_out)
        assert diff <= 2e-3, f"{what} differ from one by {diff:.3g} (relative L2)"
    assert np.array_equal(np.isneginf(lse), np.isneginf(base_lse))
    assert np.all(out[np.isneginf(lse)] == 0)
    finite = np.isfinite(base_lse)
    worst = np.abs(lse[finite] - base_lse[finite]).max()
    assert worst <= 5e-5, f"LSE moves by {worst:.3g} with {what}"


def _split_family(name, rng):
    if name == "causal":
        return masks.causal(N_Q, N_K)
    if name == "sink_swa_short":
        return masks.sliding_window(N_Q, N_K, left=100, sinks=4)  # 1 to 3 key blocks per row
    if name == "dense_holes":
        dense = rng.random((N_Q, N_K)) < 0.3
        dense[rng.choice(N_Q, 40, replace=False)] = False  # rows that see nothing
        return masks.from_dense(dense)
    if name == "graph_rcm":  # the combine kernel scatters rows through the plan's perm
        return graph_rcm(rng)
    return masks.medusa_tree(workloads.MC_SIM_7B_63, prefix_len=N_K - 64)


@pytest.mark.parametrize("family", ["causal", "sink_swa_short", "dense_holes", "tree", "graph_rcm"])
def test_every_split_count_matches_unsplit(family, rng):
    """num_splits 1..16, including splits that get no key block (rows with one to three key blocks) and rows
    that see nothing (0 and -inf).

    With uniform scores (q = 0) every probability is exactly 1 in any split, so split and unsplit must agree to
    float32 rounding: the partition, the empty splits and the combine are exact. With random scores each split
    rounds P to 16 bits against its own running max, so they agree to that rounding (relative L2 <= 2e-3), and
    each matches the float64 reference."""
    spec = _split_family(family, rng)
    dtype_name, H, Hk, D = "float16", 4, 2, 64
    dtype = dtype_of(dtype_name)
    random = _inputs(rng, 1, H, Hk, spec.n_q, spec.n_k, D, dtype)
    uniform = (device_input(rng, (1, H, spec.n_q, D), dtype, "bhnd", np.zeros((1, H, spec.n_q, D))),) + random[1:]
    for inputs, exact in ((uniform, True), (random, False)):
        base_out, base_lse = _forward(spec, inputs, dtype_name, num_splits=1)
        for splits in range(2, 17):
            out, lse = _forward(spec, inputs, dtype_name, num_splits=splits)
            _assert_split_matches((out, lse), (base_out, base_lse), dtype_name, f"{splits} splits", exact)


@pytest.mark.parametrize("sm90", [True, False])
@pytest.mark.parametrize("family", ["causal", "dense_holes", "tree", "graph_rcm"])
def test_tail_splits_match_unsplit(family, sm90, rng, monkeypatch):
    """Only the CTAs from split_from on split (the tail of the CTA order, as tail_splits_for splits the last wave):
    the whole CTAs and the tail's pieces together give the unsplit result, the combine placing the tail's rows
    through the plan's CTA order, batch, GQA heads and node order; both kernels (MASKATTN_SM90=0: fwd.cu's)."""
    if not sm90:
        monkeypatch.setenv("MASKATTN_SM90", "0")
    spec = _split_family(family, rng)
    B, H, Hk, D, dtype_name = 2, 4, 2, 64, "float16"  # split and unsplit agree to float16's rounding of P
    dtype = dtype_of(dtype_name)
    inputs = _inputs(rng, B, H, Hk, spec.n_q, spec.n_k, D, dtype)
    ctas = -(-spec.n_q // cuda.tile_for(D, dtype, rows=spec.n_q)[0]) * B * H
    base_out, base_lse = _forward(spec, inputs, dtype_name, num_splits=1)
    for split_from in sorted({1, ctas // 2, ctas - 1}):
        for splits in (2, 5):
            out, lse = _forward(spec, inputs, dtype_name, num_splits=splits, split_from=split_from)
            _assert_split_matches((out, lse), (base_out, base_lse), dtype_name,
                                  f"{splits} splits from CTA {split_from}")


def test_dense_rows_split_the_last_wave(rng):
    """Rows of one length in a launch of one wave and a few CTAs more: on Hopper the forward splits the last CTAs
    (tail_splits_for) and its result matches the reference; a bounded launch (cache lengths) does not."""
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    H, D, n_q, n_k = sms + 20, 64, 128, 2048
    spec = masks.full(n_q, n_k)
    dtype = dtype_of("bfloat16")
    (q64, q), (k64, k), (v64, v) = _inputs(rng, 1, H, H, n_q, n_k, D, dtype)
    plan = compile_mask(spec, tile=cuda.tile_for(D, dtype))
    launch = cuda.forward_launch(q, k, v, plan, D ** -0.5)
    hopper = cuda.kernels.uses_sm90(D, plan.tile, q.device.id)
    assert (launch.split_from, launch.num_splits > 1) == ((H - 20, True) if hopper else (H, False))
    assert cuda.forward_launch(q, k, v, plan, D ** -0.5, bounded=True).num_splits == 1
    out = poisoned(q.shape, dtype, "bhnd")
    _, lse = cuda.forward(q, k, v, plan, D ** -0.5, out=out)
    ref_out, ref_lse = reference_forward(q64, k64, v64, spec.to_dense(), D ** -0.5)
    check_forward(out, lse, ref_out, ref_lse, "bfloat16")


@pytest.mark.parametrize("head_dim", [32, 64, 96, 192])
def test_up_to_32_splits_every_head_dim(head_dim, rng):
    """17 to 32 splits at head dims whose rows fill fewer than all 32 lanes of a combine step (D % 128 != 0): each
    lane still takes part in every weight shuffle; a split count past 16 once read lanes that had left the loop."""
    spec = masks.sliding_window(N_Q, N_K, left=1200, sinks=4)
    inputs = _inputs(rng, 1, 4, 2, N_Q, N_K, head_dim, dtype_of("bfloat16"))
    for splits in (17, 24, 32):
        _forward(spec, inputs, "bfloat16", num_splits=splits)


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("head_dim", [64, 96, 128, 256])
@pytest.mark.parametrize("n_q", [1, 3, 16, 40])
def test_gqa_packing(n_q, head_dim, dtype_name, rng):
    """Query heads of one KV head packed token-major into one tile, over a cache with per-sample lengths."""
    B, H, Hk, n_k = 3, 8, 2, 1537
    spec = masks.kv_cache(n_q, [1537, 200, 777], n_k=n_k, left=1000, sinks=4)
    inputs = _inputs(rng, B, H, Hk, n_q, n_k, head_dim, dtype_of(dtype_name))
    _forward(spec, inputs, dtype_name, pack=H // Hk)


@pytest.mark.parametrize("head_dim", [64, 128, 192])  # at 256 the tile exceeds shared memory: (64, 64) then
@pytest.mark.parametrize("family", ["dense_holes", "sink_swa", "causal"])
def test_key_warps_tile(family, head_dim, rng):
    """Up to 16 packed rows take the 16 x 128 tile whose eight warps split every key block (each over its own 16
    keys, merged at the end): bit masks read from inside a word, interval masks, the key bound of a short last
    block and rows that see nothing, unsplit and split."""
    n_q, n_k = 3, 1500
    if family == "dense_holes":
        dense = rng.random((n_q, n_k)) < 0.3
        dense[1] = False
        spec = masks.from_dense(dense)
    elif family == "sink_swa":
        spec = masks.sliding_window(n_q, n_k, left=300, sinks=5)
    else:
        spec = masks.causal(n_q, n_k)
    dtype = dtype_of("bfloat16")
    assert cuda.tile_for(head_dim, dtype, rows=n_q * 4) == (16, 128)
    inputs = _inputs(rng, 2, 8, 2, n_q, n_k, head_dim, dtype)
    for splits in (1, 3, None):
        _forward(spec, inputs, "bfloat16", pack=4, num_splits=splits)


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_packing_layouts_and_tree(layout, rng):
    """A MEDUSA tree with GQA (EAGLE on a GQA model), packed, in both layouts, split and unsplit."""
    spec = masks.medusa_tree(workloads.MC_SIM_7B_63, prefix_len=1000)
    inputs = _inputs(rng, 2, 8, 4, spec.n_q, spec.n_k, 128, dtype_of("bfloat16"), layout)
    for splits in (1, 5):
        _forward(spec, inputs, "bfloat16", pack=2, num_splits=splits, layout=layout)


def test_per_sample_cache_lengths_equal_each_sample_alone(rng):
    """cache_seqlens in one batched call = each sample over its own cache, through the public API."""
    lengths, n_k, n_q, D = [1537, 64, 900, 1], 1537, 5, 128
    dtype = dtype_of("bfloat16")
    (_, q), (_, k), (_, v) = _inputs(rng, len(lengths), 8, 2, n_q, n_k, D, dtype)
    spec = masks.kv_cache(n_q, lengths, n_k=n_k)
    batched = _host(maskattn.attention(q, k, v, spec))
    assert not np.isnan(batched).any()
    for b, length in enumerate(lengths):
        alone = _host(maskattn.attention(q[b:b + 1], k[b:b + 1, :, :length], v[b:b + 1, :, :length],
                                         masks.causal(n_q, length)))
        # the two calls may split the keys differently (P rounds to 16 bits per split): bf16 noise, no more
        diff = np.linalg.norm(batched[b:b + 1] - alone) / max(np.linalg.norm(alone), 1e-30)
        assert diff <= 4e-3, f"sample {b} (cache {length}) differs from running alone by {diff:.3g}"
        assert np.array_equal(batched[b:b + 1] == 0, alone == 0)


@pytest.mark.parametrize("Hk", [8, 32])
def test_public_api_decode_and_tree(Hk, rng):
    """maskattn.attention picks packing, the decode tile and the splits itself: single-token decode and tree
    verification over a long cache match the reference."""
    dtype = dtype_of("bfloat16")
    for spec in (masks.causal(1, 4097), masks.medusa_tree(workloads.MC_SIM_7B_63, prefix_len=4033)):
        (q64, q), (k64, k), (v64, v) = _inputs(rng, 2, 32, Hk, spec.n_q, spec.n_k, 128, dtype)
        out, lse = maskattn.attention(q, k, v, spec, return_lse=True)
        ref_out, ref_lse = reference_forward(q64, k64, v64, spec.to_dense(), 128 ** -0.5)
        check_forward(out, lse, ref_out, ref_lse, "bfloat16")


def test_rejects_bad_split_and_pack(rng):
    dtype = dtype_of("float16")
    spec = masks.causal(4, 300)
    (_, q), (_, k), (_, v) = _inputs(rng, 1, 8, 2, 4, 300, 64, dtype)
    plan = compile_mask(spec.repeat_rows(4), tile=cuda.tile_for(64, dtype, rows=16))
    with pytest.raises(ValueError, match="num_splits"):
        cuda.forward(q, k, v, plan, 0.125, num_splits=33, pack=4)
    with pytest.raises(ValueError, match="plan has shape"):
        cuda.forward(q, k, v, plan, 0.125, pack=2)
    with pytest.raises(ValueError, match="pack=3 must divide"):
        cuda.forward(q, k, v, plan, 0.125, pack=3)


@pytest.mark.parametrize("head_dim, Hk, n_q, mask, num_splits", [
    (128, 8, 1, None, None), (64, 8, 1, None, 3), (128, 32, 1, "causal", 16), (96, 4, 3, "causal", None),
    # 100 rows and more: the training tile, which Hopper runs on the wgmma kernel (rows with a gap: the window's sinks)
    (128, 8, 100, "window", None), (128, 8, 100, "window", 4), (64, 8, 150, None, None), (256, 4, 200, "causal", 3),
    (96, 8, 130, "window", 2), (32, 4, 100, None, None),
])
def test_cache_seqlens_bound_the_keys(head_dim, Hk, n_q, mask, num_splits, rng):
    """cache_seqlens (per-sample key counts the kernel reads at run time) against the float64 reference of
    mask & (j < length): through the public API, twice with new lengths written into the same array (the prepared
    call), and through cuda.forward into a poisoned output."""
    B, H, n_k, dtype = 4, 32, 3000, dtype_of("bfloat16")
    spec = {None: None, "causal": masks.causal(n_q, n_k),
            "window": masks.sliding_window(n_q, n_k, left=700, sinks=4)}[mask]
    (q64, q), (k64, k), (v64, v) = _inputs(rng, B, H, Hk, n_q, n_k, head_dim, dtype)
    dense = np.ones((1, 1, n_q, n_k), bool) if spec is None else spec.to_dense()
    scale = head_dim ** -0.5
    lens = cp.empty(B, dtype=np.int32)
    for lengths in ([3000, 1, 0, 1777], [129, 3000, 2999, 128]):
        lens[:] = cp.asarray(lengths, dtype=np.int32)
        cached = np.arange(n_k) < np.array(lengths)[:, None, None, None]
        ref_out, ref_lse = reference_forward(q64, k64, v64, dense & cached, scale)
        out, lse = maskattn.attention(q, k, v, spec, cache_seqlens=lens, num_splits=num_splits, return_lse=True)
        check_forward(out, lse, ref_out, ref_lse, "bfloat16")
    plan = compile_mask(spec or masks.full(n_q, n_k), tile=cuda.tile_for(head_dim, dtype, rows=n_q))
    out = poisoned(q.shape, dtype, "bhnd")
    _, lse = cuda.forward(q, k, v, plan, scale, out=out, num_splits=num_splits, key_lens=lens)
    check_forward(out, lse, ref_out, ref_lse, "bfloat16")


def test_cache_seqlens_checks(rng):
    dtype = dtype_of("float16")
    (_, q), (_, k), (_, v) = _inputs(rng, 2, 8, 2, 1, 300, 64, dtype)
    with pytest.raises(ValueError, match="int32"):
        maskattn.attention(q, k, v, cache_seqlens=cp.asarray([5, 6], dtype=np.int64))
    with pytest.raises(ValueError, match="one device"):
        maskattn.attention(q, k, v, cache_seqlens=np.array([5, 6], np.int32))
    plan = compile_mask(masks.full(1, 300), tile=cuda.tile_for(64, dtype, rows=1))
    with pytest.raises(ValueError, match="key_lens"):
        cuda.forward(q, k, v, plan, 0.125, key_lens=cp.asarray([5], dtype=np.int32))
