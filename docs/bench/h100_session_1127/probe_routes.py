"""Before / after in one process: a fwd+bwd step through the custom ops (the route every call took before) and
through the eager autograd.Function (the route eager calls take now); host time per step, and do_bench's time."""
import sys
import numpy as np, torch
import maskattn
from maskattn import api
from maskattn._arrays import cupy_or_none, torch_view
from maskattn.backends import cuda
from maskattn.backends.cuda import plans
from maskattn.bench import workloads
from maskattn.bench.common import bench_ms, fwd_bwd_step, median_ms

H, D, n = 16, 128, 16384
cupy = cupy_or_none()
tile = cuda.tile_for(D, "bfloat16")
scale = D ** -0.5
print(torch.cuda.get_device_name())
for name in sys.argv[1:]:
    spec = workloads.build(name, n, seed=0)
    dense = spec.to_dense()[0, 0]
    if spec.perm is not None:
        dense = dense[spec.perm][:, spec.perm]
    mask = torch.as_tensor(np.ascontiguousarray(dense), device="cuda")
    q = torch.randn(1, H, n, D, device="cuda", dtype=torch.bfloat16)
    k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
    plan = plans.dense_plan(torch_view(cupy, mask[None, None]), tile)
    handle = maskattn.torch.mask_handle(plan)
    routes = {
        "precompiled, custom ops": lambda a, b, c: torch.ops.maskattn.attention(a, b, c, handle, scale, "bhnd")[0],
        "precompiled, eager": lambda a, b, c: maskattn.torch.attention(a, b, c, handle),
        "sdpa wrapper, custom ops": lambda a, b, c: torch.ops.maskattn.sdpa(a, b, c, mask[None, None], False, scale)[0],
        "sdpa wrapper, eager": lambda a, b, c: maskattn.torch.scaled_dot_product_attention(a, b, c, attn_mask=mask),
    }
    rows = {label: ([], []) for label in routes}
    for _ in range(3):
        for label, fn in routes.items():
            step = fwd_bwd_step(fn, q, k, v, do)
            for _ in range(5):
                step()
            torch.cuda.synchronize()
            rows[label][0].append(median_ms(step, 40))
            torch.cuda.synchronize()
            rows[label][1].append(bench_ms(step))
    for label, (host, gpu) in rows.items():
        print(f"{name:10s} {label:26s} host per fwd+bwd step {np.median(host) * 1e3:7.1f} us "
              f"{[round(x * 1e3) for x in host]} | do_bench fwd+bwd {np.median(gpu):.3f} ms {[round(x, 3) for x in gpu]}",
              flush=True)
