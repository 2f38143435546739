"""Mask families, dtypes and seeds shared by the GPU kernel tests (forward and backward)."""

import numpy as np
import pytest

from maskattn import masks

N_Q, N_K = 1000, 1537


def require_gpu():
    """CuPy with a CUDA device; otherwise the calling test module is skipped, with the reason shown."""
    cp = pytest.importorskip("cupy", reason="the GPU tests need CuPy")
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except cp.cuda.runtime.CUDARuntimeError:
        count = 0
    if count == 0:
        pytest.skip("the GPU tests need a CUDA device", allow_module_level=True)
    return cp


def device_input(rng, shape, dtype, layout, values=None):
    """A 16-bit (B, heads, n, D) input as a logical bhnd device view, and the float64 copy of its values."""
    import cupy as cp

    host = (rng.standard_normal(shape, dtype=np.float32) if values is None else values).astype(dtype)
    if layout == "bnhd":
        dev = cp.asarray(np.ascontiguousarray(host.transpose(0, 2, 1, 3))).transpose(0, 2, 1, 3)
    else:
        dev = cp.asarray(host)
    return host.astype(np.float64), dev


def poisoned(shape, dtype, layout):
    """A NaN-filled output (0x7fff is NaN in float16 and bfloat16) in the layout's memory order."""
    import cupy as cp

    B, H, n, D = shape
    phys = (B, n, H, D) if layout == "bnhd" else shape
    out = cp.full(phys, 0x7FFF, dtype=cp.uint16).view(dtype)
    return out.transpose(0, 2, 1, 3) if layout == "bnhd" else out


FWD_TOL = {"float16": 5e-3, "bfloat16": 1e-2}
LSE_TOL = 1e-3


def reference_forward(q, k, v, dense, scale):
    """float64 softmax attention; rows that see no key give out 0, lse -inf."""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.where(dense, np.matmul(q, k.transpose(0, 1, 3, 2)) * scale, -np.inf)
    top = s.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    p = np.exp(s - top)
    total = p.sum(axis=-1, keepdims=True)
    seen = total > 0
    out = np.matmul(p, v) / np.where(seen, total, 1.0)
    lse = np.where(seen, np.log(np.where(seen, total, 1.0)) + top, -np.inf)[..., 0]
    return out, lse


def check_forward(out_dev, lse_dev, ref_out, ref_lse, dtype_name):
    import cupy as cp

    # through uint16: copying a strided 16-bit float view needs no CuPy kernel of that float type
    out = cp.asnumpy(out_dev.view(cp.uint16)).view(out_dev.dtype).astype(np.float64)
    lse = cp.asnumpy(lse_dev).astype(np.float64)
    assert lse_dev.dtype == np.float32 and lse.shape == ref_lse.shape
    nan = np.isnan(out)
    assert not nan.any(), f"{nan.sum()} of {out.size} output elements are NaN (unwritten?)"
    assert not np.isnan(lse).any(), f"{np.isnan(lse).sum()} LSE entries are NaN"
    err = np.linalg.norm(out - ref_out) / max(np.linalg.norm(ref_out), 1e-30)
    assert err <= FWD_TOL[dtype_name], f"relative L2 error {err:.3g} > {FWD_TOL[dtype_name]}"
    empty = np.isneginf(ref_lse)
    assert np.array_equal(np.isneginf(lse), empty), (
        f"LSE -inf at {np.isneginf(lse).sum()} rows; the reference has {empty.sum()} rows that see no key")
    assert np.all(out[empty] == 0), "rows that see no key must give 0"
    if (~empty).any():
        lse_err = np.abs(lse[~empty] - ref_lse[~empty]).max()
        assert lse_err <= LSE_TOL, f"LSE error {lse_err:.3g} > {LSE_TOL}"


def dtype_of(name):
    if name == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(np.float16)


def _tree():
    """A Medusa-style tree of 72 nodes (8 heads, 36 pairs, 27 triples) under the root."""
    return ([[i] for i in range(8)] + [[i, j] for i in range(6) for j in range(6)]
            + [[i, j, k] for i in range(3) for j in range(3) for k in range(3)])


def _dense_random(rng, heads=8, n_q=N_Q, n_k=N_K):
    """Per head: 128 x 128 regions empty, full or half random, plus 20 rows and 20 columns that see nothing."""
    regions = rng.choice(3, size=(heads, -(-n_q // 128), -(-n_k // 128)), p=[0.4, 0.3, 0.3])
    region = np.repeat(np.repeat(regions, 128, axis=1), 128, axis=2)[:, :n_q, :n_k]
    mask = (region == 1) | ((region == 2) & (rng.random((heads, n_q, n_k)) < 0.5))
    mask[:, rng.choice(n_q, 20, replace=False)] = False
    mask[:, :, rng.choice(n_k, 20, replace=False)] = False
    return masks.from_dense(mask[None])


def _intervals_random(rng, heads=8, n_q=N_Q, n_k=N_K):
    """FlashMask (LTS, LTE, UTS, UTE) drawn per head and column."""
    lts = rng.integers(0, n_q + 1, (1, heads, n_k))
    lte = np.minimum(n_q, lts + rng.integers(0, n_q // 2, lts.shape))
    uts = rng.integers(0, n_q + 1, lts.shape)
    ute = np.minimum(n_q, uts + rng.integers(0, n_q // 4, lts.shape))
    return masks.from_intervals(np.stack([lts, lte, uts, ute], axis=-1).astype(np.int32), n_q=n_q)


def graph_rcm(rng, n=N_Q):
    """A random geometric graph (about 20 neighbours a node) in random node order, compiled in its RCM order: the
    kernels gather and scatter rows through the plan's perm."""
    pts = rng.random((n, 2))
    adj = np.linalg.norm(pts[:, None] - pts[None], axis=-1) < 0.08
    spec = masks.from_graph(adj, reorder="rcm")
    assert spec.perm is not None
    return spec


FAMILIES = {
    "full": lambda rng: masks.full(N_Q, N_K),
    "causal": lambda rng: masks.causal(N_Q, N_K),
    "sliding_window_sinks": lambda rng: masks.sliding_window(N_Q, N_K, left=256, sinks=4),
    "document_prefix_padding": lambda rng: masks.document([[300, 257, 333], [520, 411]],
                                                          prefix=[[10, 0, 50], [0, 100]], n=N_Q),
    "shared_question": lambda rng: masks.shared_question(200, [150, 301, 250], n=1001),
    "interleaved": lambda rng: masks.interleaved([("text", 100), ("image", 256), ("text", 300), ("image", 200),
                                                  ("text", 143)]),
    "longformer": lambda rng: masks.longformer(N_Q, 64, global_tokens=8),
    "longformer_dilated": lambda rng: masks.longformer(N_Q, 64, global_tokens=8, dilation=2),
    "bigbird": lambda rng: masks.bigbird(N_Q, 64, window_blocks=3, global_blocks=1, random_blocks=2, seed=1),
    "medusa_tree": lambda rng: masks.medusa_tree(_tree(), prefix_len=1400),
    "dense_random": _dense_random,
    "intervals_random": _intervals_random,
    "graph_rcm": graph_rcm,
}

# (family, dtype, head dim, KV heads, layout): the GQA / MQA / MHA and layout cases both kernels' tests run
LAYOUT_CASES = [
    ("causal", "bfloat16", 128, 2, "bnhd"),
    ("document_prefix_padding", "float16", 64, 2, "bnhd"),
    ("longformer_dilated", "float16", 64, 8, "bnhd"),
    ("sliding_window_sinks", "bfloat16", 128, 1, "bhnd"),
    ("intervals_random", "float16", 96, 1, "bnhd"),
    ("graph_rcm", "bfloat16", 128, 1, "bnhd"),
    ("graph_rcm", "float16", 256, 2, "bnhd"),
    ("document_prefix_padding", "bfloat16", 192, 8, "bnhd"),
]
