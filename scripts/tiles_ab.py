"""The forward over one mask's plans at several tiles, in turns in one process (scripts/gpu_timing.py's
medians_in_turns): the way to weigh a forward-only tile against the training tile, which scripts/kernel_ab.py cannot
(it times kernel-source folders over one plan per case).

    python3 scripts/tiles_ab.py --head-dim 192 --tiles 128x64 128x96 128x112 [--workloads full causal] [--n 8192]
                                [--heads 16] [--rounds 3] [--unsplit] [--backward]

The first tile is the baseline (the training tile, ``tile_for(D, dtype)``, or any other). Each tile is made the head
dim's forward-only tile (``kernels.SM90_FORWARD_TILES[D]``) before each of its calls, since the launch check reads it
on every call, so fwd_sm90.cu runs it; the kernel's ``VALID_TILE`` must admit it. The launches are cached with their
plans, so later calls reuse them. Prints, per workload, each tile's median per round and its time over the
baseline's (medians over rounds); bf16, B = 1. ``--unsplit`` adds, after each tile, the same launch with
``num_splits=1``: the default's split of the last wave's CTAs (fwd.py's tail_splits_for) against none.
``--backward`` times the backward (the training tile: give it alone) instead, its unsplit side built with
bwd.py's tail_splits_for made to split nothing. Timings only: tests/gpu checks correctness.
"""
import argparse
import os
import sys

import cupy as cp
import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_timing import inputs, medians_in_turns  # noqa: E402

from maskattn import compile_mask  # noqa: E402
from maskattn.backends import cuda  # noqa: E402
from maskattn.backends.cuda import bwd as cuda_bwd, kernels  # noqa: E402
from maskattn.bench import workloads  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head-dim", type=int, required=True)
    parser.add_argument("--tiles", nargs="+", required=True, help="ROWSxKEYS, the baseline first")
    parser.add_argument("--workloads", nargs="+", default=["full", "causal"])
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--unsplit", action="store_true", help="each tile also with num_splits=1")
    parser.add_argument("--backward", action="store_true", help="time cuda.backward instead")
    args = parser.parse_args()
    D = args.head_dim
    splits = (None, 1) if args.unsplit else (None,)
    # sides: (rows, keys, num_splits); "R x K / 1" is the unsplit launch
    tiles = [tuple(int(x) for x in tile.split("x")) + (s,) for tile in args.tiles for s in splits]
    scale = D ** -0.5

    def name(side):
        return f"{side[0]} x {side[1]}" + (" / 1" if side[2] else "")
    print(f"| {args.n // 1024}k, D={D}, H={args.heads} | " + " | ".join(f"{name(t)} ms" for t in tiles) + " | "
          + " | ".join(f"{name(t)} over base" for t in tiles[1:]) + " |")
    print("| --- " * (2 * len(tiles)) + "|")
    for workload in args.workloads:
        spec = workloads.build(workload, args.n)
        q, k, v = inputs(3, (1, args.heads, args.n, D), np.dtype(ml_dtypes.bfloat16), np.random.default_rng(0))
        calls = {}
        for side in tiles:
            tile = side[:2]
            plan = compile_mask(spec, tile=tile)
            out = cp.empty_like(q)

            def call(tile=tile, plan=plan, out=out, num_splits=side[2]):  # the launch check reads the listed tile
                kernels.SM90_FORWARD_TILES[D] = tile
                return cuda.forward(q, k, v, plan, scale, out=out, num_splits=num_splits)
            if args.backward:  # one launch a side, kept (cuda.backward would check and build one every call)
                _, lse = call()
                grads = [cp.empty_like(x) for x in (q, k, v)]
                split = cuda_bwd.tail_splits_for
                if side[2] == 1:
                    cuda_bwd.tail_splits_for = lambda ctas, *_: (1, ctas)
                launch = cuda_bwd.backward_launch(q, q, k, v, out, lse, plan, scale, *grads, deterministic=False)
                cuda_bwd.tail_splits_for = split
                scratch = [cp.empty(shape, np.float32) for shape in launch.scratch_shapes]
                arrays = (q, q, k, v, out, lse, *grads, *scratch)

                def call(launch=launch, arrays=arrays):
                    launch(cp.cuda.get_current_stream().ptr, *(x.data.ptr for x in arrays))
            call()
            calls[side] = call
        rounds = [medians_in_turns(calls) for _ in range(args.rounds)]
        medians = {tile: float(np.median([r[tile] for r in rounds])) for tile in tiles}
        print(f"| {workload} | " + " | ".join(" / ".join(f"{r[tile]:.3f}" for r in rounds) for tile in tiles) + " | "
              + " | ".join(f"{medians[tile] / medians[tiles[0]]:.3f}" for tile in tiles[1:]) + " |", flush=True)


if __name__ == "__main__":
    main()
