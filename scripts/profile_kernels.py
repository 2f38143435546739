"""GPU time per kernel of one forward+backward step, maskattn beside FlexAttention (GPU machine, torch.profiler):

    python3 scripts/profile_kernels.py [--n 16384] [--head-dim 128] [--workloads graph_rcm lf_dilated ...]

Prints, per workload and library, each kernel's time per step (us) and the total.
"""

import argparse
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import maskattn
from maskattn.bench import workloads
from maskattn.bench.peers import compiled_flex, flex_mask_mod


def kernel_us(step, iters=5):
    """{kernel name: GPU us per step}, from a profile of `iters` steps after a warm-up."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
    times = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name[:70]] += event.device_time / iters
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=16384)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--workloads", nargs="+", default=["graph_rcm", "lf_dilated", "bigbird", "causal"])
    args = p.parse_args()
    flex, create_block_mask = compiled_flex()
    B, H, D, n = 1, args.heads, args.head_dim, args.n
    for name in args.workloads:
        spec = workloads.build(name, n)
        q, k, v, do = (torch.randn(B, H, n, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))

        def ours():
            o, lse = maskattn.attention(q, k, v, spec, return_lse=True)
            maskattn.attention_backward(do, q, k, v, o, lse, spec)

        mask_mod = flex_mask_mod(name, spec, "cuda")
        block_mask = create_block_mask(mask_mod, 1, 1, n, n, device="cuda") if mask_mod is not None else None
        qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))

        def theirs():
            qg.grad = kg.grad = vg.grad = None
            flex(qg, kg, vg, block_mask=block_mask).backward(do)

        for label, step in (("maskattn", ours), ("flex", theirs)):
            times = kernel_us(step)
            print(f"== {name} n={n} D={D} {label}: {sum(times.values()):8.1f} us per fwd+bwd step")
            for kernel, us in sorted(times.items(), key=lambda kv: -kv[1]):
                if us >= 1.0:
                    print(f"   {us:8.1f}  {kernel}")


if __name__ == "__main__":
    main()
