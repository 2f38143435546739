"""Why causal's forward costs more per tile than dense's (performance.md, "the causal forward's 13% per tile"):
the same 16k, D = 128, H = 16 bf16 forward over masks that separate the schedule (row lengths 1..128 blocks) from the
kernel (the interval-payload instantiation) and from the diagonal's PARTIAL tiles. Run on the GPU machine:

    python3 docs/bench/next/probe_causal.py [--backward]

full: 16384 FULL tiles, the unmasked kernel. full + 1 partial: the same tiles through the interval kernel (one
element of tile (0, 0) masked). block causal: query block i sees key blocks 0..i whole (8256 FULL tiles, causal's
schedule, the unmasked kernel). block causal + 1 partial: that through the interval kernel. causal: 8128 FULL and 128
PARTIAL tiles. Per-tile time = ms / tiles (the rows' fixed cost is not separated here: compare swa's rows of ~9)."""
import sys

import numpy as np
import torch

import maskattn
from maskattn import masks
from maskattn.bench.common import bench_ms, fwd_bwd_ms

n, H, D, tile = 16384, 16, 128, (128, 128)
j = np.arange(n)


def intervals(ute, first_masked=False):
    """Column j masked in rows [0, ute[j]) (FlashMask's upper interval), and row 0 of column 0 if first_masked."""
    cols = np.stack([np.full(n, n), np.full(n, n), np.zeros(n), ute], axis=-1).astype(np.int32)
    if first_masked:
        cols[0, 2:] = (0, 1)
    return masks.from_intervals(cols[None, None], n_q=n)


specs = {"full": None, "full + 1 partial": intervals(np.zeros(n), True),
         "block causal": intervals(128 * (j // 128)), "block causal + 1 partial": intervals(128 * (j // 128), True),
         "causal": masks.causal(n)}
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(1, H, n, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
do = torch.randn_like(q)
print(torch.cuda.get_device_name())
backward = "--backward" in sys.argv
print("| mask | payload | tiles (partial) | fwd ms | ns per tile per head |" + (" fwd+bwd ms |" if backward else ""))
for name, spec in specs.items():
    plan = maskattn.compile_mask(spec if spec is not None else masks.full(n, n), tile)
    stats = plan.stats(D)
    ms = bench_ms(lambda: maskattn.attention(q, k, v, plan))
    row = (f"| {name} | {plan.payload} | {stats['active_blocks']} ({stats['partial_blocks']}) | {ms:.3f} | "
           f"{ms * 1e6 / stats['active_blocks'] / H:.1f} |")
    if backward:
        row += f" {fwd_bwd_ms(lambda a, b, c: maskattn.torch.attention(a, b, c, plan), q, k, v, do):.3f} |"
    print(row, flush=True)
