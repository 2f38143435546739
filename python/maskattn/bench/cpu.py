"""``python -m maskattn bench --cpu``: the CPU kernels (``backends.cpu``, NumPy float32) on every workload beside
torch's SDPA on the CPU with the dense boolean mask (when torch is importable), forward and forward+backward, and the
machine's dense float32 GEMM rate as the yardstick of what its cores can do.

The targets of issue 20: maskattn's time at most 1.25 x (density x SDPA's time with the dense mask), and at most half
SDPA's time wherever the density is 0.25 or less. ``vs target`` is maskattn's time over that bound (<= 1 meets it).
Defaults where not given: n 4096 and 16384, H 8, D 64, the threads of ``backends.cpu.threads`` for both libraries.
Times are the fastest of a few runs after a warm-up (a compute-bound call is only ever slowed by what else runs on the
machine), maskattn's and SDPA's runs taken in turns so that both meet the same conditions; the load average is printed
at the start and after each size.
"""

from __future__ import annotations

import os
import time

import numpy as np

import maskattn
from maskattn.backends import cpu

from . import workloads
from .common import fmt, print_report, ratio, try_

N, HEADS, HEAD_DIM = [4096, 16384], 8, 64  # the defaults of --cpu (bench.main)


# Seconds of quiet before each timed call: torch's OpenMP workers keep spinning after SDPA returns (8.4 ms of CPU in
# the 50 ms after its forward+backward on a 2-core host), and a maskattn forward timed beside them took 15-30% longer
# (docs/performance.md, 2026-11-27); 0.3 s took all of it back.
QUIET_S = 0.3


def _best_ms(fns: dict, rounds: int, errors: list) -> dict:
    """{name: fastest time in ms} of each callable after a warm-up, the callables run in turns for ``rounds`` rounds,
    each after QUIET_S seconds of sleep (one that raises is reported in ``errors`` and left out)."""
    best = {}
    for name, fn in list(fns.items()):
        if try_(lambda: (fn(), True)[1], errors, name) is None:  # the warm-up
            fns.pop(name)
    for _ in range(rounds):
        for name, fn in fns.items():
            time.sleep(QUIET_S)
            start = time.perf_counter()
            fn()
            best[name] = min(best.get(name, float("inf")), (time.perf_counter() - start) * 1e3)
    return best


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else ""


def gemm_gflops(n: int = 4096) -> float:
    """The machine's dense float32 GEMM rate in GFLOP/s: NumPy's BLAS on n x n matrices, with its own threads."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    return 2 * n**3 / _best_ms({"gemm": lambda: a @ b}, 3, [])["gemm"] / 1e6


def target_ms(density: float, sdpa_ms):
    """Issue 20's bound on maskattn's time: 1.25 x density x SDPA's, and half SDPA's where density <= 0.25."""
    if sdpa_ms is None:
        return None
    bound = 1.25 * density * sdpa_ms
    return min(bound, 0.5 * sdpa_ms) if density <= 0.25 else bound


def run(args) -> list[dict]:
    ns, H, D = args.n, args.heads, args.head_dim
    B = args.batch
    threads = args.threads or cpu.threads()
    try:
        import torch
        import torch.nn.functional as F

        torch.set_num_threads(threads)
    except ImportError:
        torch = None
        print("torch is not importable: the SDPA columns are skipped", flush=True)
    from .._maskprep import attention as kernels

    gemm = gemm_gflops()
    print(f"CPU kernels: {kernels.best_isa()}, {threads} threads, tile {cpu.TILE}; float32 GEMM (NumPy's BLAS) "
          f"{gemm:.0f} GFLOP/s"
          + (f"; torch {torch.__version__} with {torch.get_num_threads()} threads" if torch else "")
          + f"; {_load()}", flush=True)
    rows = []
    for n in ns:
        rounds = 4 if n <= 8192 else 2
        for name in args.workloads:
            spec = workloads.build(name, n, seed=args.seed)
            start = time.perf_counter()
            plan = maskattn.compile_mask(spec, cpu.TILE)
            compile_ms = (time.perf_counter() - start) * 1e3
            n_q, n_k = spec.n_q, spec.n_k
            stats = plan.stats(D)
            rng = np.random.default_rng(args.seed)
            q = rng.standard_normal((B, H, n_q, D), dtype=np.float32)
            k, v = (rng.standard_normal((B, H, n_k, D), dtype=np.float32) for _ in range(2))
            do = rng.standard_normal((B, H, n_q, D), dtype=np.float32)
            scale = D ** -0.5
            row = {"n": n, "workload": name, "B": B, "H": H, "D": D, "n_q": n_q, "n_k": n_k, "threads": threads,
                   "density": stats["density"], "computed": stats["computed_pairs"] / (n_q * n_k),
                   "compile_ms": compile_ms, "gemm_gflops": gemm}
            errors = []

            def forward():
                return cpu.forward(q, k, v, plan, scale, threads=threads)

            def forward_backward():
                out, lse = forward()
                return cpu.backward(do, q, k, v, out, lse, plan, scale, threads=threads)

            fns = {"fwd": forward, "fwdbwd": forward_backward}
            if torch is not None:
                mask = torch.as_tensor(np.ascontiguousarray(spec.to_dense()[0, 0]))
                tq, tk, tv, tdo = (torch.from_numpy(x) for x in (q, k, v, do))

                def sdpa():
                    with torch.no_grad():
                        return F.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask, scale=scale)

                def sdpa_fwd_bwd():
                    a, b, c = (x.detach().requires_grad_() for x in (tq, tk, tv))
                    F.scaled_dot_product_attention(a, b, c, attn_mask=mask, scale=scale).backward(tdo)

                fns.update(sdpa_fwd=sdpa, sdpa_fwdbwd=sdpa_fwd_bwd)
            row.update({f"{name}_ms": ms for name, ms in _best_ms(fns, rounds, errors).items()})
            useful = 4 * D * B * H * stats["density"] * n_q * n_k  # FLOP of the forward's true pairs
            row["fwd_gflops"] = useful / row["fwd_ms"] / 1e6
            row["fwdbwd_gflops"] = 3.5 * useful / row["fwdbwd_ms"] / 1e6  # the backward does 2.5 x the forward's
            if torch is not None:
                ref = try_(sdpa, errors, "sdpa")
                if ref is not None:  # rows that see no key: SDPA gives NaN, maskattn 0
                    seen = mask.any(-1).numpy()
                    ours, ref = forward()[0][:, :, seen], ref.numpy()[:, :, seen]
                    row["rel_err_vs_sdpa"] = float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))
                del mask, ref
            for part in ("fwd", "fwdbwd"):
                row[f"{part}_target_ms"] = target_ms(row["density"], row.get(f"sdpa_{part}_ms"))
                row[f"{part}_vs_target"] = ratio(row[f"{part}_ms"], row[f"{part}_target_ms"])
            row["errors"] = errors
            rows.append(row)
            print_row(row)
        gemm = max(gemm, gemm_gflops())  # the machine's rate: its best probe (another process may share the cores)
        for row in rows:
            row["gemm_gflops"] = gemm
        print(f"n={n} done; {_load()}; float32 GEMM {gemm:.0f} GFLOP/s (best probe)", flush=True)
    return rows


def print_row(row):
    line = (f"{row['n']:6d} {row['workload']:16s} dens {row['density']:.3f} comp {row['computed']:.3f} "
            f"| compile {row['compile_ms']:7.2f} ms")
    for part, label in (("fwd", "fwd"), ("fwdbwd", "fwd+bwd")):
        line += (f" | {label} {row[f'{part}_ms']:9.1f} ms ({row[f'{part}_gflops']:5.0f} GF/s) "
                 f"sdpa {fmt(row.get(f'sdpa_{part}_ms'), '.1f')} vs target {fmt(row[f'{part}_vs_target'], '.2f')}")
    line += f" | err vs sdpa {fmt(row.get('rel_err_vs_sdpa'), '.1e')}"
    print_report(line, row["errors"])


def markdown(rows) -> str:
    head = ["n", "workload", "density", "computed", "fwd ms", "SDPA fwd ms", "fwd / (density x SDPA)",
            "fwd vs target", "fwd GFLOP/s (% GEMM)", "fwd+bwd ms", "SDPA fwd+bwd ms", "fwd+bwd / (density x SDPA)",
            "fwd+bwd vs target", "fwd+bwd GFLOP/s (% GEMM)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["n"], r["workload"], f"{r['density']:.4f}", f"{r['computed']:.4f}"]
        for part in ("fwd", "fwdbwd"):
            sdpa = r.get(f"sdpa_{part}_ms")
            scaled = ratio(r[f"{part}_ms"], None if sdpa is None else r["density"] * sdpa)
            met = r[f"{part}_vs_target"]
            cells += [f"{r[f'{part}_ms']:.1f}", fmt(sdpa, ".1f"), fmt(scaled, ".2f"),
                      "-" if met is None else f"{met:.2f} {'met' if met <= 1 else 'MISSED'}",
                      f"{r[f'{part}_gflops']:.0f} ({100 * r[f'{part}_gflops'] / r['gemm_gflops']:.0f}%)"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)
