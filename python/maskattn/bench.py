"""``python -m maskattn bench``: every workload of WORKLOADS.md, maskattn beside FlexAttention and SDPA, in one
process on one GPU, so that the ratios hold whatever the card's clocks do.

For each workload it times maskattn's plan compile plus upload and its forward (and forward+backward with
``--backward``), FlexAttention's ``create_block_mask`` and compiled forward (with the mask_mod a user would
write), SDPA's flash kernel without a mask and SDPA with the dense boolean mask; it checks maskattn's output
against SDPA's, prints one table with ratios to FlexAttention and TFLOP/s, and writes JSON and a PNG.
``--host`` times only the plan compiler, on the CPU. ``--decode`` times inference shapes instead: MEDUSA tree
verification and single-token decode over a KV cache, with the KV-read bandwidth each achieves, each peer both
with ``do_bench`` (one call after an L2 flush) and replayed in a CUDA graph (many calls, no host work between).
"""

from __future__ import annotations

import functools
import json
import pathlib
import statistics
import time

import numpy as np

from . import workloads

PEAK_TFLOPS = 790.0  # measured dense bf16 matrix rate of an H100 80GB HBM3 (WORKLOADS.md)


def _median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def host(args) -> list[dict]:
    """Median compile_mask time per workload on this machine's CPU."""
    import maskattn

    rows = []
    for n in args.n:
        for name in args.workloads:
            if n > 65536 and name not in workloads.INTERVAL_NAMES:
                continue
            spec = workloads.build(name, n, seed=args.seed)

            def compile_once():
                spec._plans.clear()
                maskattn.compile_mask(spec, tuple(args.tile), threads=args.threads)

            ms = _median_ms(compile_once, 25 if n > 65536 else args.reps)
            s = maskattn.compile_mask(spec, tuple(args.tile)).stats()
            rows.append({"n": n, "workload": name, "compile_ms": ms, **s})
            print(f"n={n:8d} {name:16s} compile {ms:9.4f} ms  active {s['active_blocks']:9d}/{s['total_blocks']}"
                  f"  partial {s['partial_blocks']:7d}  density {s['density']:.4f}", flush=True)
    return rows


# ------------------------------------------------------------------------------------------- FlexAttention

def _interval_mask_mod(spec, device):
    """FlashMask's column intervals as a mask_mod: what a FlashMask user moving to Flex writes."""
    import torch

    iv = torch.tensor(spec.startend_row_indices[0, 0], device=device)
    lts, lte, uts, ute = iv.unbind(-1)

    def mask_mod(b, h, q, kv):
        return ~(((lts[kv] <= q) & (q < lte[kv])) | ((uts[kv] <= q) & (q < ute[kv])))

    return mask_mod


def _lookup_mask_mod(dense, device):
    import torch

    table = torch.as_tensor(dense, device=device)

    def mask_mod(b, h, q, kv):
        return table[q, kv]

    return mask_mod


def flex_mask_mod(name: str, spec, device):
    """The mask_mod a FlexAttention user would write for workload ``name`` (None: no mask)."""
    import torch

    if name == "full":
        return None
    if name == "causal":
        return lambda b, h, q, kv: q >= kv
    if name == "swa":
        return lambda b, h, q, kv: (q >= kv) & (q - kv < 1024)
    if name == "sink_swa":
        return lambda b, h, q, kv: (q >= kv) & ((q - kv < 1024) | (kv < 64))
    if name == "lf_dilated":
        return lambda b, h, q, kv: ((q - kv).abs() <= 1024) & ((q - kv) % 2 == 0)
    if name == "lf_global":
        return lambda b, h, q, kv: ((q - kv).abs() <= 512) | (q < 64) | (kv < 64)
    if name == "bigbird":
        table = torch.as_tensor(spec.block_table, device=device)
        return lambda b, h, q, kv: table[q // 64, kv // 64]
    if name in workloads.INTERVAL_NAMES:
        return _interval_mask_mod(spec, device)
    dense = spec.to_dense()[0, 0]
    if spec.perm is not None:  # the reordered graph: give Flex the same node order maskattn uses
        dense = dense[spec.perm][:, spec.perm]
    return _lookup_mask_mod(dense, device)


# ------------------------------------------------------------------------------------------------- GPU

def _bench_ms(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


GRAPH_CALLS = 20  # calls captured in one CUDA graph
GRAPH_REPLAYS = 15  # timed replays; the median is kept


def graph_ms(fns) -> float:
    """Milliseconds per call inside a CUDA graph: GRAPH_CALLS calls captured back to back in one torch.cuda.CUDAGraph,
    taking the callables ``fns`` in turn (one per input set), after a warm-up on a side stream; each replay timed
    with events, the median of GRAPH_REPLAYS. Nothing runs on the host between kernels, and nothing flushes L2 between
    calls: give enough input sets that they do not fit in L2 together (:func:`input_sets`)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(GRAPH_CALLS):
            fns[i % len(fns)]()
    graph.replay()
    times = []
    for _ in range(GRAPH_REPLAYS):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / GRAPH_CALLS)
    del graph
    return statistics.median(times)


def input_sets(nbytes: int) -> int:
    """How many input sets of ``nbytes`` each a graph replay must rotate through so that together they take at least
    twice the device's L2 (one set when a set alone does: each call then reads its inputs from device memory)."""
    import torch

    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return max(1, -(-2 * l2 // nbytes))


def _try(fn, errors, label):
    try:
        return fn()
    except Exception as err:  # one peer failing must not hide the others
        errors.append(f"{label}: {type(err).__name__}: {err}")
        return None


def _compiled_flex():
    """(torch.compile'd flex_attention, create_block_mask), or (None, None) where FlexAttention is missing.

    Every workload's mask_mod and every shape is new to Dynamo: the recompile limits are raised so that each
    compiles, instead of falling back, after the eighth, to an unfused flex_attention that materialises the scores.
    """
    import torch

    for limit in ("recompile_limit", "accumulated_recompile_limit", "cache_size_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 4096)
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        print("FlexAttention is not importable: its columns are skipped")
        return None, None
    return torch.compile(flex_attention, dynamic=False), create_block_mask


def gpu(args) -> list[dict]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import maskattn
    from maskattn import _cuda

    flex, create_block_mask = _compiled_flex()
    device = "cuda"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    B, H, D = args.batch, args.heads, args.head_dim
    tile = _cuda.tile_for(D, np.float16 if args.dtype == "fp16" else "bfloat16")
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
                _cuda.device_plan(maskattn.compile_mask(spec, tile))
                torch.cuda.synchronize()

            row["maskattn_compile_ms"] = _median_ms(compile_and_upload, 20)
            plan = maskattn.compile_mask(spec, tile)
            stats = plan.stats(D)
            row.update(density=stats["density"], active=stats["active_blocks"], partial=stats["partial_blocks"],
                       total=stats["total_blocks"], fwd_flops=B * H * stats["fwd_flops"])
            if args.plans_only:
                mask_mod = flex_mask_mod(name, spec, device) if flex is not None else None
                if mask_mod is not None:
                    create_block_mask(mask_mod, 1, 1, n_q, n_k, device=device)
                    row["flex_create_block_mask_ms"] = _bench_ms(
                        lambda: create_block_mask(mask_mod, 1, 1, n_q, n_k, device=device))
                cbm = row.get("flex_create_block_mask_ms")
                print(f"{n:6d} {name:16s} compile+upload {row['maskattn_compile_ms']:8.3f} ms  flex create_block_mask "
                      f"{_fmt(cbm)} ms  ratio {_fmt(None if cbm is None else row['maskattn_compile_ms'] / cbm)}",
                      flush=True)
                rows.append(row)
                continue
            out = maskattn.attention(q, k, v, spec)
            row["maskattn_fwd_ms"] = _bench_ms(lambda: maskattn.attention(q, k, v, spec))
            if args.backward:
                def fwd_bwd():
                    o, lse = maskattn.attention(q, k, v, spec, return_lse=True)
                    return maskattn.attention_backward(do, q, k, v, o, lse, spec)

                row["maskattn_fwdbwd_ms"] = _try(lambda: _bench_ms(fwd_bwd), errors, "maskattn backward")

            dense = torch.as_tensor(spec.to_dense()[0, 0], device=device)
            if spec.perm is not None:
                p = torch.as_tensor(spec.perm, device=device)
                dense = dense[p][:, p]
                qp, kp, vp = q[:, :, p], k[:, :, p], v[:, :, p]
            else:
                qp, kp, vp = q, k, v
            ref = _try(lambda: F.scaled_dot_product_attention(qp, kp, vp, attn_mask=dense), errors, "sdpa mask")
            if ref is not None:
                if spec.perm is not None:
                    ref = torch.empty_like(ref).index_copy_(2, p, ref)
                seen = dense.any(-1)
                if spec.perm is not None:
                    seen = torch.empty_like(seen).index_copy_(0, p, seen)
                diff = (out.float() - ref.float())[:, :, seen]
                row["rel_err_vs_sdpa"] = float(diff.norm() / ref.float()[:, :, seen].norm())
                row["sdpa_mask_fwd_ms"] = _bench_ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=dense))
                if args.backward:
                    row["sdpa_mask_fwdbwd_ms"] = _try(lambda: _fwd_bwd_ms(
                        lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=dense), q, k, v, do),
                        errors, "sdpa mask backward")
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                row["sdpa_flash_nomask_fwd_ms"] = _try(lambda: _bench_ms(
                    lambda: F.scaled_dot_product_attention(q, k, v)), errors, "sdpa flash")
                if args.backward:
                    row["sdpa_flash_nomask_fwdbwd_ms"] = _try(lambda: _fwd_bwd_ms(
                        F.scaled_dot_product_attention, q, k, v, do), errors, "sdpa flash backward")
            if flex is not None:
                mask_mod = flex_mask_mod(name, spec, device)
                block_mask = None
                if mask_mod is not None:
                    block_mask = create_block_mask(mask_mod, 1, 1, n_q, n_k, device=device)
                    row["flex_create_block_mask_ms"] = _bench_ms(
                        lambda: create_block_mask(mask_mod, 1, 1, n_q, n_k, device=device))
                row["flex_fwd_ms"] = _try(lambda: _bench_ms(lambda: flex(q, k, v, block_mask=block_mask)),
                                          errors, "flex")
                if args.backward:
                    row["flex_fwdbwd_ms"] = _try(lambda: _fwd_bwd_ms(
                        lambda a, b, c: flex(a, b, c, block_mask=block_mask), q, k, v, do), errors, "flex backward")
            row["errors"] = errors
            rows.append(row)
            _print_row(row, args.backward)
            torch.cuda.empty_cache()
    return rows


# ------------------------------------------------------------------------------------------------ decode

def _copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written, on 1 GiB buffers."""
    import torch

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / (_bench_ms(lambda: dst.copy_(src)) * 1e6)


def decode(args) -> list[dict]:
    """Tree verification (MEDUSA mc_sim_7b_63 over prefixes, MHA) and single-token decode (GQA) for maskattn,
    FlexAttention, SDPA with the dense mask and SDPA without a mask; KV-read bandwidth = K and V bytes / time.

    Each peer is timed twice on the same inputs: ``do_bench`` (one call after an L2 flush, launch and host time
    included) and :func:`graph_ms` (calls replayed in a CUDA graph: the kernels alone). The graph rotates through
    :func:`input_sets` copies of the inputs, so that every call reads K and V from device memory; single-token
    decode over 4096+ tokens (134+ MB of K and V) needs one."""
    import torch
    import torch.nn.functional as F

    import maskattn
    from . import masks

    flex, create_block_mask = _compiled_flex()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    D = args.head_dim
    copy_gbs = _copy_bandwidth()
    print(f"device-to-device copy: {copy_gbs:.0f} GB/s (read + write)")
    cases = [("tree", prefix, batch, 32, 32) for prefix in args.prefix for batch in (1, 8)]
    cases += [("decode", cache, 8, 32, 8) for cache in args.cache]
    rows = []
    for kind, context, B, H, Hk in cases:
        if kind == "tree":
            spec = masks.medusa_tree(workloads.MC_SIM_7B_63, prefix_len=context)
            tree = torch.as_tensor(spec.to_dense()[0, 0, :, context:], device="cuda")

            def mask_mod(b, h, q, kv, tree=tree, prefix=context):
                return (kv < prefix) | tree[q, (kv - prefix).clamp(min=0)]
        else:
            spec = masks.causal(1, context)
            mask_mod = None  # the one new token sees the whole cache
        n_q, n_k = spec.n_q, spec.n_k
        kv_bytes = 2 * B * Hk * n_k * D * torch.finfo(dtype).bits // 8
        gen = torch.Generator(device="cuda").manual_seed(args.seed)
        inputs = [(torch.randn(B, H, n_q, D, device="cuda", dtype=dtype, generator=gen),
                   *(torch.randn(B, Hk, n_k, D, device="cuda", dtype=dtype, generator=gen) for _ in range(2)))
                  for _ in range(input_sets(kv_bytes))]
        dense = torch.as_tensor(spec.to_dense()[0, 0], device="cuda")
        row = {"kind": kind, "context": context, "B": B, "H": H, "Hk": Hk, "D": D, "n_q": n_q, "n_k": n_k,
               "kv_bytes": kv_bytes, "graph_input_sets": len(inputs)}
        errors = []
        gqa = {"enable_gqa": True} if H != Hk else {}
        block_mask = None
        if flex is not None and mask_mod is not None:
            block_mask = create_block_mask(mask_mod, None, None, n_q, n_k, device="cuda")
        peers = {
            "maskattn": lambda q, k, v: maskattn.attention(q, k, v, spec),
            "sdpa_mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dense, **gqa),
            "sdpa_nomask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **gqa),
        }
        if flex is not None:
            peers["flex"] = lambda q, k, v: flex(q, k, v, block_mask=block_mask, **gqa)
        out = peers["maskattn"](*inputs[0])
        ref = _try(lambda: peers["sdpa_mask"](*inputs[0]), errors, "sdpa_mask")
        if ref is not None:
            row["rel_err_vs_sdpa"] = float((out.float() - ref.float()).norm() / ref.float().norm())
        for name, attn in peers.items():
            if name == "sdpa_mask" and ref is None:
                continue
            calls = [functools.partial(attn, *x) for x in inputs]
            row[f"{name}_ms"] = _try(lambda: _bench_ms(calls[0]), errors, name)
            row[f"{name}_graph_ms"] = _try(lambda: graph_ms(calls), errors, f"{name} in a CUDA graph")
        row["errors"] = errors
        rows.append(row)
        _print_decode_row(row, copy_gbs)
        torch.cuda.empty_cache()
    for row in rows:
        row["copy_gbs"] = copy_gbs
    return rows


_DECODE_PEERS = (("maskattn", "maskattn"), ("sdpa_nomask", "SDPA no-mask"), ("sdpa_mask", "SDPA mask"),
                 ("flex", "Flex"))


def _pct_of_copy(row, key, copy_gbs):
    """Percent of the copy bandwidth that reading K and V once in ``row[key]`` milliseconds achieves."""
    ms = row.get(key)
    return None if ms is None else 100 * row["kv_bytes"] / ms / 1e6 / copy_gbs


def _ratio(a, b):
    return None if a is None or b is None else a / b


def _print_decode_row(row, copy_gbs):
    print(f"{row['kind']:6s} ctx {row['context']:6d} B {row['B']} H {row['H']}/{row['Hk']}"
          f" (graph: {row['graph_input_sets']} input set{'s' if row['graph_input_sets'] > 1 else ''})", flush=True)
    for key, label in _DECODE_PEERS:
        ms, graph = row.get(f"{key}_ms"), row.get(f"{key}_graph_ms")
        pct, graph_pct = (_pct_of_copy(row, k, copy_gbs) for k in (f"{key}_ms", f"{key}_graph_ms"))
        ratios = (_ratio(row.get("maskattn_ms"), ms), _ratio(row.get("maskattn_graph_ms"), graph))
        print(f"    {label:13s} do_bench {_fmt(ms, '.4f')} ms ({_fmt(pct, '3.0f')}% of copy)  graph"
              f" {_fmt(graph, '.4f')} ms ({_fmt(graph_pct, '3.0f')}%)  maskattn / this"
              f" {_fmt(ratios[0], '.2f')} / {_fmt(ratios[1], '.2f')}", flush=True)
    print(f"    err vs SDPA {_fmt(row.get('rel_err_vs_sdpa'), '.1e')}", flush=True)
    for err in row["errors"]:
        print(f"    ! {err}", flush=True)


def _decode_markdown(rows) -> str:
    """Per peer: do_bench ms and graph ms; for maskattn also % of copy bandwidth from both; for the others, maskattn's
    time over theirs (< 1: maskattn is faster), from both."""
    head = ["case", "context", "B", "H/Hk", "maskattn ms", "% of copy", "graph ms", "% of copy"]
    for _, label in _DECODE_PEERS[1:]:
        head += [f"{label} ms", "ours /", "graph ms", "ours /"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["kind"], r["context"], r["B"], f"{r['H']}/{r['Hk']}"]
        for key in ("maskattn_ms", "maskattn_graph_ms"):
            cells += [_fmt(r.get(key), ".4f"), _fmt(_pct_of_copy(r, key, r["copy_gbs"]), ".0f")]
        for peer, _ in _DECODE_PEERS[1:]:
            for key, ours in ((f"{peer}_ms", "maskattn_ms"), (f"{peer}_graph_ms", "maskattn_graph_ms")):
                cells += [_fmt(r.get(key), ".4f"), _fmt(_ratio(r.get(ours), r.get(key)), ".2f")]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def _fwd_bwd_ms(attn, q, k, v, do) -> float:
    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))

    def step():
        qg.grad = kg.grad = vg.grad = None
        attn(qg, kg, vg).backward(do)

    return _bench_ms(step)


def _fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def _print_row(row, backward):
    flex = row.get("flex_fwd_ms")
    ours = row["maskattn_fwd_ms"]
    tflops = row["fwd_flops"] / ours / 1e9
    cbm = row.get("flex_create_block_mask_ms")
    line = (f"{row['n']:6d} {row['workload']:16s} dens {row['density']:.3f} "
            f"blocks {row['active']:6d}/{row['total']:<6d} | compile {row['maskattn_compile_ms']:7.3f} ms"
            f" (flex cbm {_fmt(cbm)}) | fwd {ours:7.3f} ms {tflops:5.0f} TF/s {100 * tflops / PEAK_TFLOPS:3.0f}%"
            f" | flex {_fmt(flex)} ({_fmt(None if flex is None else ours / flex, '.2f')}x)"
            f" sdpa-mask {_fmt(row.get('sdpa_mask_fwd_ms'))} flash-nomask {_fmt(row.get('sdpa_flash_nomask_fwd_ms'))}")
    if backward:
        fb, ffb = row.get("maskattn_fwdbwd_ms"), row.get("flex_fwdbwd_ms")
        line += (f" | fwd+bwd {_fmt(fb)} flex {_fmt(ffb)}"
                 f" ({_fmt(None if fb is None or ffb is None else fb / ffb, '.2f')}x)"
                 f" sdpa-mask {_fmt(row.get('sdpa_mask_fwdbwd_ms'))} flash {_fmt(row.get('sdpa_flash_nomask_fwdbwd_ms'))}")
    line += f" | err {_fmt(row.get('rel_err_vs_sdpa'), '.1e')}"
    print(line, flush=True)
    for err in row["errors"]:
        print(f"    ! {err}", flush=True)


def _markdown(rows, backward) -> str:
    head = ["n", "workload", "density", "active/total", "compile+upload ms", "flex cbm ms", "fwd ms", "TFLOP/s",
            "% of 790", "flex fwd ms", "ratio", "sdpa mask fwd ms", "flash no-mask fwd ms"]
    if backward:
        head += ["fwd+bwd ms", "flex fwd+bwd ms", "ratio", "sdpa mask fwd+bwd ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        t = r["fwd_flops"] / r["maskattn_fwd_ms"] / 1e9
        flex = r.get("flex_fwd_ms")
        cells = [r["n"], r["workload"], f"{r['density']:.3f}", f"{r['active']}/{r['total']}",
                 f"{r['maskattn_compile_ms']:.3f}", _fmt(r.get("flex_create_block_mask_ms"), ".2f"),
                 f"{r['maskattn_fwd_ms']:.3f}", f"{t:.0f}", f"{100 * t / PEAK_TFLOPS:.0f}", _fmt(flex),
                 _fmt(None if flex is None else r["maskattn_fwd_ms"] / flex, ".2f"), _fmt(r.get("sdpa_mask_fwd_ms")),
                 _fmt(r.get("sdpa_flash_nomask_fwd_ms"))]
        if backward:
            fb, ffb = r.get("maskattn_fwdbwd_ms"), r.get("flex_fwdbwd_ms")
            cells += [_fmt(fb), _fmt(ffb), _fmt(None if fb is None or ffb is None else fb / ffb, ".2f"),
                      _fmt(r.get("sdpa_mask_fwdbwd_ms"))]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def _picture(rows, path, args):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG")
        return
    import maskattn

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


def main(args) -> int:
    out_dir = pathlib.Path(args.out) if args.out else None
    if args.decode:
        rows = decode(args)
        print()
        print(_decode_markdown(rows))
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "decode.json").write_text(json.dumps(rows, indent=1))
            (out_dir / "decode.md").write_text(_decode_markdown(rows) + "\n")
        return 0
    if args.host:
        rows = host(args)
    else:
        rows = gpu(args)
        if args.plans_only:
            return 0
        print()
        print(_markdown(rows, args.backward))
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / ("host.json" if args.host else "bench.json")).write_text(json.dumps(rows, indent=1))
        if not args.host:
            (out_dir / "bench.md").write_text(_markdown(rows, args.backward) + "\n")
            _picture(rows, out_dir / "bench.png", args)
    return 0


def add_arguments(p):
    p.add_argument("--n", type=int, nargs="+", default=[8192, 16384])
    p.add_argument("--workloads", nargs="+", default=list(workloads.NAMES), choices=workloads.NAMES,
                   metavar="NAME")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--backward", action="store_true", help="also time forward+backward")
    p.add_argument("--host", action="store_true", help="time only the plan compiler, on the CPU")
    p.add_argument("--decode", action="store_true",
                   help="inference shapes: MEDUSA tree verification and single-token decode (GPU)")
    p.add_argument("--prefix", type=int, nargs="+", default=[1024, 4096, 16384], help="--decode: tree prefixes")
    p.add_argument("--cache", type=int, nargs="+", default=[4096, 16384, 65536], help="--decode: cache lengths")
    p.add_argument("--plans-only", action="store_true",
                   help="GPU: time only plan compile + upload beside Flex's create_block_mask")
    p.add_argument("--tile", type=int, nargs=2, default=[128, 128], help="--host: the tile to compile for")
    p.add_argument("--threads", type=int, default=None, help="--host: compile threads for dense / sparse masks")
    p.add_argument("--reps", type=int, default=50, help="--host: repetitions per workload")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="folder for bench.json, bench.md and bench.png")
