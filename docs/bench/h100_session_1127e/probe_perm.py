"""What a node order (perm) costs the Hopper kernels: graph_rcm's plan (gathers through perm) against the same mask
given already in plan order (no perm: TMA tiles), BigBird for a bits plan of like size; forward and backward, CUDA
event medians, the cases in turns over rounds.

    python3 probe_perm.py [--rounds 3]
"""
import argparse
import sys

import cupy as cp
import ml_dtypes
import numpy as np

sys.path.insert(0, "scripts")
from gpu_timing import inputs, median_ms  # noqa: E402

from maskattn import compile_mask, masks  # noqa: E402
from maskattn.backends import cuda  # noqa: E402
from maskattn.bench import workloads  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)


def cases(n, d):
    rcm = workloads.build("graph_rcm", n)
    return {"graph_rcm (perm)": rcm,
            "graph_rcm (pre-permuted)": masks.from_graph(rcm.reordered(), reorder=None),
            "bigbird": workloads.build("bigbird", n)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for n, h, d in ((16384, 16, 128), (8192, 32, 64)):
        plans = {name: compile_mask(spec, tile=cuda.tile_for(d, BF16)) for name, spec in cases(n, d).items()}
        q, k, v, do = inputs(4, (1, h, n, d), BF16, np.random.default_rng(0))
        times = {name: ([], []) for name in plans}
        for _ in range(args.rounds):
            for name, plan in plans.items():
                out, lse = cuda.forward(q, k, v, plan, d ** -0.5)
                times[name][0].append(median_ms(lambda: cuda.forward(q, k, v, plan, d ** -0.5, out=out)))
                times[name][1].append(median_ms(lambda: cuda.backward(do, q, k, v, out, lse, plan, d ** -0.5,
                                                                      False)))
        for name, plan in plans.items():
            stats = plan.stats(d)
            fwd, bwd = (np.median(x) for x in times[name])
            rows.append(f"| {name} {n // 1024}k D={d} | {plan.nnz} | {stats.get('partial_blocks', '?')} | "
                        f"{' / '.join(f'{x:.3f}' for x in times[name][0])} | {1e3 * fwd * 132 / (plan.nnz * h):.2f} | "
                        f"{' / '.join(f'{x:.3f}' for x in times[name][1])} | {1e3 * bwd * 132 / (plan.nnz * h):.2f} |")
        del q, k, v, do
        cp.get_default_memory_pool().free_all_blocks()
    print("| case | blocks | partial | fwd ms (rounds) | fwd us per block per SM | bwd ms | bwd us per block per SM |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
