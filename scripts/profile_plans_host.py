"""Host time of a new plan, on any machine (no GPU needed): ``compile_mask`` for every interval workload at 8k and
16k tokens with the 128 x 128 tile of D = 128 (the plan part of issue 4's "compile plus transfer" bound; since the
compiler writes the plan into one buffer, ``_cuda.device_plan`` has no host work left before its one copy):

    python3 scripts/profile_plans_host.py              # min of 7 loops of 1000 calls per workload
    python3 scripts/profile_plans_host.py --profile    # and cProfile of causal 16k

The "before" numbers in docs/performance.md came from this script's first version (branch wip/plan-speed, commit
9a5c56f), which also timed 198048e's packing of the plan's arrays in ``device_plan``.
"""

import argparse
import cProfile
import pstats
import time

import maskattn
from maskattn import workloads

TILE = (128, 128)


def per_call_us(fn, reps=1000, loops=7):
    fn()
    best = float("inf")
    for _ in range(loops):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - start) / reps)
    return best * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", action="store_true", help="cProfile 2000 plans of causal 16k")
    args = parser.parse_args()
    for n in (8192, 16384):
        for name in workloads.INTERVAL_NAMES:
            spec = workloads.build(name, n)

            def compile_only():
                spec._plans.clear()
                maskattn.compile_mask(spec, TILE)

            print(f"{name:16s} {n:6d}  compile {per_call_us(compile_only):6.1f} us", flush=True)
    if args.profile:
        spec = workloads.build("causal", 16384)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            spec._plans.clear()
            maskattn.compile_mask(spec, TILE)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
