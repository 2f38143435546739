"""``python -m maskattn bench`` (and ``--backward``, ``--plans-only``): every workload of WORKLOADS.md, maskattn beside
FlexAttention and SDPA, in one process on one GPU, so that the ratios hold whatever the card's clocks do.

For each workload it times maskattn's plan compile plus upload and its forward (and forward+backward with
``--backward``), FlexAttention's ``create_block_mask`` and compiled forward (with the mask_mod a user would
write), SDPA's flash kernel without a mask and SDPA with the dense boolean mask; it checks maskattn's output
against SDPA's, prints one table with ratios to FlexAttention and TFLOP/s, and writes JSON and a PNG.
"""

from __future__ import annotations

import numpy as np

import maskattn
from maskattn.backends import cuda

from . import workloads
from .common import PEAK_TFLOPS, bench_ms, fmt, fwd_bwd_ms, median_ms, try_
from .peers import compiled_flex, flex_mask_mod


def run(args) -> list[dict]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    flex, create_block_mask = compiled_flex()
    device = "cuda"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    B, H, D = args.batch, args.heads, args.head_dim
    tile = cuda.tile_for(D, np.float16 if args.dtype == "fp16" else "bfloat16")
    rows = []
    for n in args.n:
        for name in args.workloads:
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
            if args.plans_only:
                mask_mod = flex_mask_mod(name, spec, device) if flex is not None else None
                if mask_mod is not None:
                    create_block_mask(mask_mod, 1, 1, n_q, n_k, device=device)
                    row["flex_create_block_mask_ms"] = bench_ms(
                        lambda: create_block_mask(mask_mod, 1, 1, n_q, n_k, device=device))
                cbm = row.get("flex_create_block_mask_ms")
                print(f"{n:6d} {name:16s} compile+upload {row['maskattn_compile_ms']:8.3f} ms  flex create_block_mask "
                      f"{fmt(cbm)} ms  ratio {fmt(None if cbm is None else row['maskattn_compile_ms'] / cbm)}",
                      flush=True)
                rows.append(row)
                continue
            out = maskattn.attention(q, k, v, spec)
            row["maskattn_fwd_ms"] = bench_ms(lambda: maskattn.attention(q, k, v, spec))
            if args.backward:
                def fwd_bwd():
                    o, lse = maskattn.attention(q, k, v, spec, return_lse=True)
                    return maskattn.attention_backward(do, q, k, v, o, lse, spec)

                row["maskattn_fwdbwd_ms"] = try_(lambda: bench_ms(fwd_bwd), errors, "maskattn backward")

            dense = torch.as_tensor(spec.to_dense()[0, 0], device=device)
            if spec.perm is not None:
                p = torch.as_tensor(spec.perm, device=device)
                dense = dense[p][:, p]
                qp, kp, vp = q[:, :, p], k[:, :, p], v[:, :, p]
            else:
                qp, kp, vp = q, k, v
            ref = try_(lambda: F.scaled_dot_product_attention(qp, kp, vp, attn_mask=dense), errors, "sdpa mask")
            if ref is not None:
                if spec.perm is not None:
                    ref = torch.empty_like(ref).index_copy_(2, p, ref)
                seen = dense.any(-1)
                if spec.perm is not None:
                    seen = torch.empty_like(seen).index_copy_(0, p, seen)
                diff = (out.float() - ref.float())[:, :, seen]
                row["rel_err_vs_sdpa"] = float(diff.norm() / ref.float()[:, :, seen].norm())
                row["sdpa_mask_fwd_ms"] = bench_ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=dense))
                if args.backward:
                    row["sdpa_mask_fwdbwd_ms"] = try_(lambda: fwd_bwd_ms(
                        lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=dense), q, k, v, do),
                        errors, "sdpa mask backward")
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                row["sdpa_flash_nomask_fwd_ms"] = try_(lambda: bench_ms(
                    lambda: F.scaled_dot_product_attention(q, k, v)), errors, "sdpa flash")
                if args.backward:
                    row["sdpa_flash_nomask_fwdbwd_ms"] = try_(lambda: fwd_bwd_ms(
                        F.scaled_dot_product_attention, q, k, v, do), errors, "sdpa flash backward")
            if flex is not None:
                mask_mod = flex_mask_mod(name, spec, device)
                block_mask = None
                if mask_mod is not None:
                    block_mask = create_block_mask(mask_mod, 1, 1, n_q, n_k, device=device)
                    row["flex_create_block_mask_ms"] = bench_ms(
                        lambda: create_block_mask(mask_mod, 1, 1, n_q, n_k, device=device))
                row["flex_fwd_ms"] = try_(lambda: bench_ms(lambda: flex(q, k, v, block_mask=block_mask)),
                                          errors, "flex")
                if args.backward:
                    row["flex_fwdbwd_ms"] = try_(lambda: fwd_bwd_ms(
                        lambda a, b, c: flex(a, b, c, block_mask=block_mask), q, k, v, do), errors, "flex backward")
            row["errors"] = errors
            rows.append(row)
            print_row(row, args.backward)
            torch.cuda.empty_cache()
    return rows


def print_row(row, backward):
    flex = row.get("flex_fwd_ms")
    ours = row["maskattn_fwd_ms"]
    tflops = row["fwd_flops"] / ours / 1e9
    cbm = row.get("flex_create_block_mask_ms")
    line = (f"{row['n']:6d} {row['workload']:16s} dens {row['density']:.3f} "
            f"blocks {row['active']:6d}/{row['total']:<6d} | compile {row['maskattn_compile_ms']:7.3f} ms"
            f" (flex cbm {fmt(cbm)}) | fwd {ours:7.3f} ms {tflops:5.0f} TF/s {100 * tflops / PEAK_TFLOPS:3.0f}%"
            f" | flex {fmt(flex)} ({fmt(None if flex is None else ours / flex, '.2f')}x)"
            f" sdpa-mask {fmt(row.get('sdpa_mask_fwd_ms'))} flash-nomask {fmt(row.get('sdpa_flash_nomask_fwd_ms'))}")
    if backward:
        fb, ffb = row.get("maskattn_fwdbwd_ms"), row.get("flex_fwdbwd_ms")
        line += (f" | fwd+bwd {fmt(fb)} flex {fmt(ffb)}"
                 f" ({fmt(None if fb is None or ffb is None else fb / ffb, '.2f')}x)"
                 f" sdpa-mask {fmt(row.get('sdpa_mask_fwdbwd_ms'))} flash {fmt(row.get('sdpa_flash_nomask_fwdbwd_ms'))}")
    line += f" | err {fmt(row.get('rel_err_vs_sdpa'), '.1e')}"
    print(line, flush=True)
    for err in row["errors"]:
        print(f"    ! {err}", flush=True)


def markdown(rows, backward) -> str:
    head = ["n", "workload", "density", "active/total", "compile+upload ms", "flex cbm ms", "fwd ms", "TFLOP/s",
            "% of 790", "flex fwd ms", "ratio", "sdpa mask fwd ms", "flash no-mask fwd ms"]
    if backward:
        head += ["fwd+bwd ms", "flex fwd+bwd ms", "ratio", "sdpa mask fwd+bwd ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        t = r["fwd_flops"] / r["maskattn_fwd_ms"] / 1e9
        flex = r.get("flex_fwd_ms")
        cells = [r["n"], r["workload"], f"{r['density']:.3f}", f"{r['active']}/{r['total']}",
                 f"{r['maskattn_compile_ms']:.3f}", fmt(r.get("flex_create_block_mask_ms"), ".2f"),
                 f"{r['maskattn_fwd_ms']:.3f}", f"{t:.0f}", f"{100 * t / PEAK_TFLOPS:.0f}", fmt(flex),
                 fmt(None if flex is None else r["maskattn_fwd_ms"] / flex, ".2f"), fmt(r.get("sdpa_mask_fwd_ms")),
                 fmt(r.get("sdpa_flash_nomask_fwd_ms"))]
        if backward:
            fb, ffb = r.get("maskattn_fwdbwd_ms"), r.get("flex_fwdbwd_ms")
            cells += [fmt(fb), fmt(ffb), fmt(None if fb is None or ffb is None else fb / ffb, ".2f"),
                      fmt(r.get("sdpa_mask_fwdbwd_ms"))]
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
        keys = [("maskattn_fwd_ms", "ours"), ("flex_fwd_ms", "flex"), ("sdpa_mask_fwd_ms", "sdpa")]
        vals = [sel.get(k) or 0.0 for k, _ in keys]
        axes[1, i].bar([label for _, label in keys], vals, color=["C0", "C1", "C2"])
        axes[1, i].tick_params(labelsize=7)
    axes[1, 0].set_ylabel(f"forward ms (n={n0})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
