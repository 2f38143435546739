"""``python -m maskattn bench --sdpa``: the one-line change for SDPA users. Per workload of WORKLOADS.md, torch's SDPA
with the dense boolean mask beside ``maskattn.torch.scaled_dot_product_attention`` with the same mask, planned on the
GPU inside every call (as a mask that is new each step), forward and forward+backward; beside them maskattn over a
plan of that mask made once (what planning per call costs) and over the host compiler's deduplicated plan (what the
device plan's one slot per tile costs); and the plan alone, from the call to the plan ready on the device. A phase's
four sides are timed in turns (:func:`.common.timed_in_turns`).
"""

from __future__ import annotations

import functools

import numpy as np

import maskattn
from maskattn import masks
from maskattn._arrays import cupy_or_none, torch_view
from maskattn.backends import cuda
from maskattn.backends.cuda import plans

from . import workloads
from .common import bench_ms, fmt, fwd_bwd_step, median_ms, print_report, ratio, timed_in_turns, try_


def fully_masked_rows(dtype) -> str:
    """What torch's SDPA gives on CUDA for a row whose boolean mask is all False (maskattn gives 0)."""
    import torch
    import torch.nn.functional as F

    q, k, v = (torch.randn(1, 2, 64, 64, device="cuda", dtype=dtype) for _ in range(3))
    mask = torch.ones(64, 64, dtype=torch.bool, device="cuda")
    mask[5] = False
    row = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)[0, 0, 5].float()
    return "nan" if torch.isnan(row).all() else ("0" if torch.all(row == 0) else f"{row[:4].tolist()} ...")


def run(args) -> list[dict]:
    import torch
    import torch.nn.functional as F

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    B, H, D = args.batch, args.heads, args.head_dim
    tile = cuda.tile_for(D, "float16" if args.dtype == "fp16" else "bfloat16")
    cupy = cupy_or_none()
    print(f"torch SDPA ({args.dtype}, CUDA) on a row that sees no key gives {fully_masked_rows(dtype)}; maskattn 0",
          flush=True)
    rows = []
    for n in args.n:
        for name in args.workloads:
            spec = workloads.build(name, n, seed=args.seed)
            dense = spec.to_dense()[0, 0]
            if spec.perm is not None:  # graph_rcm: nodes already in the order maskattn's RCM gives them
                dense = dense[spec.perm][:, spec.perm]
            mask = torch.as_tensor(np.ascontiguousarray(dense), device="cuda")
            n_q, n_k = dense.shape
            gen = torch.Generator(device="cuda").manual_seed(args.seed)
            q = torch.randn(B, H, n_q, D, device="cuda", dtype=dtype, generator=gen)
            k, v = (torch.randn(B, H, n_k, D, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
            do = torch.randn_like(q)
            errors = []
            row = {"n": n, "workload": name, "B": B, "H": H, "D": D, "dtype": args.dtype, "n_q": n_q, "n_k": n_k}

            view = torch_view(cupy, mask[None, None])

            def plan_ready():
                plans.dense_plan(view, tile)
                torch.cuda.synchronize()

            plan_ready()
            row["plan_ms"] = median_ms(plan_ready, 50)
            row["plan_gpu_ms"] = bench_ms(lambda: plans.dense_plan(view, tile))
            device_plan = plans.dense_plan(view, tile)
            host_plan = maskattn.compile_mask(masks.from_dense(dense), tile)
            stats = host_plan.stats(D)
            row.update(density=stats["density"], active=stats["active_blocks"], partial=stats["partial_blocks"],
                       total=stats["total_blocks"], distinct=stats["bit_tiles"])

            def wrapper(a, b, c):
                return maskattn.torch.scaled_dot_product_attention(a, b, c, attn_mask=mask)

            def precompiled(a, b, c, plan=device_plan):
                return maskattn.torch.attention(a, b, c, plan)

            def sdpa(a, b, c):
                return F.scaled_dot_product_attention(a, b, c, attn_mask=mask)

            out = wrapper(q, k, v)
            # host time of a call (the launches queued, nothing waited for): what the GPU's work must cover
            row["wrapper_host_ms"] = median_ms(lambda: wrapper(q, k, v), 20)
            torch.cuda.synchronize()
            if args.backward:  # the same for a forward+backward step: where it exceeds the GPU's time, host-bound
                row["wrapper_step_host_ms"] = median_ms(fwd_bwd_step(wrapper, q, k, v, do), 20)
                torch.cuda.synchronize()
            ref = try_(lambda: sdpa(q, k, v), errors, "sdpa")
            if ref is not None:
                seen = mask.any(-1)
                row["rel_err_vs_sdpa"] = float((out.float() - ref.float())[:, :, seen].norm()
                                               / ref.float()[:, :, seen].norm())
            del out, ref
            # each phase's sides in turns (their samples interleaved: the card's clock shared)
            sides = {"sdpa": sdpa, "wrapper": wrapper, "precompiled": precompiled,
                     "host_plan": lambda a, b, c: precompiled(a, b, c, host_plan)}
            phases = {"fwd": ("forward", {label: functools.partial(fn, q, k, v) for label, fn in sides.items()}),
                      "fwdbwd": ("backward", {label: fwd_bwd_step(fn, q, k, v, do) for label, fn in sides.items()
                                              if args.backward or label != "host_plan"})}
            for phase, (name, calls) in phases.items():
                times, reasons = timed_in_turns(calls)
                row.update({f"{label}_{phase}_ms": times.get(label) for label in calls})
                errors += [f"{label} {name}: {reason}" for label, reason in reasons.items()]
            row["errors"] = errors
            rows.append(row)
            print_row(row)
            torch.cuda.empty_cache()
    return rows


def print_row(row):
    line = (f"{row['n']:6d} {row['workload']:16s} dens {row['density']:.3f} partial {row['partial']:6d} "
            f"| plan {row['plan_ms']:.3f} ms (gpu {row['plan_gpu_ms']:.3f}) "
            f"| wrapper host {row['wrapper_host_ms']:.3f} ms")
    for part in ("fwd", "fwdbwd"):
        w, p, s = (row.get(f"{label}_{part}_ms") for label in ("wrapper", "precompiled", "sdpa"))
        line += (f" | {part} wrapper {fmt(w)} precompiled {fmt(p)} sdpa-mask {fmt(s)}"
                 f" ({fmt(ratio(w, p), '.2f')}x, {fmt(ratio(w, s), '.3f')}x)")
    line += (f" | wrapper host fwd+bwd {fmt(row.get('wrapper_step_host_ms'))} ms | host plan fwd "
             f"{fmt(row.get('host_plan_fwd_ms'))} | err {fmt(row.get('rel_err_vs_sdpa'), '.1e')}")
    print_report(line, row["errors"])


def markdown(rows) -> str:
    head = ["n", "workload", "partial", "plan ms", "plan GPU ms", "wrapper host ms",
            "fwd: SDPA mask", "wrapper", "precompiled", "host plan", "wrapper / precompiled", "wrapper / SDPA",
            "fwd+bwd: SDPA mask", "wrapper", "precompiled", "wrapper / precompiled", "wrapper / SDPA",
            "wrapper host fwd+bwd ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["n"], r["workload"], r["partial"], f"{r['plan_ms']:.3f}", f"{r['plan_gpu_ms']:.3f}",
                 f"{r['wrapper_host_ms']:.3f}"]
        for part in ("fwd", "fwdbwd"):
            w, p, s = (r.get(f"{label}_{part}_ms") for label in ("wrapper", "precompiled", "sdpa"))
            cells += [fmt(s), fmt(w), fmt(p)]
            if part == "fwd":
                cells.append(fmt(r.get("host_plan_fwd_ms")))
            cells += [fmt(ratio(w, p), ".2f"), fmt(ratio(w, s), ".3f")]
        cells.append(fmt(r.get("wrapper_step_host_ms")))
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)
