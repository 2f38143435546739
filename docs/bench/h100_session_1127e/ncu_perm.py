"""One forward (or backward) over graph_rcm's plan for Nsight Compute: with its node order (rows gathered through
perm) or over the same mask given in plan order (no perm):

    ncu --clock-control none --profile-from-start off --section SpeedOfLight ... \
        python3 ncu_perm.py {perm|ordered} [D N H] [--backward]
"""
import sys

import cupy as cp
import ml_dtypes
import numpy as np

sys.path.insert(0, "scripts")
from gpu_timing import inputs  # noqa: E402

from maskattn import compile_mask, masks  # noqa: E402
from maskattn.backends import cuda  # noqa: E402
from maskattn.bench import workloads  # noqa: E402

which = sys.argv[1]
d, n, h = (int(x) for x in sys.argv[2:5]) if len(sys.argv) > 4 and sys.argv[2] != "--backward" else (128, 16384, 16)
backward = "--backward" in sys.argv
bf16 = np.dtype(ml_dtypes.bfloat16)
spec = workloads.build("graph_rcm", n)
if which == "ordered":
    spec = masks.from_graph(spec.reordered(), reorder=None)
plan = compile_mask(spec, tile=cuda.tile_for(d, bf16))
q, k, v, do = inputs(4, (1, h, n, d), bf16, np.random.default_rng(0))
out, lse = cuda.forward(q, k, v, plan, d ** -0.5)
call = ((lambda: cuda.backward(do, q, k, v, out, lse, plan, d ** -0.5, False)) if backward
        else (lambda: cuda.forward(q, k, v, plan, d ** -0.5, out=out)))
for _ in range(3):
    call()
cp.cuda.runtime.deviceSynchronize()
cp.cuda.runtime.profilerStart()
call()
cp.cuda.runtime.deviceSynchronize()
cp.cuda.runtime.profilerStop()
