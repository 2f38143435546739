import sys
import numpy as np
import cupy as cp
import ml_dtypes
sys.path.insert(0, "tests/gpu")
from maskattn import compile_mask, masks
from maskattn.backends import cuda, reference

def host(x):
    return cp.asnumpy(x.view(cp.uint16)).view(x.dtype).astype(np.float64)

rng = np.random.default_rng(1)
n, D = 1500, 128
spec = masks.causal(n)
for dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
    for case in ("plain", "rows", "channels", "both"):
        vals = [rng.standard_normal((1, h, n, D)) for h in (4, 2, 2, 4)]
        if case in ("channels", "both"):
            vals[1] *= np.where(np.arange(D) % 32 == 5, 20.0, 1.0)
        if case in ("rows", "both"):
            vals[3] *= 10.0 ** rng.uniform(-3, 2, (1, 4, n, 1))
        host_vals = [v.astype(dtype) for v in vals]
        q64, k64, v64, do64 = (v.astype(np.float64) for v in host_vals)
        q, k, v, do = (cp.asarray(v) for v in host_vals)
        plan = compile_mask(spec, tile=cuda.tile_for(D, dtype))
        sc = D ** -0.5
        out64, lse64 = reference.forward(q64, k64, v64, plan, sc)
        dq_ref = reference.backward(do64, q64, k64, v64, out64, lse64, plan, sc)[0]
        out = cp.asarray(out64.astype(dtype)); lse = cp.asarray(lse64.astype(np.float32))
        res = {}
        for det in (True, False):
            dq = host(cuda.backward(do, q, k, v, out, lse, plan, sc, det)[0])
            res[det] = dq
        nr = np.linalg.norm(dq_ref, axis=-1)[..., 1:]
        e = {det: (np.linalg.norm(res[det] - dq_ref, axis=-1)[..., 1:] / nr) for det in res}
        diff = np.linalg.norm(res[True] - res[False], axis=-1)[..., 1:] / nr
        # the bound of each row
        kmax = np.abs(k64).max(axis=(2, 3))  # (1, 2)
        vmax = np.linalg.norm(v64, axis=-1).max(axis=2)
        delta = (do64 * out64.astype(dtype).astype(np.float64)).sum(-1)
        hk = np.arange(4) // 2
        bound = kmax[:, hk, None] * (np.linalg.norm(do64, axis=-1) * vmax[:, hk, None] + np.abs(delta))
        ratio = (bound[..., 1:] / nr)
        w = np.unravel_index(np.argmax(e[True]), e[True].shape)
        print(f"{dtype} {case}: fixed max {e[True].max():.3g} med {np.median(e[True]):.3g} | float max {e[False].max():.3g} "
              f"med {np.median(e[False]):.3g} | fixed-float max {diff.max():.3g} | worst fixed row {w[1:]} "
              f"float there {e[False][w]:.3g} bound/|dq| there {ratio[w]:.3g}, max bound/|dq| {ratio.max():.3g}",
              flush=True)
