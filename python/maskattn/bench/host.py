"""``python -m maskattn bench --host``: the plan compiler alone, on this machine's CPU."""

from __future__ import annotations

import maskattn

from . import workloads
from .common import median_ms


def run(args) -> list[dict]:
    """Median compile_mask time per workload on this machine's CPU."""
    rows = []
    for n in args.n:
        for name in args.workloads:
            if n > 65536 and name not in workloads.INTERVAL_NAMES:
                continue
            spec = workloads.build(name, n, seed=args.seed)

            def compile_once():
                spec._plans.clear()
                maskattn.compile_mask(spec, tuple(args.tile), threads=args.threads)

            ms = median_ms(compile_once, 25 if n > 65536 else args.reps)
            s = maskattn.compile_mask(spec, tuple(args.tile)).stats()
            rows.append({"n": n, "workload": name, "compile_ms": ms, **s})
            print(f"n={n:8d} {name:16s} compile {ms:9.4f} ms  active {s['active_blocks']:9d}/{s['total_blocks']}"
                  f"  partial {s['partial_blocks']:7d}  density {s['density']:.4f}", flush=True)
    return rows
