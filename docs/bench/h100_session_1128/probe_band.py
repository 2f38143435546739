"""Where a short row's time goes: sliding windows (every row's first and last tile PARTIAL) against block bands of
the same tile counts (every tile FULL), the latter also with one PARTIAL tile in the whole plan, so that they run the
interval kernel. 16k, D = 128, H = 16, bf16, B = 1; CUDA-event medians of 20 launches (scripts/gpu_timing.py), the
masks in turns, three rounds. Run from the project root on the GPU machine:

    python3 docs/bench/h100_session_1128/probe_band.py ["window 1023,band 9 + 1 partial"]

Reading: band + 1 partial against band is the interval kernel's price on FULL tiles; the window against band + 1
partial is the price of its PARTIAL tiles (two per row)."""
import json
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


def band(blocks, one_partial):
    """Key block j seen by query blocks j .. j + blocks - 1 entirely (FlashMask columns: rows >= LTS and rows < UTE
    masked); with one_partial, row 0 does not see key 0, so that tile (0, 0) alone is PARTIAL."""
    block = np.arange(n) // 128
    lts = np.minimum(n, 128 * (block + blocks))
    ute = 128 * block
    if one_partial:
        ute[0] = 1
    return masks.from_intervals(np.stack([lts, ute], axis=-1)[None, None].astype(np.int32))


ONLY = sys.argv[1].split(",") if len(sys.argv) > 1 else None  # a comma-separated subset of the masks below
cases = {"window 127": masks.sliding_window(n, left=127), "band 2": band(2, False), "band 2 + 1 partial": band(2, True),
         "window 1023": masks.sliding_window(n, left=1023), "band 9": band(9, False),
         "band 9 + 1 partial": band(9, True), "full": masks.full(n)}
plans = {name: compile_mask(spec, tile=cuda.tile_for(D, bf16)) for name, spec in cases.items()
         if ONLY is None or name in ONLY or name == "full"}
q, k, v = inputs(3, (1, H, n, D), bf16, np.random.default_rng(0))
out, _ = cuda.forward(q, k, v, plans["full"], D ** -0.5)
times = {name: [] for name in plans}
for _ in range(3):
    for name, plan in plans.items():
        times[name].append(median_ms(lambda: cuda.forward(q, k, v, plan, D ** -0.5, out=out)))
print("| mask | payload | tiles per head (partial) | ms (3 rounds) | us of SM time per CTA |")
print("| --- | --- | --- | --- | --- |")
for name, plan in plans.items():
    s = plan.stats(D)
    ms = float(np.median(times[name]))
    print(f"| {name} | {plan.payload} | {s['active_blocks']} ({s['partial_blocks']}) | "
          f"{' / '.join(f'{t:.3f}' for t in times[name])} | {ms * 1e3 * 132 / (H * n / 128):.2f} |")
print(json.dumps({name: float(np.median(t)) for name, t in times.items()}))
