"""Does a fwd+bwd step through maskattn.torch wait for the GPU? Queue a long sleep kernel first, then run steps."""
import cProfile, pstats, io, time
import numpy as np, torch
import maskattn
from maskattn._arrays import cupy_or_none, torch_view
from maskattn.backends import cuda
from maskattn.backends.cuda import plans
from maskattn.bench import workloads
from maskattn.bench.common import fwd_bwd_step

H, D, n = 16, 128, 16384
cupy = cupy_or_none()
tile = cuda.tile_for(D, "bfloat16")
spec = workloads.build("lf_dilated", n, seed=0)
mask = torch.as_tensor(np.ascontiguousarray(spec.to_dense()[0, 0]), device="cuda")
q = torch.randn(1, H, n, D, device="cuda", dtype=torch.bfloat16)
k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
plan = plans.dense_plan(torch_view(cupy, mask[None, None]), tile)
fns = {"wrapper": lambda a, b, c: maskattn.torch.scaled_dot_product_attention(a, b, c, attn_mask=mask),
       "precompiled": lambda a, b, c: maskattn.torch.attention(a, b, c, plan),
       "sdpa_flash": lambda a, b, c: torch.nn.functional.scaled_dot_product_attention(a, b, c)}
for label, fn in fns.items():
    step = fwd_bwd_step(fn, q, k, v, do)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU time queued ahead of the steps
    times = []
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(10):
        t = time.perf_counter(); step(); times.append((time.perf_counter() - t) * 1e3)
    pr.disable()
    t = time.perf_counter(); torch.cuda.synchronize(); left = (time.perf_counter() - t) * 1e3
    print(f"{label}: host ms per step behind a sleeping GPU {[round(x, 3) for x in times]}; sync after: {left:.0f} ms")
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(6)
    print(s.getvalue()[-1800:])
