"""Why is the SDPA wrapper's fwd+bwd on graph_rcm ~1 ms slower than the same device plan precompiled?"""
import sys, collections
import numpy as np, torch
import maskattn
from maskattn._arrays import cupy_or_none, torch_view
from maskattn.backends import cuda
from maskattn.backends.cuda import plans
from maskattn.bench import workloads
from maskattn.bench.common import bench_ms, fwd_bwd_step, median_ms

H, D, n = 16, 128, 16384
cupy = cupy_or_none()
tile = cuda.tile_for(D, "bfloat16")
for name in sys.argv[1:]:
    spec = workloads.build(name, n, seed=0)
    dense = spec.to_dense()[0, 0]
    if spec.perm is not None:
        dense = dense[spec.perm][:, spec.perm]
    mask = torch.as_tensor(np.ascontiguousarray(dense), device="cuda")
    n_q, n_k = dense.shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(1, H, n_q, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(1, H, n_k, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    do = torch.randn_like(q)
    plan = plans.dense_plan(torch_view(cupy, mask[None, None]), tile)
    fns = {"wrapper": lambda a, b, c: maskattn.torch.scaled_dot_product_attention(a, b, c, attn_mask=mask),
           "precompiled": lambda a, b, c: maskattn.torch.attention(a, b, c, plan)}
    for label, fn in fns.items():
        step = fwd_bwd_step(fn, q, k, v, do)
        step(); torch.cuda.synchronize()
        ms = bench_ms(step)
        host = median_ms(step, 20); torch.cuda.synchronize()
        def synced():
            step(); torch.cuda.synchronize()
        wall = median_ms(synced, 20)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        per = collections.Counter()
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                per[e.name[:60]] += e.device_time / 5 / 1e3
        print(f"{name:12s} {label:11s} do_bench {ms:.3f} ms | host step {host:.3f} ms | synced step {wall:.3f} ms "
              f"| GPU sum {sum(per.values()):.3f} ms", flush=True)
        for kname, t in per.most_common(8):
            print(f"    {t:8.3f} ms  {kname}")
