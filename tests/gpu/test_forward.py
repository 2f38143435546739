"""The CUDA forward kernels (maskattn._cuda.forward) against a float64 dense softmax, on every mask family.

Needs CuPy and a CUDA device; skipped, with the reason shown, without them. Each test draws fresh inputs from a
seed of its own, poisons the output with NaN so an unwritten element fails, and compares O (relative L2) and LSE
(absolute where finite, -inf exactly where the reference has no key) with the float64 reference computed on the
same 16-bit inputs.
"""

import numpy as np
import pytest

from families import FAMILIES, LAYOUT_CASES, N_K, N_Q, require_gpu
from families import check_forward as _check, device_input as _make, dtype_of as _dtype, poisoned as _poisoned
from families import reference_forward as _reference

cp = require_gpu()

from maskattn import compile_mask, masks  # noqa: E402
from maskattn.backends import cuda  # noqa: E402
from maskattn.backends.cuda import kernels  # noqa: E402
from maskattn.plan import PLAN_ARRAYS  # noqa: E402

# ---------------------------------------------------------------------------------------------------- harness


def _run(spec, rng, dtype_name="bfloat16", head_dim=128, *, B=2, H=8, Hk=2, layout="bhnd", inputs=None,
         training=True):
    dtype = _dtype(dtype_name)
    plan = compile_mask(spec, tile=cuda.tile_for(head_dim, dtype, training=training))
    B_mask, _, n_q, n_k = spec.shape
    B = max(B, B_mask)
    if inputs is None:
        q64, q = _make(rng, (B, H, n_q, head_dim), dtype, layout)
        k64, k = _make(rng, (B, Hk, n_k, head_dim), dtype, layout)
        v64, v = _make(rng, (B, Hk, n_k, head_dim), dtype, layout)
    else:
        (q64, q), (k64, k), (v64, v) = inputs
    out = _poisoned(q.shape, dtype, layout)
    scale = head_dim ** -0.5
    got, lse = cuda.forward(q, k, v, plan, scale, out=out)
    assert got is out
    ref_out, ref_lse = _reference(q64, k64, v64, spec.to_dense(), scale)
    _check(out, lse, ref_out, ref_lse, dtype_name)
    return plan


# ---------------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family(family, rng):
    _run(FAMILIES[family](rng), rng)


@pytest.mark.parametrize("head_dim, dtype_name", [(32, "float16"), (96, "bfloat16"), (192, "float16"),
                                                  (256, "bfloat16")])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_other_head_dims(family, head_dim, dtype_name, rng):
    """Head dims 32 and 96 (at the shared layout of 64 and 128) and 192 and 256 (128 x 64 tiles): the wgmma kernel
    on Hopper, the mma.sync one elsewhere."""
    plan = _run(FAMILIES[family](rng), rng, dtype_name, head_dim, B=1, Hk=4)
    if kernels.compute_capability(cp.cuda.Device().id) == "90" and kernels.sm90_enabled():
        assert kernels.uses_sm90(head_dim, plan.tile, cp.cuda.Device().id)


def _hopper():
    return kernels.compute_capability(cp.cuda.Device().id) == "90" and kernels.sm90_enabled()


@pytest.mark.parametrize("head_dim, dtype_name", [(64, "bfloat16"), (32, "float16"), (96, "bfloat16"),
                                                  (192, "float16")])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_forward_only_tile(family, head_dim, dtype_name, rng):
    """Forward-only plans (tile_for(..., training=False)): on Hopper fwd_sm90.cu's larger tiles, 192 x 128 at
    D <= 64 (three consumer warpgroups), 192 x 112 at D = 96 (node orders' gathered key rows in a partial last pass)
    and 128 x 112 at D = 192 (bit tiles whose rows begin mid-word); GQA, odd lengths, node orders and both payloads
    come with the families."""
    plan = _run(FAMILIES[family](rng), rng, dtype_name, head_dim, training=False)
    assert (plan.tile == kernels.SM90_FORWARD_TILES[head_dim]) == _hopper()


@pytest.mark.parametrize("head_dim", [128, 256])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_forward_only_tile_taking_some_plans(family, head_dim, rng):
    """D = 128's forward-only 128 x 176 tile (FlashAttention-3's without a mask) runs masks without partial tiles;
    D = 256's 128 x 80 (FlashAttention-3's; no alignment slack, the kernel traps on an unaligned base) those with
    intervals or none. The launch check refuses the others (kernels.sm90_forward_tile_takes), which
    maskattn.attention runs at the training tile."""
    spec = FAMILIES[family](rng)
    plan = compile_mask(spec, tile=cuda.tile_for(head_dim, _dtype("bfloat16"), training=False))
    if _hopper() and not kernels.sm90_forward_tile_takes(head_dim, plan):
        B, H, n_q, n_k = spec.shape
        x = cp.zeros((B, H, n_q, head_dim), dtype=_dtype("bfloat16"))
        y = cp.zeros((B, H, n_k, head_dim), dtype=_dtype("bfloat16"))
        with pytest.raises(ValueError, match="does not take this plan"):
            cuda.forward(x, y, y, plan, 0.0625)
    else:
        plan = _run(spec, rng, "bfloat16", head_dim, training=False)
        assert (plan.tile == kernels.SM90_FORWARD_TILES[head_dim]) == _hopper()


def _whole_tiles(rng, n_q, n_k, tile):
    """A mask of whole tiles (about 60% of them seen; query block 1 sees nothing): no partial tile at ``tile``."""
    seen = rng.random((-(-n_q // tile[0]), -(-n_k // tile[1]))) < 0.6
    seen[1] = False
    return masks.from_dense(np.repeat(np.repeat(seen, tile[0], axis=0), tile[1], axis=1)[:n_q, :n_k])


@pytest.mark.parametrize("dtype_name, Hk, layout, n_q, n_k", [
    ("bfloat16", 2, "bhnd", 1000, 1537), ("float16", 8, "bnhd", 1537, 1000), ("bfloat16", 1, "bnhd", 300, 3001),
])
def test_d128_forward_only_tile_over_whole_tiles(dtype_name, Hk, layout, n_q, n_k, rng):
    """D = 128's 128 x 176 tile over block-sparse masks without partial tiles: odd lengths (the last key block
    ragged), GQA and MQA, both layouts, a query block that sees nothing (zeros)."""
    spec = _whole_tiles(rng, n_q, n_k, kernels.SM90_FORWARD_TILES[128])
    plan = _run(spec, rng, dtype_name, 128, Hk=Hk, layout=layout, training=False)
    if _hopper():
        assert plan.tile == kernels.SM90_FORWARD_TILES[128] and plan.payload == "none"


@pytest.mark.parametrize("D", [64, 96, 128, 192, 256])
@pytest.mark.parametrize("num_splits, pack, bounded, layout", [
    (3, 1, False, "bnhd"), (1, 4, False, "bhnd"), (2, 1, True, "bhnd"), (1, 1, True, "bnhd"), (5, 2, True, "bhnd"),
])
def test_forward_only_tile_splits_packing_and_cache_lengths(num_splits, pack, bounded, layout, D, rng):
    """The forward-only tiles' other launch paths: split-KV partials, GQA heads packed into a tile's rows (Q by
    the producers' cp.async) and per-batch key counts, against the float64 reference of mask & (j < length)."""
    B, H, Hk, dtype = 3, 8, 2, _dtype("bfloat16")
    # D = 128's forward-only tile takes no partial tiles (kernels.SM90_FORWARD_TAKES)
    spec = masks.full(N_Q, N_K) if D == 128 else masks.sliding_window(N_Q, N_K, left=700, sinks=4)
    plan = compile_mask(spec.repeat_rows(pack), tile=cuda.tile_for(D, dtype, training=False))
    assert (plan.tile == kernels.SM90_FORWARD_TILES[D]) == _hopper()
    shapes = ((B, H, N_Q, D), (B, Hk, N_K, D), (B, Hk, N_K, D))
    (q64, q), (k64, k), (v64, v) = (_make(rng, shape, dtype, layout) for shape in shapes)
    dense = np.broadcast_to(spec.to_dense(), (B, 1, N_Q, N_K))
    lens = None
    if bounded:
        lengths = np.array([N_K, 1, 1300])
        lens = cp.asarray(lengths, dtype=np.int32)
        dense = dense & (np.arange(N_K) < lengths[:, None, None, None])
    out = _poisoned(q.shape, dtype, layout)
    scale = D ** -0.5
    _, lse = cuda.forward(q, k, v, plan, scale, out=out, num_splits=num_splits, pack=pack, key_lens=lens)
    ref_out, ref_lse = _reference(q64, k64, v64, dense, scale)
    _check(out, lse, ref_out, ref_lse, "bfloat16")


@pytest.mark.parametrize("spec, tall", [(masks.causal(1536), True), (masks.bigbird(N_Q, 64, seed=1), False)])
def test_api_forward_of_a_spec_takes_the_192_row_tile_where_it_pays(spec, tall, rng):
    """maskattn.attention over a spec at D = 64 compiles the 192-row plan too, and runs it where it lists at most
    10% more work (causal over 8 x 192 = 12 x 128 rows: 1.08x; BigBird's 64-token blocks at 1000: 1.16x)."""
    import maskattn
    from maskattn import api

    B, H, Hk, D, dtype = 2, 4, 2, 64, _dtype("bfloat16")
    (q64, q), (k64, k), (v64, v) = (_make(rng, (B, h, n, D), dtype, "bhnd")
                                    for h, n in ((H, spec.n_q), (Hk, spec.n_k), (Hk, spec.n_k)))
    out, lse = maskattn.attention(q, k, v, spec, return_lse=True)
    ref_out, ref_lse = _reference(q64, k64, v64, spec.to_dense(), D ** -0.5)
    _check(out, lse, ref_out, ref_lse, "bfloat16")
    plans = spec._plans
    assert (kernels.SM90_TILE_192 in plans) == _hopper()
    ran = list(api._CALLS.values())[-1].plan  # the prepared call this one left
    assert ran is plans[kernels.SM90_TILE_192 if _hopper() and tall else (128, 128)]
    if _hopper():
        assert kernels.forward_plan_pays(plans[(128, 128)], plans[kernels.SM90_TILE_192], D) == tall


def test_backward_refuses_the_192_row_tile(rng):
    dtype = _dtype("bfloat16")
    tile = cuda.tile_for(64, dtype, training=False)
    if tile != kernels.SM90_TILE_192:
        pytest.skip("the 192-row tile is Hopper's (fwd_sm90.cu)")
    x = cp.zeros((1, 2, 256, 64), dtype=dtype)
    lse = cp.zeros((1, 2, 256), dtype=np.float32)
    with pytest.raises(ValueError, match=r"tile \(192, 128\)"):
        cuda.backward(x, x, x, x, x, lse, compile_mask(masks.causal(256), tile=tile), 0.125)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_mma_sync_kernel(family, rng, monkeypatch):
    """Where the wgmma kernel (fwd_sm90.cu) takes head dims 64 and 128 on Hopper, the mma.sync kernel must stay
    right there too: MASKATTN_SM90=0 selects it."""
    monkeypatch.setenv("MASKATTN_SM90", "0")
    _run(FAMILIES[family](rng), rng, "float16", 64)


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("head_dim", cuda.HEAD_DIMS)
@pytest.mark.parametrize("family", ["causal", "dense_random"])
def test_head_dim_dtype(family, head_dim, dtype_name, rng):
    _run(FAMILIES[family](rng), rng, dtype_name, head_dim, B=1)


@pytest.mark.parametrize("family, dtype_name, head_dim, Hk, layout", LAYOUT_CASES)
def test_layout_and_kv_heads(family, dtype_name, head_dim, Hk, layout, rng):
    _run(FAMILIES[family](rng), rng, dtype_name, head_dim, Hk=Hk, layout=layout)


@pytest.mark.parametrize("head_dim, config", [
    (32, (128, 128, 4, 2)), (64, (128, 64, 4, 2)), (96, (128, 64, 4, 2)), (128, (128, 64, 4, 2)),
    (128, (128, 64, 8, 2)), (64, (128, 64, 4, 3)),
])
@pytest.mark.parametrize("family", ["sliding_window_sinks", "dense_random"])
def test_config_variants(family, head_dim, config, rng, monkeypatch):
    """Configurations beside the shipped ones (32-row warps, other tiles) compute the same function."""
    monkeypatch.setitem(kernels.FWD_CONFIGS, head_dim, (config,))
    _run(FAMILIES[family](rng), rng, "bfloat16", head_dim, B=1)


def test_packed_qkv_strides(rng):
    """q, k, v as slices of one packed (B, n, 3, H, D) buffer: row stride 3 H D, head stride D."""
    B, n, H, D = 2, 999, 8, 64
    dtype = _dtype("float16")
    host = rng.standard_normal((B, n, 3, H, D), dtype=np.float32).astype(dtype)
    dev = cp.asarray(host)
    inputs = [(host[:, :, i].transpose(0, 2, 1, 3).astype(np.float64), dev[:, :, i].transpose(0, 2, 1, 3))
              for i in range(3)]
    _run(masks.causal(n), rng, "float16", D, B=B, H=H, Hk=H, layout="bnhd", inputs=inputs)


@pytest.mark.parametrize("family", ["causal", "full"])
def test_single_query(family, rng):
    spec = masks.causal(1, N_K) if family == "causal" else masks.full(1, N_K)
    _run(spec, rng)


def test_nothing_visible(rng):
    """A plan with no entries at all: every row gives out 0 and lse -inf."""
    plan = _run(masks.from_dense(np.zeros((N_Q, N_K), bool)), rng, "float16", 64, B=1)
    assert plan.nnz == 0


def test_allocates_out_and_caches_plan(rng):
    dtype = _dtype("float16")
    spec = masks.causal(300)
    plan = compile_mask(spec, tile=cuda.tile_for(64, dtype))
    q64, q = _make(rng, (1, 4, 300, 64), dtype, "bhnd")
    k64, k = _make(rng, (1, 4, 300, 64), dtype, "bhnd")
    v64, v = _make(rng, (1, 4, 300, 64), dtype, "bhnd")
    out, lse = cuda.forward(q, k, v, plan, 0.125)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (1, 4, 300)
    ref_out, ref_lse = _reference(q64, k64, v64, spec.to_dense(), 0.125)
    _check(out, lse, ref_out, ref_lse, "float16")
    assert cuda.device_plan(plan) is cuda.device_plan(plan)
    arrays = cuda.device_plan(plan)
    for name in PLAN_ARRAYS:  # one buffer, views at their offsets: every array round-trips
        host = getattr(plan, name)
        assert (arrays[name] is None) == (host is None), name
        if host is not None:
            assert np.array_equal(cp.asnumpy(arrays[name]), host), name
    assert arrays["perm"] is None
    graph_plan = compile_mask(masks.longformer(300, 20, dilation=2), tile=cuda.tile_for(64, dtype))
    graph = cuda.device_plan(graph_plan)  # the node order travels after the compiler's buffer, as int32
    assert graph["perm"].dtype == np.int32 and np.array_equal(cp.asnumpy(graph["perm"]), graph_plan.perm)
    assert np.array_equal(cp.asnumpy(graph["col_idx"]), graph_plan.col_idx)


def test_rejects_bad_inputs():
    dtype = _dtype("float16")
    plan = compile_mask(masks.causal(256), tile=cuda.tile_for(64, dtype))
    q = cp.zeros((1, 2, 256, 64), dtype=dtype)
    with pytest.raises(ValueError, match="16-byte"):
        shifted = cp.zeros(2 * 256 * 64 + 4, dtype=dtype)[4:].reshape(1, 2, 256, 64)
        cuda.forward(shifted, q, q, plan, 0.125)
    with pytest.raises(ValueError, match="stride"):
        wide = cp.zeros((1, 2, 256, 68), dtype=dtype)[..., :64]
        cuda.forward(wide, q, q, plan, 0.125)
    with pytest.raises(ValueError, match="contiguous"):
        cuda.forward(cp.zeros((1, 2, 64, 256), dtype=dtype).transpose(0, 1, 3, 2), q, q, plan, 0.125)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        cuda.forward(q.astype(cp.float32), q.astype(cp.float32), q.astype(cp.float32), plan, 0.125)
    with pytest.raises(ValueError, match="tile"):
        cuda.forward(q, q, q, compile_mask(masks.causal(256), tile=(32, 32)), 0.125)
    with pytest.raises(ValueError, match="head_dim is 80"):
        r = cp.zeros((1, 2, 256, 80), dtype=dtype)
        cuda.forward(r, r, r, plan, 0.125)
    with pytest.raises(ValueError, match="plan has shape"):
        cuda.forward(q[:, :, :128], q, q, plan, 0.125)
    with pytest.raises(ValueError, match="scale"):
        cuda.forward(q, q, q, plan, 0.0)
    # plans with a node order gather rows with 32-bit strides (a view, never read: the launch refuses it first)
    graph_plan = compile_mask(masks.longformer(256, 20, dilation=2), tile=cuda.tile_for(64, dtype))
    far = cp.lib.stride_tricks.as_strided(q, (1, 2, 256, 64), (16, 16, 2 ** 31 * q.itemsize, q.itemsize))
    for args in ((far, q, q), (q, far, q)):
        with pytest.raises(ValueError, match="row stride is 2147483648 elements"):
            cuda.forward(*args, graph_plan, 0.125)
    with pytest.raises(ValueError, match="row stride"):
        cuda.backward(q, q, q, q, q, cp.zeros((1, 2, 256), cp.float32), graph_plan, 0.125, dq=far)
