"""(m) call 5: D = 192's forward over plans of 64 (the training tile), 96 and 112 keys a step, in turns in one
process (scripts/gpu_timing.py's medians_in_turns; bf16, B = 1, H = 16, 8k). kernels.SM90_FORWARD_TILES[192] is
set to each forward-only tile while its launch is built (the launches are cached with their plans)."""
import sys

import cupy as cp
import ml_dtypes
import numpy as np

sys.path.insert(0, "scripts")
from gpu_timing import inputs, medians_in_turns  # noqa: E402

from maskattn import compile_mask  # noqa: E402
from maskattn.backends import cuda  # noqa: E402
from maskattn.backends.cuda import kernels  # noqa: E402
from maskattn.bench import workloads  # noqa: E402

bf16 = np.dtype(ml_dtypes.bfloat16)
tiles = ((128, 64), (128, 96), (128, 112))
for workload in ("full", "causal"):
    spec = workloads.build(workload, 8192)
    q, k, v = inputs(3, (1, 16, 8192, 192), bf16, np.random.default_rng(0))
    calls = {}
    for tile in tiles:
        if tile != tiles[0]:
            kernels.SM90_FORWARD_TILES[192] = tile
        plan = compile_mask(spec, tile=tile)
        out = cp.empty_like(q)
        cuda.forward(q, k, v, plan, 192 ** -0.5, out=out)
        calls[f"{tile[1]} keys"] = lambda plan=plan, out=out: cuda.forward(q, k, v, plan, 192 ** -0.5, out=out)
    rounds = [medians_in_turns(calls) for _ in range(3)]
    print(workload, " ".join(f"{name}: " + "/".join(f"{r[name]:.3f}" for r in rounds) for name in calls))
    base = np.median([r["64 keys"] for r in rounds])
    print(workload, " ".join(f"{name} / 64: {np.median([r[name] for r in rounds]) / base:.3f}" for name in calls))
