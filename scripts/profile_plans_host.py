"""Host time of a new plan, on any machine (no GPU needed): ``compile_mask`` plus what ``_cuda.device_plan`` does
before its host-to-device copy, for every interval workload at 8k and 16k tokens with the 128 x 128 tile of
D = 128 (the plan part of issue 4's "compile plus transfer" bound):

    python3 scripts/profile_plans_host.py              # min of 7 loops of 1000 calls per workload
    python3 scripts/profile_plans_host.py --profile    # and cProfile of causal 16k

Commits before d009733 packed the plan's arrays into a staging array in ``device_plan``; run on such a checkout
(``git show wip/plan-speed:scripts/profile_plans_host.py > /tmp/p.py`` there) this times that packing instead.
"""

import argparse
import cProfile
import pstats
import time

import numpy as np

import maskattn
from maskattn import _cuda, workloads

TILE = (128, 128)


def before_copy(plan):
    """What device_plan does up to its memcpyAsync: the source pointer, size and layout of the one copy."""
    if not hasattr(_cuda, "_PLAN_ARRAYS"):
        return plan.buffer.ctypes.data, plan.buffer.nbytes, plan.layout
    hosts = {}  # device_plan of 198048e
    for name, dtype in _cuda._PLAN_ARRAYS.items():
        a = getattr(plan, name)
        if a is not None:
            hosts[name] = np.ascontiguousarray(a, dtype=dtype)
    offsets, size = {}, 0
    for name, a in hosts.items():
        offsets[name] = size
        size += -(-a.nbytes // 16) * 16
    staging = np.empty(max(size, 16), np.uint8)
    for name, a in hosts.items():
        staging[offsets[name]:offsets[name] + a.nbytes] = a.reshape(-1).view(np.uint8)
    return staging.ctypes.data, staging.nbytes, {name: (offsets[name], a.shape, a.dtype) for name, a in hosts.items()}


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

            def compile_and_prepare():
                spec._plans.clear()
                before_copy(maskattn.compile_mask(spec, TILE))

            print(f"{name:16s} {n:6d}  compile {per_call_us(compile_only):6.1f} us  compile + upload up to its copy "
                  f"{per_call_us(compile_and_prepare):6.1f} us", flush=True)
    if args.profile:
        spec = workloads.build("causal", 16384)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            spec._plans.clear()
            before_copy(maskattn.compile_mask(spec, TILE))
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
