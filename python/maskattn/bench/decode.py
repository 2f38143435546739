"""``python -m maskattn bench --decode``: inference shapes, MEDUSA tree verification and single-token decode over a KV
cache, with the KV-read bandwidth each achieves, each peer both with do_bench's samples (one call after an L2 flush)
and replayed in a CUDA graph (many calls, no host work between), in turns with the case's other peers."""

from __future__ import annotations

import functools

import maskattn
from maskattn import masks

from . import workloads
from .common import copy_bandwidth, fmt, input_sets, print_report, ratio, timed_in_turns, try_
from .peers import compiled_flex


def run(args) -> list[dict]:
    """Tree verification (MEDUSA mc_sim_7b_63 over prefixes, MHA) and single-token decode (GQA) for maskattn,
    FlexAttention, SDPA with the dense mask and SDPA without a mask; KV-read bandwidth = K and V bytes / time.

    Each peer is timed twice on the same inputs, both times in turns with the row's other peers
    (:func:`.common.timed_in_turns`): do_bench's samples (one call after an L2 flush, launch and host time included
    where the host falls behind) and replays of CUDA graphs (the kernels alone). The graphs rotate through
    :func:`input_sets` copies of the inputs, so that every call reads K and V from device memory; single-token
    decode over 4096+ tokens (134+ MB of K and V) needs one."""
    import torch
    import torch.nn.functional as F

    flex, create_block_mask = compiled_flex()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    D = args.head_dim
    copy_gbs = copy_bandwidth()
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
        ref = try_(lambda: peers["sdpa_mask"](*inputs[0]), errors, "sdpa_mask")
        if ref is not None:
            row["rel_err_vs_sdpa"] = float((out.float() - ref.float()).norm() / ref.float().norm())
        calls = {name: [functools.partial(attn, *x) for x in inputs] for name, attn in peers.items()
                 if name != "sdpa_mask" or ref is not None}
        for suffix, graph in (("_ms", False), ("_graph_ms", True)):
            times, reasons = timed_in_turns({name: c if graph else c[0] for name, c in calls.items()}, graph)
            row.update({f"{name}{suffix}": times.get(name) for name in calls})
            errors += [f"{name}{' in a CUDA graph' if graph else ''}: {reason}" for name, reason in reasons.items()]
        row["errors"] = errors
        rows.append(row)
        print_row(row, copy_gbs)
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


def print_row(row, copy_gbs):
    print(f"{row['kind']:6s} ctx {row['context']:6d} B {row['B']} H {row['H']}/{row['Hk']}"
          f" (graph: {row['graph_input_sets']} input set{'s' if row['graph_input_sets'] > 1 else ''})", flush=True)
    for key, label in _DECODE_PEERS:
        ms, graph = row.get(f"{key}_ms"), row.get(f"{key}_graph_ms")
        pct, graph_pct = (_pct_of_copy(row, k, copy_gbs) for k in (f"{key}_ms", f"{key}_graph_ms"))
        ratios = (ratio(row.get("maskattn_ms"), ms), ratio(row.get("maskattn_graph_ms"), graph))
        print(f"    {label:13s} turns {fmt(ms, '.4f')} ms ({fmt(pct, '3.0f')}% of copy)  graph"
              f" {fmt(graph, '.4f')} ms ({fmt(graph_pct, '3.0f')}%)  maskattn / this"
              f" {fmt(ratios[0], '.2f')} / {fmt(ratios[1], '.2f')}", flush=True)
    print_report(f"    err vs SDPA {fmt(row.get('rel_err_vs_sdpa'), '.1e')}", row["errors"])


def markdown(rows) -> str:
    """Per peer: ms in turns (do_bench's samples) and in graphs; for maskattn also % of copy bandwidth from both; for
    the others, maskattn's time over theirs (< 1: maskattn is faster), from both."""
    head = ["case", "context", "B", "H/Hk", "maskattn ms", "% of copy", "graph ms", "% of copy"]
    for _, label in _DECODE_PEERS[1:]:
        head += [f"{label} ms", "ours /", "graph ms", "ours /"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["kind"], r["context"], r["B"], f"{r['H']}/{r['Hk']}"]
        for key in ("maskattn_ms", "maskattn_graph_ms"):
            cells += [fmt(r.get(key), ".4f"), fmt(_pct_of_copy(r, key, r["copy_gbs"]), ".0f")]
        for peer, _ in _DECODE_PEERS[1:]:
            for key, ours in ((f"{peer}_ms", "maskattn_ms"), (f"{peer}_graph_ms", "maskattn_graph_ms")):
                cells += [fmt(r.get(key), ".4f"), fmt(ratio(r.get(ours), r.get(key)), ".2f")]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)
