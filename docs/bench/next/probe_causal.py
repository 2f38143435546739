"""Where causal's forward loses to FlashAttention-4's (1.10x at D = 64, 8k, H = 32 on 192 x 128 tiles; 1.04-1.05x at
D = 128, 16k, H = 16; performance.md (q)): the diagonal's PARTIAL tiles, or the schedule? In turns in one process
(scripts/gpu_timing.py's medians_in_turns), bf16, B = 1, through cuda.forward at the given tile:

    python3 docs/bench/next/probe_causal.py --head-dim 64 --n 8192 --heads 32 --tile 192x128 [--rounds 3]

- causal: the tiles of the diagonal PARTIAL (interval payloads), the rest FULL.
- block causal: the same tiles, every one FULL (query block i sees whole key blocks up to the last one causal's
  row block i reaches): causal's schedule and work without masks, through the unmasked kernel.
- block causal + 1 partial: that through the interval kernel (one element of tile (0, 0) masked), so that the
  kernel's instantiation is separated from the partial tiles' mask work.
- full: the dense rows, for the cost per tile.
At D = 128 (16k, 128 x 128) causal read what its tile count says in turns (h100_session_1127b); at D = 64, 8k,
192 x 128 about two of a row block's tiles are PARTIAL (85 of 1429 a head, 6%, against 128 of 8256 at D = 128's
16k), and a D = 64 tile's exponentials and masks weigh twice as much against its products. If causal reads more
than 1.03x block causal here, a causal-specific mask (one comparison a score against the diagonal, as
FlashAttention-4's, where a partial tile's intervals are one lower triangle) is the lead; if not, the schedule (FA4:
SingleTileLPTScheduler) is."""
import argparse
import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "scripts"))
from gpu_timing import inputs, medians_in_turns  # noqa: E402

import cupy as cp  # noqa: E402

from maskattn import compile_mask, masks  # noqa: E402
from maskattn.backends import cuda  # noqa: E402


def block_causal(n, tile, first_masked=False):
    """Column j masked in rows [0, ute[j]) (FlashMask's upper interval): key block kb is first seen by the row block
    whose rows reach past its first key; row 0 of column 0 also masked if first_masked."""
    tm, tn = tile
    ute = (np.arange(n) // tn * tn // tm) * tm
    cols = np.stack([np.full(n, n), np.full(n, n), np.zeros(n, np.int64), ute], axis=-1).astype(np.int32)
    if first_masked:
        cols[0, 2:] = (0, 1)
    return masks.from_intervals(cols[None, None], n_q=n)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--tile", default="192x128")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n, D, tile = args.n, args.head_dim, tuple(int(x) for x in args.tile.split("x"))
    specs = {"full": masks.full(n, n), "causal": masks.causal(n), "block causal": block_causal(n, tile),
             "block causal + 1 partial": block_causal(n, tile, first_masked=True)}
    q, k, v = inputs(3, (1, args.heads, n, D), np.dtype(ml_dtypes.bfloat16), np.random.default_rng(0))
    calls, tiles = {}, {}
    for name, spec in specs.items():
        plan = compile_mask(spec, tile=tile)
        stats = plan.stats(D)
        tiles[name] = (stats["active_blocks"], stats["partial_blocks"], plan.payload)
        out = cp.empty_like(q)
        calls[name] = lambda plan=plan, out=out: cuda.forward(q, k, v, plan, D ** -0.5, out=out)
        calls[name]()
    rounds = [medians_in_turns(calls) for _ in range(args.rounds)]
    print(f"| {n // 1024}k, D={D}, H={args.heads}, {tile[0]} x {tile[1]} | payload | tiles (partial) | ms by round "
          "| median | ns per tile per head | over block causal |")
    print("| --- " * 7 + "|")
    base = float(np.median([r["block causal"] for r in rounds]))
    for name in specs:
        ms = float(np.median([r[name] for r in rounds]))
        active, partial, payload = tiles[name]
        print(f"| {name} | {payload} | {active} ({partial}) | " + " / ".join(f"{r[name]:.3f}" for r in rounds)
              + f" | {ms:.3f} | {ms * 1e6 / active / args.heads:.1f} | {ms / base:.3f} |", flush=True)


if __name__ == "__main__":
    main()
