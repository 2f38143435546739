"""Where the host time of a fwd+bwd step through maskattn.torch goes (cProfile, no sync inside the steps)."""
import cProfile, pstats, io, sys
import numpy as np, torch
import maskattn
from maskattn._arrays import cupy_or_none, torch_view
from maskattn.backends import cuda
from maskattn.backends.cuda import plans
from maskattn.bench import workloads
from maskattn.bench.common import fwd_bwd_step, median_ms

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
    fwd = lambda: fn(q, k, v)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    print(f"{label}: host fwd {median_ms(fwd, 30):.3f} ms, host fwd+bwd step {median_ms(step, 30):.3f} ms", flush=True)
    torch.cuda.synchronize()
    if label == "sdpa_flash":
        continue
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(50):
        step()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(28)
    print(s.getvalue()[-6000:])
