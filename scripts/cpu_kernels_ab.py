"""The CPU kernels of another build against this tree's, in the same minutes: for measuring a kernel change on a
machine whose load comes and goes (docs/performance.md, "The element path for graphs").

OTHER is a copy of another build's extension module (``build/cp311/maskprep/attention.cpython-311-*.so`` of a checkout
at the base commit, copied aside). Both modules are loaded into one process; by default each (workload, n) is timed
for both, call by call in turns (which goes first alternating from turn to turn), and the medians printed, with the
median of the turns' ratios (this over OTHER, less one) in brackets; ``--same`` first checks that both give the same
bits (forward, and backward where timed). ``--cpu-time`` times the calling thread's CPU time instead of the wall
clock (with ``--threads 1`` the kernels run on that thread): on a host shared with other work it leaves out the time
the thread waited for a core. With ``--bench`` the whole ``python -m maskattn bench --cpu`` run (SDPA beside it) is
made with OTHER's kernels instead, its rows written as JSON: run it and the plain bench in turns.

    python scripts/cpu_kernels_ab.py OTHER [--workloads graph graph_rcm] [--n 4096 16384] [--reps 5] [--threads 1]
        [--parts fwd bwd fwdbwd] [--same] [--cpu-time]
    python scripts/cpu_kernels_ab.py OTHER --bench --out other.json [--workloads ...] [--n ...]
"""
import argparse
import importlib.util
import json
import statistics
import time

import numpy as np

import maskattn
from maskattn._maskprep import attention as this
from maskattn.backends import cpu
from maskattn.bench import cpu as bench_cpu, workloads


def load(path):
    spec = importlib.util.spec_from_file_location("maskattn._maskprep.attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def calls(kernels, plan, q, k, v, do, scale, threads):
    """Forward, backward (on the forward's results) and forward+backward with `kernels`, its lists made once."""
    lists = kernels.element_lists(plan) if plan.payload == "bits" else None
    out, lse = kernels.attention_forward(q, k, v, plan, scale, None, threads=threads, lists=lists)

    def fwd():
        return kernels.attention_forward(q, k, v, plan, scale, None, threads=threads, lists=lists)

    def bwd(out=out, lse=lse):
        return kernels.attention_backward(do, q, k, v, out, lse, plan, scale, threads=threads, lists=lists)

    def fwdbwd():
        return kernels.attention_backward(do, q, k, v, *fwd(), plan, scale, threads=threads, lists=lists)

    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwdbwd}


def in_turns(other, args):
    for n in args.n:
        for name in args.workloads:
            plan = maskattn.compile_mask(workloads.build(name, n, seed=0), cpu.TILE)
            rng = np.random.default_rng(0)
            n_q, n_k = plan.shape[2:]  # a workload's own lengths (medusa: its tree over a prefix)
            q, do = (rng.standard_normal((1, 8, n_q, 64), dtype=np.float32) for _ in range(2))
            k, v = (rng.standard_normal((1, 8, n_k, 64), dtype=np.float32) for _ in range(2))
            fns = {label: calls(module, plan, q, k, v, do, 64 ** -0.5, args.threads)
                   for label, module in (("other", other), ("this", this))}
            if args.same:
                for part in ("fwd", "bwd") if set(args.parts) - {"fwd"} else ("fwd",):
                    if not all(np.array_equal(a, b) for a, b in zip(fns["other"][part](), fns["this"][part]())):
                        raise SystemExit(f"{name} at n = {n}: the two builds' {part} results differ")
            clock = time.thread_time if args.cpu_time else time.perf_counter
            times = {(label, part): [] for label in fns for part in args.parts}
            for turn in range(args.reps):
                for part in args.parts:
                    for label in fns if turn % 2 == 0 else reversed(list(fns)):
                        start = clock()
                        fns[label][part]()
                        times[label, part].append((clock() - start) * 1e3)
            print(f"{n:6d} {name:16s}" + "".join(f" | {part} {statistics.median(times['other', part]):8.2f} -> "
                                                 f"{statistics.median(times['this', part]):8.2f} ms "
                                                 f"({paired(times['this', part], times['other', part]):+.1%})"
                                                 for part in args.parts), flush=True)


def paired(this, other):
    """The median over turns of this call's time over the other's in the same turn, less one: load that comes and
    goes moves both calls of a turn alike, where it moves the two medians by different calls."""
    return statistics.median(a / b for a, b in zip(this, other)) - 1


def bench_with(other, args):
    made = {}

    def element_lists(plan, ordered=True):
        if id(plan) not in made:
            made[id(plan)] = (plan, other.element_lists(plan))
        return made[id(plan)][1]

    def unchecked(fn):  # the bench never checks its inputs; kernels built before 72dfff0 take no check_finite
        return lambda *args, check_finite=False, **kwargs: fn(*args, **kwargs)

    cpu._kernels = argparse.Namespace(attention_forward=unchecked(other.attention_forward),
                                      attention_backward=unchecked(other.attention_backward))
    cpu.element_lists = element_lists
    run = argparse.Namespace(n=args.n, heads=bench_cpu.HEADS, head_dim=bench_cpu.HEAD_DIM, batch=1, threads=None,
                             seed=0, workloads=args.workloads)
    with open(args.out, "w") as f:
        json.dump(bench_cpu.run(run), f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("other", help="another build's attention extension module (.so)")
    p.add_argument("--workloads", nargs="+", default=["graph", "graph_rcm"], choices=workloads.NAMES)
    p.add_argument("--n", type=int, nargs="+", default=[4096, 16384])
    p.add_argument("--parts", nargs="+", default=["fwd", "fwdbwd"], choices=["fwd", "bwd", "fwdbwd"])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--same", action="store_true", help="check first that both builds give the same bits")
    p.add_argument("--cpu-time", action="store_true", help="the calling thread's CPU time (for --threads 1)")
    p.add_argument("--bench", action="store_true", help="the bench's run with OTHER's kernels, rows to --out")
    p.add_argument("--out", default="other.json")
    args = p.parse_args()
    other = load(args.other)
    bench_with(other, args) if args.bench else in_turns(other, args)


if __name__ == "__main__":
    main()
