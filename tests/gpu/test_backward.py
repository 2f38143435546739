"""The CUDA backward kernels (maskattn._cuda_bwd.backward) against the float64 reference, on every mask family.

Needs CuPy and a CUDA device; skipped, with the reason shown, without them. Each test draws fresh 16-bit inputs from
a seed of its own, runs the float64 reference forward and backward (``maskattn._reference``) on exact float64
copies of them, hands the GPU backward the reference's out (rounded to the input dtype) and LSE (float32), poisons
dq, dk and dv with NaN so an unwritten element fails, and compares each gradient by relative L2 error. Rows that see
no key and keys that no row of a KV head's query heads sees must get exactly zero gradients. Where the backward
runs the wgmma kernels (bwd_sm90.cu: Hopper, every head dim), every check is made on the mma.sync kernels too
(MASKATTN_SM90=0), on the same inputs.
"""

import numpy as np
import pytest

from families import FAMILIES, LAYOUT_CASES, N_K, N_Q, require_gpu
from families import device_input as _make, dtype_of as _dtype, poisoned as _poisoned

cp = require_gpu()

from maskattn import compile_mask, masks  # noqa: E402
from maskattn.backends import cuda, reference  # noqa: E402
from maskattn.backends.cuda import bwd as cuda_bwd  # noqa: E402

TOL = {"float16": 1e-2, "bfloat16": 2e-2}


# ---------------------------------------------------------------------------------------------------- harness


def _host(x):
    # through uint16: copying a strided 16-bit float view needs no CuPy kernel of that float type
    return cp.asnumpy(x.view(cp.uint16)).view(x.dtype).astype(np.float64)


def _expanded_mask(plan, B, H):
    """The plan's mask as bool (B, H, n_q, n_k)."""
    dense = plan.to_dense()
    return np.broadcast_to(dense, (B, H) + dense.shape[2:])


def _check(got, ref, plan, dtype_name, kernel=""):
    """kernel: the kernels that ran (wgmma or mma.sync), named in the failure messages where both ran."""
    dq, dk, dv = (_host(x) for x in got)
    at = f" ({kernel} kernels)" if kernel else ""
    B, H = dq.shape[:2]
    Hk = dk.shape[1]
    for name, x, r in (("dq", dq, ref[0]), ("dk", dk, ref[1]), ("dv", dv, ref[2])):
        nan = np.isnan(x)
        assert not nan.any(), f"{name}{at}: {nan.sum()} of {x.size} elements are NaN (unwritten?)"
        err = np.linalg.norm(x - r) / max(np.linalg.norm(r), 1e-30)
        assert err <= TOL[dtype_name], f"{name}{at}: relative L2 error {err:.3g} > {TOL[dtype_name]}"
    dense = _expanded_mask(plan, B, H)
    empty_rows = ~dense.any(axis=-1)
    assert np.all(dq[empty_rows] == 0), f"rows that see no key must get dq = 0{at}"
    empty_cols = ~dense.reshape(B, Hk, H // Hk, *dense.shape[2:]).any(axis=(2, 3))
    assert np.all(dk[empty_cols] == 0) and np.all(dv[empty_cols] == 0), f"keys no row sees must get dk = dv = 0{at}"


def _inputs(rng, spec, dtype, head_dim, B, H, Hk, layout):
    B = max(B, spec.shape[0])
    n_q, n_k = spec.shape[2:]
    return [_make(rng, shape, dtype, layout) for shape in
            ((B, H, n_q, head_dim), (B, Hk, n_k, head_dim), (B, Hk, n_k, head_dim), (B, H, n_q, head_dim))]


def _run(spec, rng, dtype_name="bfloat16", head_dim=128, *, B=2, H=8, Hk=2, layout="bhnd", deterministic=True,
         inputs=None):
    """Reference forward and backward in float64, then the GPU backward on the same values; checks and returns
    (plan, device inputs, gpu gradients, reference gradients): both kernel sets where the wgmma one is the default
    (the module docstring), returning the default's gradients."""
    dtype = _dtype(dtype_name)
    plan = compile_mask(spec, tile=cuda.tile_for(head_dim, dtype))
    if inputs is None:
        inputs = _inputs(rng, spec, dtype, head_dim, B, H, Hk, layout)
    (q64, q), (k64, k), (v64, v), (do64, do) = inputs
    scale = head_dim ** -0.5
    out64, lse64 = reference.forward(q64, k64, v64, plan, scale)
    ref = reference.backward(do64, q64, k64, v64, out64, lse64, plan, scale)
    _, out = _make(rng, q.shape, dtype, layout, values=out64)
    lse = cp.asarray(lse64.astype(np.float32))
    wgmma = cuda_bwd.uses_sm90(head_dim, plan.tile, cp.cuda.Device().id)
    # the mma.sync kernels first where the default is the wgmma ones, so that the default's gradients are returned
    for kernel in ("mma.sync", "wgmma") if wgmma else ("",):
        with pytest.MonkeyPatch.context() as env:
            if kernel == "mma.sync":
                env.setenv("MASKATTN_SM90", "0")
            grads = tuple(_poisoned(x.shape, dtype, layout) for x in (q, k, k))
            got = cuda.backward(do, q, k, v, out, lse, plan, scale, deterministic,
                                dq=grads[0], dk=grads[1], dv=grads[2])
            assert all(g is x for g, x in zip(got, grads))
            _check(got, ref, plan, dtype_name, kernel)
    return plan, (do, q, k, v, out, lse), got, ref


# ---------------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("head_dim, deterministic", [(96, True), (128, False), (128, True), (192, False),
                                                     (256, True)])
def test_last_wave_split(head_dim, deterministic, rng):
    """Key blocks whose columns are all of one length, one wave of CTAs and 20 more, no partial tiles: on Hopper the
    one pass splits the last CTAs' columns (tail_splits_for, sm90_splits) and bwd_dkdv_merge_sm90_kernel adds their
    dK and dV pieces up. Against the float64 reference, two query heads a KV head (each piece walks both heads'
    slices), odd n_q; bit-identical across two runs where deterministic."""
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    dtype = _dtype("bfloat16")
    Hk = sms + 20
    spec = masks.full(1000, cuda.tile_for(head_dim, dtype)[1])  # one key block a KV head, 8 query blocks
    plan, (do, q, k, v, out, lse), got, _ = _run(spec, rng, "bfloat16", head_dim, B=1, H=2 * Hk, Hk=Hk,
                                                 deterministic=deterministic)
    scale = head_dim ** -0.5
    launch = cuda_bwd.backward_launch(do, q, k, v, out, lse, plan, scale, *got, deterministic=deterministic)
    assert (launch.tail == 20) == cuda_bwd.uses_sm90(head_dim, plan.tile, q.device.id)
    if deterministic:
        again = cuda.backward(do, q, k, v, out, lse, plan, scale, deterministic)
        for name, a, b in zip(("dq", "dk", "dv"), got, again):
            assert cp.array_equal(a.view(cp.uint16), b.view(cp.uint16)), f"{name} differs between two runs"


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family(family, dtype_name, rng):
    """GQA (8 query heads on 2 KV heads), n_q = 1000, n_k = 1537 where the family allows, head dim 128."""
    _run(FAMILIES[family](rng), rng, dtype_name)


@pytest.mark.parametrize("head_dim, dtype_name, deterministic", [
    (32, "float16", True), (64, "bfloat16", False), (96, "bfloat16", False), (192, "float16", False),
    (256, "bfloat16", False)])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_other_head_dims(family, head_dim, dtype_name, deterministic, rng):
    """Head dims 32 and 96, which the wgmma kernels run at the shared layout of 64 and 128 (columns past the head
    dim computed and not stored, dQ accumulated at the padded width), in fixed point and float32; 64, whose dK/dV
    kernel takes 128-row steps (as 32) with each consumer's dQ over its 64 rows; and 192 and 256, whose dK/dV kernel
    takes 64-key blocks with the consumers splitting the columns (192: in pieces of 64 and 32; 256: dQ staged in the
    step's own tiles). Their deterministic (fixed-point) runs: test_head_dim_dtype, test_head_dim_masks."""
    _run(FAMILIES[family](rng), rng, dtype_name, head_dim, deterministic=deterministic)


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("head_dim", cuda.HEAD_DIMS)
def test_head_dim_dtype(head_dim, dtype_name, rng):
    _run(FAMILIES["causal"](rng), rng, dtype_name, head_dim, B=1)


@pytest.mark.parametrize("family, dtype_name, head_dim", [
    ("dense_random", "float16", 32),
    ("dense_random", "bfloat16", 96),
    ("dense_random", "float16", 192),
    ("dense_random", "bfloat16", 256),
    ("full", "bfloat16", 64),
])
def test_head_dim_masks(family, dtype_name, head_dim, rng):
    _run(FAMILIES[family](rng), rng, dtype_name, head_dim, B=1)


@pytest.mark.parametrize("family, dtype_name, head_dim, Hk, layout",
                         LAYOUT_CASES + [("bigbird", "bfloat16", 256, 2, "bnhd")])
def test_layout_and_kv_heads(family, dtype_name, head_dim, Hk, layout, rng):
    _run(FAMILIES[family](rng), rng, dtype_name, head_dim, Hk=Hk, layout=layout)


@pytest.mark.parametrize("family, dtype_name, head_dim, layout", [
    ("causal", "bfloat16", 128, "bhnd"),
    ("dense_random", "float16", 64, "bnhd"),
    ("intervals_random", "bfloat16", 256, "bnhd"),
    ("document_prefix_padding", "float16", 192, "bhnd"),
    ("medusa_tree", "bfloat16", 32, "bhnd"),
    ("full", "float16", 96, "bnhd"),
    ("graph_rcm", "bfloat16", 128, "bnhd"),
])
def test_atomic_dq(family, dtype_name, head_dim, layout, rng):
    """deterministic=False: dQ through float32 atomics (bulk reductions on Hopper) from the dK/dV kernel."""
    _run(FAMILIES[family](rng), rng, dtype_name, head_dim, layout=layout, deterministic=False)


def _full_blocks_random(rng, heads=8, n_q=N_Q, n_k=N_K):
    """Per head: 128 x 128 regions empty or full, no partial tile: runs of consecutive query blocks of every length
    in a key block's column, and gaps between them."""
    regions = rng.random((heads, -(-n_q // 128), -(-n_k // 128))) < 0.6
    return masks.from_dense(np.repeat(np.repeat(regions, 128, axis=1), 128, axis=2)[None, :, :n_q, :n_k])


RUNS_FAMILIES = {
    "full_blocks_random": _full_blocks_random,
    "documents_of_whole_blocks": lambda rng: masks.document([256, 128, 384, 232], causal=False),
}


@pytest.mark.parametrize("family, dtype_name, Hk, layout, head_dim", [
    ("full", "float16", 8, "bnhd", 128), ("full_blocks_random", "bfloat16", 2, "bhnd", 128),
    ("full_blocks_random", "float16", 1, "bnhd", 128), ("documents_of_whole_blocks", "bfloat16", 2, "bhnd", 128),
    ("full", "bfloat16", 8, "bhnd", 96), ("full_blocks_random", "float16", 2, "bnhd", 96),
    ("documents_of_whole_blocks", "float16", 1, "bhnd", 96)]
    + [(family, dtype_name, 2, "bhnd", 128) for family in sorted(FAMILIES) for dtype_name in ("float16", "bfloat16")])
def test_runs_of_query_blocks(family, dtype_name, Hk, layout, head_dim, rng):
    """deterministic=False at head dim 128: on Hopper, plans without bit tiles or node order take bwd_sm90.cu's 80-row
    steps over runs of consecutive query blocks (RUNS), a step running on into the next block of a run and cut where
    the run ends (n_q = 1000: the last block's padding rows too), partial where one of its blocks is, dQ computed
    transposed; the families with bit tiles or a node order take the 64-row steps. At head dim 96 only plans without
    partial tiles take them (dQ^T over the tiles' padded 128 columns)."""
    _run({**FAMILIES, **RUNS_FAMILIES}[family](rng), rng, dtype_name, head_dim, Hk=Hk, layout=layout,
         deterministic=False)


@pytest.mark.parametrize("family, dtype_name, head_dim", [
    ("causal", "bfloat16", 128), ("dense_random", "float16", 64), ("causal", "float16", 192)])
def test_deterministic_is_bit_identical(family, dtype_name, head_dim, rng):
    plan, args, first, _ = _run(FAMILIES[family](rng), rng, dtype_name, head_dim)
    first = [x.view(cp.uint16).copy() for x in first]
    again = cuda.backward(*args, plan, head_dim ** -0.5)
    for name, a, b in zip(("dq", "dk", "dv"), first, again):
        assert cp.array_equal(a, b.view(cp.uint16)), f"{name} differs between two runs"


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_fixed_point_dq_is_as_exact_as_float32(dtype_name, rng):
    """The deterministic one pass sums dQ in fixed point, each row at its own scale (bwd_common.cuh's
    dq_fixed_exponent). With rows of dO from 1e-3 to 1e2 in size and K with four channels 20 times the others, each
    row of its dq must lie within a quarter of the float32 path's own error (against the float64 reference) of that
    path's dq, plus two units of the dtype's rounding. Rows whose dq cancels to far below the bound have large errors
    on both paths, from dS rounded to 16 bits, and there the fixed point's 2^-29 of the bound shows: 0.17 of the
    float32 path's error at worst on the H100 (float16), against 1e-3 to 1e-2 on ordinary rows. A scale shared by all
    rows would lose the small rows here. The first row is left out: its only key makes its dq exactly 0 (dP = dO . V_0
    = delta)."""
    dtype = _dtype(dtype_name)
    n, head_dim = 1500, 128
    spec = masks.causal(n)
    values = [rng.standard_normal((1, h, n, head_dim)) for h in (4, 2, 2, 4)]
    values[1] *= np.where(np.arange(head_dim) % 32 == 5, 20.0, 1.0)
    values[3] *= 10.0 ** rng.uniform(-3, 2, (1, 4, n, 1))
    inputs = [_make(rng, x.shape, dtype, "bhnd", values=x) for x in values]
    plan, args, (fixed, _, _), (ref, _, _) = _run(spec, rng, dtype_name, head_dim, B=1, H=4, Hk=2, inputs=inputs)
    floats = cuda.backward(*args, plan, head_dim ** -0.5, False)[0]
    ref = ref[:, :, 1:]
    fixed, floats = (_host(x)[:, :, 1:] for x in (fixed, floats))
    unit = 2.0 ** (-11 if dtype_name == "float16" else -8)
    norm = np.linalg.norm(ref, axis=-1)
    apart = np.linalg.norm(fixed - floats, axis=-1)
    allowed = 0.25 * np.linalg.norm(floats - ref, axis=-1) + 2 * unit * norm
    worst = np.argmax(apart / allowed)
    assert np.all(apart <= allowed), (f"{np.sum(apart > allowed)} rows apart by more than allowed; worst "
                                      f"{apart.flat[worst] / norm.flat[worst]:.3g} of its norm, allowed "
                                      f"{allowed.flat[worst] / norm.flat[worst]:.3g}")


def test_after_gpu_forward(rng):
    """The GPU forward's out and LSE feed the backward directly."""
    dtype = _dtype("bfloat16")
    spec = FAMILIES["document_prefix_padding"](rng)
    plan = compile_mask(spec, tile=cuda.tile_for(128, dtype))
    (q64, q), (k64, k), (v64, v), (do64, do) = _inputs(rng, spec, dtype, 128, 2, 8, 2, "bhnd")
    out, lse = cuda.forward(q, k, v, plan, 128 ** -0.5)
    got = cuda.backward(do, q, k, v, out, lse, plan, 128 ** -0.5)
    out64, lse64 = reference.forward(q64, k64, v64, plan, 128 ** -0.5)
    ref = reference.backward(do64, q64, k64, v64, out64, lse64, plan, 128 ** -0.5)
    _check(got, ref, plan, "bfloat16")


def test_packed_qkv_strides(rng):
    """q, k, v as slices of one packed (B, n, 3, H, D) buffer: row stride 3 H D, head stride D."""
    B, n, H, D = 2, 999, 8, 64
    dtype = _dtype("float16")
    host = rng.standard_normal((B, n, 3, H, D), dtype=np.float32).astype(dtype)
    dev = cp.asarray(host)
    inputs = [(host[:, :, i].transpose(0, 2, 1, 3).astype(np.float64), dev[:, :, i].transpose(0, 2, 1, 3))
              for i in range(3)]
    inputs.append(_make(rng, (B, H, n, D), dtype, "bnhd"))
    _run(masks.causal(n), rng, "float16", D, B=B, H=H, Hk=H, layout="bnhd", inputs=inputs)


@pytest.mark.parametrize("family", ["causal", "full"])
def test_single_query(family, rng):
    spec = masks.causal(1, N_K) if family == "causal" else masks.full(1, N_K)
    _run(spec, rng)


def test_nothing_visible(rng):
    """A plan with no entries: every gradient is exactly 0."""
    plan, _, got, _ = _run(masks.from_dense(np.zeros((N_Q, N_K), bool)), rng, "float16", 64, B=1)
    assert plan.nnz == 0
    assert all(not cp.any(x.view(cp.uint16)) for x in got)


def test_rejects_bad_inputs():
    dtype = _dtype("float16")
    plan = compile_mask(masks.causal(256), tile=cuda.tile_for(64, dtype))
    q = cp.zeros((1, 2, 256, 64), dtype=dtype)
    lse = cp.zeros((1, 2, 256), dtype=cp.float32)
    with pytest.raises(TypeError, match="lse must be a float32"):
        cuda.backward(q, q, q, q, q, lse.astype(cp.float64), plan, 0.125)
    with pytest.raises(TypeError, match="lse must be a float32"):
        cuda.backward(q, q, q, q, q, lse[:, :1], plan, 0.125)
    with pytest.raises(ValueError, match="do and out"):
        cuda.backward(q[:, :1], q, q, q, q, lse, plan, 0.125)
    with pytest.raises(ValueError, match="16-byte"):
        shifted = cp.zeros(2 * 256 * 64 + 4, dtype=dtype)[4:].reshape(1, 2, 256, 64)
        cuda.backward(shifted, q, q, q, q, lse, plan, 0.125)
    with pytest.raises(ValueError, match="tile"):
        cuda.backward(q, q, q, q, q, lse, compile_mask(masks.causal(256), tile=(64, 64)), 0.125)
    with pytest.raises(ValueError, match="dk has shape"):
        cuda.backward(q, q, q, q, q, lse, plan, 0.125, dk=q[:, :, :128])
    with pytest.raises(ValueError, match="scale"):
        cuda.backward(q, q, q, q, q, lse, plan, -1.0)
