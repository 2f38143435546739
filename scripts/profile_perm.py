"""Cost of the in-kernel graph permutation: graph_rcm at 16k, D=128, bf16 (GPU machine).

Same blocks three ways: the RCM plan (rows gathered through perm), the same order given as an identity perm (the
lookups without the scatter), and no perm (plain strided tiles). Forward and backward kernel time each.
"""
import cupy as cp
import numpy as np

import maskattn
from maskattn import _cuda, _cuda_backward, masks, workloads


def gpu_ms(fn, reps=20):
    fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / reps


n, H, D = 16384, 16, 128
spec = workloads.build("graph_rcm", n)
reordered = spec.reordered()
variants = {"rcm perm": spec, "identity perm": masks.GraphMask(reordered, np.arange(n)),
            "no perm": masks.GraphMask(reordered)}
dtype = "bfloat16"
import ml_dtypes  # noqa: E402
rng = np.random.default_rng(0)
q, k, v, do = (cp.asarray(rng.standard_normal((1, H, n, D), dtype=np.float32).astype(ml_dtypes.bfloat16))
               for _ in range(4))
tile = _cuda.tile_for(D, dtype)
for name, s in variants.items():
    plan = maskattn.compile_mask(s, tile)
    out, lse = _cuda.forward(q, k, v, plan, D ** -0.5)
    fwd = gpu_ms(lambda: _cuda.forward(q, k, v, plan, D ** -0.5))
    bwd = gpu_ms(lambda: _cuda_backward.backward(do, q, k, v, out, lse, plan, D ** -0.5))
    print(f"{name:14s} fwd {fwd:7.3f} ms  bwd {bwd:7.3f} ms")
