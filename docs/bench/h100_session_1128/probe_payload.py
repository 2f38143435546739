"""The same masks with their partial tiles as intervals (the interval kernel) and as bit tiles (from_dense: the bit
kernel, deduplicated), against an all-FULL band of the same tile count; 16k, D = 128, H = 16, bf16, B = 1,
CUDA-event medians of 20 launches (scripts/gpu_timing.py), the plans in turns, three rounds.

    python3 docs/bench/h100_session_1128/probe_payload.py"""
import pathlib
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "scripts"))
from gpu_timing import inputs, median_ms  # noqa: E402

from maskattn import compile_mask, masks  # noqa: E402
from maskattn.backends import cuda  # noqa: E402

n, H, D = 16384, 16, 128
bf16 = np.dtype(ml_dtypes.bfloat16)
i = np.arange(n)[:, None]
j = np.arange(n)[None, :]
block = np.arange(n) // 128
band9 = masks.from_intervals(np.stack([np.minimum(n, 128 * (block + 9)), 128 * block], -1)[None, None].astype(np.int32))
cases = {"window 1023, intervals": masks.sliding_window(n, left=1023),
         "window 1023, bits": masks.from_dense((j <= i) & (i - j <= 1023)),
         "band 9, none": band9,
         "causal, intervals": masks.causal(n),
         "causal, bits": masks.from_dense(j <= i)}
plans = {name: compile_mask(spec, tile=cuda.tile_for(D, bf16)) for name, spec in cases.items()}
q, k, v = inputs(3, (1, H, n, D), bf16, np.random.default_rng(0))
out, _ = cuda.forward(q, k, v, plans["band 9, none"], D ** -0.5)
ref = {}
times = {name: [] for name in plans}
for _ in range(3):
    for name, plan in plans.items():
        times[name].append(median_ms(lambda: cuda.forward(q, k, v, plan, D ** -0.5, out=out)))
        ref.setdefault(name.split(",")[0], out.copy())
        assert float(abs(out.astype(np.float32) - ref[name.split(",")[0]].astype(np.float32)).max()) < 2e-2, name
print("| mask | payload | tiles per head (partial, bit tiles) | ms (3 rounds) |")
print("| --- | --- | --- | --- |")
for name, plan in plans.items():
    s = plan.stats(D)
    print(f"| {name} | {plan.payload} | {s['active_blocks']} ({s['partial_blocks']}, {s['bit_tiles']}) | "
          f"{' / '.join(f'{t:.3f}' for t in times[name])} |")
