"""Single-token decode (B = 8, 32 query heads over 8 KV heads, D = 128, bf16) per decode tile and split count: GPU
time per call in a CUDA graph (maskattn.bench.graph_ms) and its % of the device-to-device copy bandwidth, beside
SDPA without a mask; the output is checked against SDPA. Decode tiles are taken from _cuda._DECODE_CONFIGS'
alternatives by overriding it, so that every configuration runs in one process. Last per cache size: the public call
with run-time cache lengths (cache_seqlens) covering the whole cache, then half of it.

    python3 scripts/decode_tiles.py [--cache 4096 16384 65536]
"""

import argparse

import cupy as cp
import torch
import torch.nn.functional as F

import maskattn
from maskattn import _cuda, compile_mask, masks
from maskattn.bench import _copy_bandwidth, graph_ms

B, H, Hk, D = 8, 32, 8, 128
PACK = H // Hk
# (decode configuration, split counts to force; None: the heuristic's)
CASES = (((64, 64, 4, 2), (None,)), ((16, 64, 4, 2), (None, 4)), ((16, 128, 8, 2), (None, 4)),
         ((16, 128, 8, 3), (None, 4)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", type=int, nargs="+", default=[4096, 16384, 65536])
    args = parser.parse_args()
    copy_gbs = _copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}: device-to-device copy {copy_gbs:.0f} GB/s (read + write)")
    shipped = _cuda._DECODE_CONFIGS
    for n_k in args.cache:
        gen = torch.Generator(device="cuda").manual_seed(n_k)
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        k, v = (torch.randn(B, Hk, n_k, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
        ref = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        kv_bytes = 2 * k.numel() * k.element_size()

        def report(label, splits, fn, out=None):
            err = "-"
            if out is not None:
                fn()
                err = f"{float((out.float() - ref.float()).norm() / ref.float().norm()):.1e}"
            us = graph_ms([fn]) * 1e3
            print(f"ctx {n_k:6d} {label:14s} splits {splits:>3}  {us:8.2f} us  "
                  f"{100 * kv_bytes / (us * 1e3) / copy_gbs:5.1f}% of copy  err vs SDPA {err}", flush=True)

        report("SDPA no mask", "-", lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
        qc, kc, vc = (cp.from_dlpack(x) for x in (q, k, v))
        for config, split_counts in CASES:
            _cuda._DECODE_CONFIGS = (config,)
            plan = compile_mask(masks.causal(1, n_k).repeat_rows(PACK), tile=config[:2])
            for splits in split_counts:
                launch = _cuda.forward_launch(qc, kc, vc, plan, D ** -0.5, num_splits=splits, pack=PACK)
                out = torch.empty_like(q)
                lse = torch.empty(B, H, 1, device="cuda", dtype=torch.float32)
                parts = [torch.empty(s, device="cuda", dtype=torch.float32) for s in launch.part_shapes]
                addresses = [x.data_ptr() for x in (q, k, v, out, lse, *parts)]
                report(str(config), launch.num_splits,
                       lambda: launch(torch.cuda.current_stream().cuda_stream, *addresses), out)
        _cuda._DECODE_CONFIGS = shipped
        # the public call with run-time cache lengths (one plan for the capacity): all of it, then half of it
        for fraction in (1, 2):
            lens = torch.full((B,), n_k // fraction, dtype=torch.int32, device="cuda")
            out = maskattn.attention(q, k, v, cache_seqlens=lens)
            if fraction == 1:
                report("cache_seqlens", "auto", lambda: maskattn.attention(q, k, v, cache_seqlens=lens), out)
            else:  # reads half the cache: bandwidth counted on the whole cache's bytes, so ~2x the % is the rate
                report("cache_seqlens/2", "auto", lambda: maskattn.attention(q, k, v, cache_seqlens=lens))


if __name__ == "__main__":
    main()
