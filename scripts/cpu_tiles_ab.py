"""CPU forward and backward over a workload's plans at 128 x 128 and 64 x 64 tiles, in turns in one process (medians
and minima over ROUNDS rounds, default 6): does a smaller tile's fewer listed pairs pay on the CPU kernels?

    ROUNDS=40 python scripts/cpu_tiles_ab.py 4096 shared_question doc_causal bigbird swa

H = 8, D = 64, float32, B = 1; threads as the CPU backend's (MASKATTN_NUM_THREADS).
"""

import os
import sys
import time

import numpy as np

import maskattn
from maskattn.bench import workloads

TILES = ((128, 128), (64, 64))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    n, names = int(sys.argv[1]), sys.argv[2:]
    rng = np.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((1, 8, n, 64), dtype=np.float32) for _ in range(4))
    for name in names:
        spec = workloads.build(name, n)
        plans = {tile: maskattn.compile_mask(spec, tile=tile) for tile in TILES}
        outs = {tile: maskattn.attention(q, k, v, plan, return_lse=True) for tile, plan in plans.items()}
        fwd, bwd = ({tile: [] for tile in TILES} for _ in range(2))
        for _ in range(int(os.environ.get("ROUNDS", "6"))):
            for tile, plan in plans.items():
                fwd[tile].append(timed(lambda: maskattn.attention(q, k, v, plan)))
                bwd[tile].append(timed(lambda: maskattn.attention_backward(do, q, k, v, *outs[tile], plan)))
        for tile, plan in plans.items():
            listed = plan.nnz * tile[0] * tile[1] / (n * n)
            print(f"{name:16s} {tile}: fwd {np.median(fwd[tile]) * 1e3:7.2f} (min {min(fwd[tile]) * 1e3:6.2f}) "
                  f"bwd {np.median(bwd[tile]) * 1e3:7.2f} (min {min(bwd[tile]) * 1e3:6.2f}) listed pairs {listed:.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
