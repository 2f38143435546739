"""``python -m maskattn bench`` (and ``--backward``, ``--plans-only``): every workload of WORKLOADS.md, maskattn beside
its peers, in one process on one GPU, so that the ratios hold whatever the card's clocks do.

For each workload it times maskattn's plan compile plus upload and its forward (and forward+backward with
``--backward``), FlexAttention's ``create_block_mask``, SDPA with the dense boolean mask and SDPA's flash kernel
without a mask, and the peers of :mod:`.peers` that compute the workload's mask: FlexAttention compiled on its
Triton and FLASH backends (every workload, one BlockMask), and for full and causal FlashAttention-4 and SDPA's cuDNN
and flash kernels. Each row names the fastest peer and maskattn's time over its time; a peer that refuses or
fails keeps its reason. Outputs are checked against SDPA's. Each row's callables are timed in turns
(:func:`.common.turns_ms`: their samples interleaved, so that the clock, which the card's power limit moves, is
shared), or with ``--graph`` replayed in CUDA graphs, also in turns (:func:`.common.graphs_ms`; no host time:
FLASH's launch path costs a few hundred microseconds a call).
"""

from __future__ import annotations

import functools
import json
import pathlib
import time

import numpy as np

import maskattn
from maskattn.backends import cuda

from . import workloads
from .common import (GRAPH_CALLS, GRAPH_REPLAYS, PEAK_TFLOPS, TURNS_SAMPLES, attempt, bench_ms, fmt,
                     fwd_bwd_step, input_sets, median_ms, print_report, ratio, timed_in_turns, try_)
from .peers import PEERS, compiled_flex, flash_attn_4, flex_mask_mod, peer_calls, sdpa

PHASES = {"fwd": ("forward", 1.0), "fwdbwd": ("forward+backward", 3.5)}  # FLOPs: the backward counts 2.5x
LABELS = {"maskattn": "maskattn", **PEERS, "sdpa_mask": "SDPA mask", "sdpa_flash_nomask": "SDPA flash no-mask"}
TIMERS = {"do_bench": "median of triton's do_bench (each call after an L2 flush, host launch time included)",
          "turns": f"medians of {TURNS_SAMPLES} samples a side taken in turns with the row's other sides (a call "
                   "after an L2 flush between CUDA events, calls queued ahead: host launch time shows only where the "
                   "host falls behind)",
          "graph": f"CUDA graphs ({GRAPH_CALLS} calls a replay, median of {GRAPH_REPLAYS} replays, inputs rotated "
                   "past L2; no host time)",
          "graph_turns": f"CUDA graphs, replays in turns with the row's other sides ({GRAPH_CALLS} calls a replay, "
                         f"median of {GRAPH_REPLAYS} replays, inputs rotated past L2; no host time)"}


def run(args) -> list[dict]:
    import torch

    flex, create_block_mask = compiled_flex()
    missing = {}  # peer: why it cannot run in this process
    if flex is None:
        missing["flex"] = missing["flex_flash"] = "FlexAttention is not importable"
    wanted = not args.plans_only and {"fa4", "flex_flash"} & set(args.peers)
    fa4, fa4_version = flash_attn_4() if wanted else (None, "not asked for")
    if fa4 is None:
        missing["fa4"] = fa4_version
        missing.setdefault("flex_flash", f"flash_attn.cute {fa4_version}")
    device = "cuda"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    B, H, D = args.batch, args.heads, args.head_dim
    tile = cuda.tile_for(D, np.float16 if args.dtype == "fp16" else "bfloat16")
    setup = {"timer": "graph_turns" if args.graph else "turns", "device": torch.cuda.get_device_name(),
             "torch": torch.__version__, "fa4": fa4_version, "peers": list(args.peers)}
    if not args.plans_only:
        print(describe([setup]), flush=True)
    rows = []
    for n in args.n:
        for name in args.workloads:
            start = time.perf_counter()
            spec = workloads.build(name, n, seed=args.seed)
            n_q, n_k = spec.n_q, spec.n_k
            errors = []
            gen = torch.Generator(device=device).manual_seed(args.seed)
            q = torch.randn(B, H, n_q, D, device=device, dtype=dtype, generator=gen)
            k, v = (torch.randn(B, H, n_k, D, device=device, dtype=dtype, generator=gen) for _ in range(2))
            do = torch.randn_like(q)
            row = {"n": n, "workload": name, "B": B, "H": H, "D": D, "dtype": args.dtype, "n_q": n_q, "n_k": n_k}

            def compile_and_upload():
                spec._plans.clear()
                cuda.device_plan(maskattn.compile_mask(spec, tile))
                torch.cuda.synchronize()

            row["maskattn_compile_ms"] = median_ms(compile_and_upload, 20)
            plan = maskattn.compile_mask(spec, tile)
            stats = plan.stats(D)
            row.update(density=stats["density"], active=stats["active_blocks"], partial=stats["partial_blocks"],
                       total=stats["total_blocks"], fwd_flops=B * H * stats["fwd_flops"])
            mask_mod = flex_mask_mod(name, spec, device) if flex is not None else None
            if mask_mod is not None:
                create_block_mask(mask_mod, 1, 1, n_q, n_k, device=device)
                row["flex_create_block_mask_ms"] = bench_ms(
                    lambda: create_block_mask(mask_mod, 1, 1, n_q, n_k, device=device))
            if args.plans_only:
                cbm = row.get("flex_create_block_mask_ms")
                print(f"{n:6d} {name:16s} compile+upload {row['maskattn_compile_ms']:8.3f} ms  flex create_block_mask "
                      f"{fmt(cbm)} ms  ratio {fmt(ratio(row['maskattn_compile_ms'], cbm))}", flush=True)
                rows.append(row)
                continue
            row.update(setup, reasons={})
            inputs = [(q, k, v, do)]
            if args.graph:
                inputs += [tuple(torch.randn_like(x) for x in inputs[0])
                           for _ in range(input_sets(sum(x.nbytes for x in inputs[0])) - 1)]

            turns = {phase: {} for phase in PHASES}  # {phase: {side: what to time}}, for time_turns
            time_ = functools.partial(time_peer, row, inputs=inputs, turns=turns, backward=args.backward,
                                      graph=args.graph)

            def maskattn_fwd_bwd(q_, k_, v_, do_):
                def step():
                    o, lse = maskattn.attention(q_, k_, v_, spec, return_lse=True)
                    return maskattn.attention_backward(do_, q_, k_, v_, o, lse, spec)
                return step

            out = time_("maskattn", lambda a, b, c: maskattn.attention(a, b, c, spec), maskattn_fwd_bwd)
            dense = torch.as_tensor(spec.to_dense()[0, 0], device=device)
            if spec.perm is not None:
                p = torch.as_tensor(spec.perm, device=device)
                dense = dense[p][:, p]
                qp, kp, vp = q[:, :, p], k[:, :, p], v[:, :, p]
            else:
                qp, kp, vp = q, k, v
            sdpa_mask = functools.partial(torch.nn.functional.scaled_dot_product_attention, attn_mask=dense)
            ref = try_(lambda: sdpa_mask(qp, kp, vp), errors, "sdpa mask")
            if ref is not None:
                seen = dense.any(-1)
                if spec.perm is not None:
                    ref = torch.empty_like(ref).index_copy_(2, p, ref)
                    seen = torch.empty_like(seen).index_copy_(0, p, seen)

                def rel_err(o):
                    return float((o.float() - ref.float())[:, :, seen].norm() / ref.float()[:, :, seen].norm())

                if out is not None:
                    row["rel_err_vs_sdpa"] = rel_err(out)
                time_("sdpa_mask", sdpa_mask)
            time_("sdpa_flash_nomask", sdpa("FLASH_ATTENTION"))
            block_mask = None
            if mask_mod is not None:
                block_mask = create_block_mask(mask_mod, 1, 1, n_q, n_k, device=device)
            for key, attn in peer_calls(name, flex, block_mask, fa4).items():
                if key not in args.peers:
                    continue
                if key in missing:
                    row["reasons"].update((f"{key}_{phase}", missing[key]) for phase in PHASES
                                          if phase == "fwd" or args.backward)
                    continue
                peer_out = time_(key, attn)
                if peer_out is not None and ref is not None and spec.perm is None:  # Flex gets perm plans' order
                    row[f"{key}_rel_err"] = rel_err(peer_out)
            time_turns(row, turns, args.graph)
            for phase in PHASES:
                best, best_ms = best_peer(row, phase)
                if best is not None:
                    row.update({f"best_{phase}": best, f"best_{phase}_ms": best_ms,
                                f"vs_best_{phase}": ratio(row.get(f"maskattn_{phase}_ms"), best_ms)})
            row.update(errors=errors, wall_s=time.perf_counter() - start)  # compiles included: for planning runs
            rows.append(row)
            print_row(row, args.backward)
            if args.out:  # what a run cut short by a time limit has done so far
                (pathlib.Path(args.out) / "bench.json").write_text(json.dumps(rows, indent=1))
            torch.cuda.empty_cache()
    return rows


def time_peer(row, key, attn, fwd_bwd=None, *, inputs, turns, backward=False, graph=False):
    """Call ``attn(q, k, v)`` once on the first input set (compiling what it compiles) and return its output; its
    phases join ``turns`` ({phase: {key: what to time}}) for :func:`time_turns` to time beside the row's others: the
    forward and, with ``backward``, the forward+backward (``fwd_bwd(q, k, v, do)`` makes the step, or one goes through
    autograd), on the first set of ``inputs`` ((q, k, v, do) tuples), or with ``graph`` on every set. A refusal or
    failure leaves ``row[key_phase_ms]`` None and its reason in ``row["reasons"]`` (the first call's failure stands
    for every phase), and returns None."""
    phases = {"fwd": lambda q, k, v, do: functools.partial(attn, q, k, v)}
    if backward:
        phases["fwdbwd"] = fwd_bwd or functools.partial(fwd_bwd_step, attn)
    out, reason = attempt(lambda: attn(*inputs[0][:3]))
    for phase, make in phases.items():
        if reason is None:
            turns[phase][key] = [make(*x) for x in inputs] if graph else make(*inputs[0])
        else:
            row[f"{key}_{phase}_ms"] = None
            row["reasons"][f"{key}_{phase}"] = reason
    return out


def time_turns(row, turns, graph=False):
    """Time each phase's sides that :func:`time_peer` gathered (``turns``: {phase: {key: call, or with ``graph`` the
    calls of every input set}}) together, in turns (:func:`.common.timed_in_turns`), into ``row[key_phase_ms]``, and
    the reasons of those that failed into ``row["reasons"]``."""
    for phase, sides in turns.items():
        times, reasons = timed_in_turns(sides, graph)
        for key in sides:
            row[f"{key}_{phase}_ms"] = times.get(key)
        row["reasons"].update({f"{key}_{phase}": reason for key, reason in reasons.items()})


def best_peer(row, phase):
    """(peer, ms) of the fastest peer of :data:`PEERS` timed in ``row`` for ``phase`` ("fwd" or "fwdbwd"), or
    (None, None) where none was."""
    times = {peer: row[f"{peer}_{phase}_ms"] for peer in PEERS if row.get(f"{peer}_{phase}_ms") is not None}
    if not times:
        return None, None
    best = min(times, key=times.get)
    return best, times[best]


def tflops(row, key, phase="fwd"):
    """TFLOP/s of ``row[key_phase_ms]``: 4·B·H·D·(pairs of maskattn's tiles) a forward, 3.5x that with the backward
    (one count for every column, so that TFLOP/s compare as times do)."""
    ms = row.get(f"{key}_{phase}_ms")
    return None if ms is None else PHASES[phase][1] * row["fwd_flops"] / ms / 1e9


def of_peak(tflop):
    """Percent of the card's dense bf16 peak."""
    return None if tflop is None else 100 * tflop / PEAK_TFLOPS


def cell(row, key, phase, spec=".3f"):
    """A time in ms, "fail" where the peer refused or failed (reason in the row's notes), "-" where not run."""
    if row.get(f"{key}_{phase}_ms") is None and f"{key}_{phase}" in row.get("reasons", {}):
        return "fail"
    return fmt(row.get(f"{key}_{phase}_ms"), spec)


def notes(row, phase) -> str:
    """Why each run that failed in ``phase`` failed, one "label: reason" each."""
    return "; ".join(f"{LABELS.get(key.rsplit('_', 1)[0], key)}: {reason}"
                     for key, reason in row.get("reasons", {}).items() if key.endswith(f"_{phase}"))


def describe(rows) -> str:
    """The line that says how a table was measured: device, versions, timer, peers, FLOP count."""
    def values(key):
        return ", ".join(sorted({str(r.get(key, "?")) for r in rows}))

    timers = "; ".join(TIMERS.get(t, t) for t in sorted({r.get("timer", "do_bench") for r in rows}))
    peers = sorted({p for r in rows for p in r.get("peers", ["flex"])}, key=list(PEERS).index)
    return (f"{values('device')}; torch {values('torch')}; FA4 {values('fa4')}. Times: {timers}. Peers: "
            f"{', '.join(PEERS[p] for p in peers)}. TFLOP/s: 4·B·H·D·(pairs of maskattn's tiles) per forward, 3.5x "
            f"that per forward+backward, in every column; peak {PEAK_TFLOPS:.0f}.")


def print_row(row, backward):
    cbm = row.get("flex_create_block_mask_ms")
    line = (f"{row['n']:6d} {row['workload']:16s} dens {row['density']:.3f} "
            f"blocks {row['active']:6d}/{row['total']:<6d} | compile {row['maskattn_compile_ms']:7.3f} ms"
            f" (flex cbm {fmt(cbm)})")
    for phase in PHASES if backward else ("fwd",):
        tflop = tflops(row, "maskattn", phase)
        best = row.get(f"best_{phase}")
        line += (f" | {phase} {cell(row, 'maskattn', phase)} ms {fmt(tflop, '5.0f')} TF/s"
                 f" {fmt(of_peak(tflop), '3.0f')}% | "
                 + " ".join(f"{peer} {cell(row, peer, phase)}" for peer in PEERS
                            if f"{peer}_{phase}_ms" in row or f"{peer}_{phase}" in row["reasons"])
                 + f" | best {PEERS.get(best, '-')} ({fmt(row.get(f'vs_best_{phase}'), '.2f')}x)"
                 f" sdpa-mask {cell(row, 'sdpa_mask', phase)} flash-nomask {cell(row, 'sdpa_flash_nomask', phase)}")
    errs = [f"{LABELS[key]} {row[f'{key}_rel_err']:.1e}" for key in PEERS if f"{key}_rel_err" in row]
    line += f" | err {fmt(row.get('rel_err_vs_sdpa'), '.1e')}" + (f" (peers: {', '.join(errs)})" if errs else "")
    print_report(line + f" | {row['wall_s']:.0f} s",
                 row["errors"] + [f"{key}: {reason}" for key, reason in row["reasons"].items()])


def markdown(rows, backward) -> str:
    """The line of :func:`describe`, then the table of earlier sessions (maskattn, Flex Triton, SDPA), then one table
    per phase against every peer: their times, the fastest, maskattn's time over its time, and why a peer failed."""
    head = ["n", "workload", "density", "active/total", "compile+upload ms", "flex cbm ms", "fwd ms", "TFLOP/s",
            "% of 790", "flex fwd ms", "ratio", "sdpa mask fwd ms", "flash no-mask fwd ms"]
    if backward:
        head += ["fwd+bwd ms", "flex fwd+bwd ms", "ratio", "sdpa mask fwd+bwd ms"]
    lines = [describe(rows), "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        t = tflops(r, "maskattn")
        cells = [r["n"], r["workload"], f"{r['density']:.3f}", f"{r['active']}/{r['total']}",
                 f"{r['maskattn_compile_ms']:.3f}", fmt(r.get("flex_create_block_mask_ms"), ".2f"),
                 cell(r, "maskattn", "fwd"), fmt(t, ".0f"), fmt(of_peak(t), ".0f"),
                 cell(r, "flex", "fwd"), fmt(ratio(r.get("maskattn_fwd_ms"), r.get("flex_fwd_ms")), ".2f"),
                 cell(r, "sdpa_mask", "fwd"), cell(r, "sdpa_flash_nomask", "fwd")]
        if backward:
            cells += [cell(r, "maskattn", "fwdbwd"), cell(r, "flex", "fwdbwd"),
                      fmt(ratio(r.get("maskattn_fwdbwd_ms"), r.get("flex_fwdbwd_ms")), ".2f"),
                      cell(r, "sdpa_mask", "fwdbwd")]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    for phase in PHASES if backward else ("fwd",):
        title, _ = PHASES[phase]
        head = (["n", "workload", f"maskattn {title} ms", "TFLOP/s", "% of 790"] + [f"{label} ms" for label in
                PEERS.values()] + ["best peer", "its TFLOP/s", "maskattn / best", "failures"])
        lines += ["", f"{title[0].upper()}{title[1:]}, against every peer:", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in rows:
            t = tflops(r, "maskattn", phase)
            best, best_ms = best_peer(r, phase)
            cells = [r["n"], r["workload"], cell(r, "maskattn", phase), fmt(t, ".0f"), fmt(of_peak(t), ".0f")]
            cells += [cell(r, peer, phase) for peer in PEERS]
            cells += [PEERS.get(best, "-"), fmt(tflops(r, best, phase) if best else None, ".0f"),
                      fmt(ratio(r.get(f"maskattn_{phase}_ms"), best_ms), ".2f"), notes(r, phase).replace("|", "\\|")]
            lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def picture(rows, path, args):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG")
        return
    names = list(dict.fromkeys(r["workload"] for r in rows))
    n0 = rows[0]["n"]
    fig, axes = plt.subplots(2, len(names), figsize=(2.2 * len(names), 5.5), squeeze=False)
    for i, name in enumerate(names):
        plan = maskattn.compile_mask(workloads.build(name, n0, seed=args.seed), (128, 128))
        axes[0, i].imshow(plan.block_grid(), cmap="Greys", vmin=0, vmax=2, interpolation="nearest")
        axes[0, i].set_title(name, fontsize=8)
        axes[0, i].axis("off")
        sel = [r for r in rows if r["workload"] == name and r["n"] == n0][0]
        keys = [("maskattn_fwd_ms", "ours"), ("flex_fwd_ms", "flex"), ("best_fwd_ms", "best"),
                ("sdpa_mask_fwd_ms", "sdpa")]
        vals = [sel.get(k) or 0.0 for k, _ in keys]
        axes[1, i].bar([label for _, label in keys], vals, color=["C0", "C1", "C3", "C2"])
        axes[1, i].tick_params(labelsize=7)
    axes[1, 0].set_ylabel(f"forward ms (n={n0})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
