"""A small run of every kernel family, for compute-sanitizer (memcheck, racecheck):

    compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/sanitize.py
    compute-sanitizer --tool racecheck --error-exitcode 1 python3 scripts/sanitize.py ["head dim 256"]

(an argument: only the attention cases whose name holds it, then the decode and dense-plan runs)

Forward and backward with no mask, interval masks and bit masks (odd lengths, GQA, both dtypes across the runs; on
Hopper every head dim takes the wgmma forward and the one-pass wgmma backward (32 and 96 at the layouts of 64 and
128, 192 and 256 on 128 x 64 tiles): with its fixed-point dQ and the K and V bound before it where deterministic,
with float32 dQ in the atomic cases; the case marked mma.sync the mma.sync dK/dV kernel with atomic dQ,
MASKATTN_SM90=0); the one pass with its last wave split;
plans in an order of their own, of intervals and of bits (rows gathered through perm: the wgmma producers' row
tables, the mma.sync kernels' lookups); the decode forward (GQA packing, the 16 x 128 tile whose warps split the
keys, split-KV and the combine kernel, also on the training tile and for a tail of the CTAs alone; per-sample key
bounds, cache_seqlens, also on the training tile); forward-only plans at the larger tiles (none, intervals, bits, perm,
splits, key bounds); and the plans of dense masks built on the GPU (gpu/dense_plan.cu), strided and broadcast ones
included.
"""

import os
import sys

import cupy as cp
import ml_dtypes
import numpy as np

import maskattn
from maskattn import masks
from maskattn.backends import cuda

rng = np.random.default_rng(0)
n_q, n_k = 200, 333
dilated = masks.longformer(n_q, 20, global_tokens=3, dilation=2)  # intervals in residue order, with perm
graph = masks.from_graph(rng.random((n_q, n_q)) < 0.05, reorder="rcm")  # bits in RCM order, with perm
cases = [
    ("none", None, np.float16, 64),
    ("intervals", masks.causal(n_q, n_k), np.dtype(ml_dtypes.bfloat16), 64),
    ("bits", masks.from_dense(rng.random((n_q, n_k)) < 0.3), np.float16, 128),
    ("intervals, head dim 96", masks.causal(n_q, n_k), np.float16, 96),
    ("bits, head dim 32", masks.from_dense(rng.random((n_q, n_k)) < 0.3), np.dtype(ml_dtypes.bfloat16), 32),
    ("bits, one pass (atomic dQ)", masks.from_dense(rng.random((n_q, n_k)) < 0.3), np.dtype(ml_dtypes.bfloat16), 128),
    ("intervals, head dim 96, one pass (atomic dQ)", masks.causal(n_q, n_k), np.float16, 96),
    ("intervals, atomic dQ (mma.sync)", masks.causal(n_q, n_k), np.float16, 128),
    ("intervals, head dim 192, one pass (atomic dQ)", masks.causal(n_q, n_k), np.float16, 192),
    ("bits, head dim 256, one pass (atomic dQ)", masks.from_dense(rng.random((n_q, n_k)) < 0.3),
     np.dtype(ml_dtypes.bfloat16), 256),
    ("none, one pass (atomic dQ)", None, np.dtype(ml_dtypes.bfloat16), 64),
    ("bits, head dim 64, one pass (atomic dQ)", masks.from_dense(rng.random((n_q, n_k)) < 0.3), np.float16, 64),
    ("perm, bits, head dim 32, one pass (atomic dQ)", graph, np.dtype(ml_dtypes.bfloat16), 32),
    ("perm, intervals", dilated, np.dtype(ml_dtypes.bfloat16), 128),
    ("perm, intervals, head dim 96", dilated, np.float16, 96),
    ("perm, intervals, atomic dQ", dilated, np.float16, 64),
    ("perm, bits", graph, np.dtype(ml_dtypes.bfloat16), 128),
    ("bits, head dim 256", masks.from_dense(rng.random((n_q, n_k)) < 0.3), np.dtype(ml_dtypes.bfloat16), 256),
    ("intervals, head dim 192", masks.causal(n_q, n_k), np.float16, 192),
    ("perm, bits, head dim 256", graph, np.float16, 256),
    ("perm, bits, head dim 256, one pass (atomic dQ)", graph, np.dtype(ml_dtypes.bfloat16), 256),
    # no bit tiles at head dim 128: the one pass's 80-row steps over runs of query blocks (bwd_sm90.cu's RUNS)
    ("intervals, head dim 128, one pass (atomic dQ), 80-row runs", masks.causal(n_q, n_k), np.float16, 128),
    ("none, head dim 128, one pass (atomic dQ), 80-row runs", None, np.dtype(ml_dtypes.bfloat16), 128),
    ("none, head dim 96, one pass (atomic dQ), 80-row runs", None, np.float16, 96),
    ("documents of whole blocks, one pass (atomic dQ), 80-row runs", masks.document([128, 72], causal=False),
     np.float16, 128),
]
only = sys.argv[1] if len(sys.argv) > 1 else ""  # run only the cases whose name holds this text (and the rest below)
for name, spec, dtype, D in cases:
    if only not in name:
        continue
    os.environ["MASKATTN_SM90"] = "0" if "mma.sync" in name else "1"
    q = cp.asarray(rng.standard_normal((1, 4, n_q if spec is None else spec.n_q, D)).astype(dtype))
    n = spec.n_k if spec is not None else n_k
    k, v = (cp.asarray(rng.standard_normal((1, 2, n, D)).astype(dtype)) for _ in range(2))
    out, lse = maskattn.attention(q, k, v, spec, return_lse=True)
    dq, dk, dv = maskattn.attention_backward(cp.ones_like(out), q, k, v, out, lse, spec,
                                             deterministic="atomic" not in name)
    if spec is dilated:
        maskattn.attention(q, k, v, spec, num_splits=3)  # split-KV: the combine kernel scatters through perm
    cp.cuda.Device().synchronize()
    print(name, "forward and backward ran")
os.environ.pop("MASKATTN_SM90", None)  # none set where the filter matched no case
# the one pass's last wave split (bwd.py's tail_splits_for: a wave of key blocks and 20 more) and the merge of the
# split CTAs' dK and dV, in both dQ modes
hk = cp.cuda.Device().attributes["MultiProcessorCount"] + 20
q, k, v = (cp.asarray(rng.standard_normal((1, hk, n, 128)).astype(np.float16)) for n in (2048, 128, 128))
tall = masks.full(2048, 128)
out, lse = maskattn.attention(q, k, v, tall, return_lse=True)
for deterministic in (True, False):
    maskattn.attention_backward(cp.ones_like(out), q, k, v, out, lse, tall, deterministic=deterministic)
cp.cuda.Device().synchronize()
print("last wave split backward ran")
# forward-only plans at Hopper's larger tiles (fwd_sm90.cu: 192 rows, three consumers, at D <= 64, 192 x 112 at
# D = 96, 128 x 112 at D = 192, 128 x 80 at D = 256, 128 x 176 at D = 128): no mask, intervals, bits, both with a
# node order; split-KV and per-sample key bounds
bf16 = np.dtype(ml_dtypes.bfloat16)
for spec, dtype, D in ((masks.full(n_q, n_k), np.float16, 64), (masks.causal(n_q, n_k), bf16, 64),
                       (masks.from_dense(rng.random((n_q, n_k)) < 0.3), np.float16, 32), (dilated, bf16, 64),
                       (graph, np.float16, 64), (masks.causal(n_q, n_k), bf16, 192), (graph, np.float16, 96),
                       (masks.from_dense(rng.random((n_q, n_k)) < 0.3), bf16, 96),
                       (masks.from_dense(rng.random((n_q, n_k)) < 0.3), np.float16, 192), (graph, bf16, 192),
                       (masks.causal(n_q, n_k), bf16, 256), (masks.full(n_q, n_k), np.float16, 256),
                       (masks.full(n_q, n_k), bf16, 128)):
    plan = maskattn.compile_mask(spec, tile=cuda.tile_for(D, dtype, training=False))
    q = cp.asarray(rng.standard_normal((2, 4, spec.n_q, D)).astype(dtype))
    k, v = (cp.asarray(rng.standard_normal((2, 2, spec.n_k, D)).astype(dtype)) for _ in range(2))
    for splits in (None, 3):
        maskattn.attention(q, k, v, plan, num_splits=splits)
    if plan.perm is None:
        maskattn.attention(q, k, v, plan, cache_seqlens=cp.asarray([spec.n_k - 50, 7], dtype=np.int32))
    cp.cuda.Device().synchronize()
    print(f"{plan.tile} tile, {plan.payload}{', perm' if plan.perm is not None else ''}: forward ran")
q = cp.asarray(rng.standard_normal((2, 8, 3, 64)).astype(np.float16))
k, v = (cp.asarray(rng.standard_normal((2, 2, n_k, 64)).astype(np.float16)) for _ in range(2))
lens = cp.asarray([n_k - 200, 0], dtype=np.int32)  # cache_seqlens: keys past each bound are neither read nor seen
for splits in (None, 1, 5):
    maskattn.attention(q, k, v, masks.kv_cache(3, [n_k, 100], n_k=n_k), num_splits=splits)
    maskattn.attention(q, k, v, masks.from_dense(rng.random((3, n_k)) < 0.5), num_splits=splits)
    maskattn.attention(q[:, :, :1], k, v, num_splits=splits, cache_seqlens=lens)
q = cp.asarray(rng.standard_normal((2, 8, 20, 128)).astype(np.float16))  # GQA packing onto the training tile (80 rows)
k, v = (cp.asarray(rng.standard_normal((2, 2, n_k, 128)).astype(np.float16)) for _ in range(2))
maskattn.attention(q, k, v, masks.kv_cache(20, [n_k, 100], n_k=n_k))
for D in (64, 96, 256):  # split-KV on the training tile: the wgmma forward on Hopper
    q = cp.asarray(rng.standard_normal((1, 2, 150, D)).astype(np.float16))
    k, v = (cp.asarray(rng.standard_normal((1, 2, 700, D)).astype(np.float16)) for _ in range(2))
    maskattn.attention(q, k, v, masks.causal(150, 700), num_splits=3)
    maskattn.attention(q, k, v, masks.causal(150, 700), cache_seqlens=cp.asarray([500], dtype=np.int32))
    for sm90 in ("1", "0"):  # a tail of split CTAs (the last wave's split, fwd.py's tail_splits_for), both kernels
        os.environ["MASKATTN_SM90"] = sm90
        cuda.forward(q, k, v, maskattn.compile_mask(masks.causal(150, 700), tile=cuda.tile_for(D, np.float16)),
                     D ** -0.5, num_splits=3, split_from=2)
    os.environ.pop("MASKATTN_SM90")
cp.cuda.Device().synchronize()
print("decode forward ran")
square = cp.asarray(rng.random((2, 1, 150, 170)) < 0.2)
for mask in (square, square[:, :, 1:, 3:], cp.broadcast_to(square[:, :, :1], square.shape)):
    plan = maskattn.compile_mask(masks.from_dense(mask), (64, 48))
    cp.cuda.Device().synchronize()
    print("dense plan ran:", plan.nnz, "tiles")
