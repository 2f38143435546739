"""Host time of a fwd+bwd step, layer by layer: maskattn's own calls, the torch ops, autograd."""
import inspect, time
import numpy as np, torch
import maskattn
from maskattn import api
from maskattn._arrays import cupy_or_none, torch_view
from maskattn.backends import cuda
from maskattn.backends.cuda import plans
from maskattn.bench import workloads
from maskattn.bench.common import fwd_bwd_step, median_ms
import torch._library.custom_ops as co

src = inspect.getsource(co)
at = src.find("def backend_impl")
print(src[at - 200: at + 2600])
H, D, n = 16, 128, 16384
cupy = cupy_or_none()
tile = cuda.tile_for(D, "bfloat16")
spec = workloads.build("lf_dilated", n, seed=0)
mask = torch.as_tensor(np.ascontiguousarray(spec.to_dense()[0, 0]), device="cuda")
q = torch.randn(1, H, n, D, device="cuda", dtype=torch.bfloat16)
k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
plan = plans.dense_plan(torch_view(cupy, mask[None, None]), tile)
out, lse = api.attention(q, k, v, plan, return_lse=True, check_finite=False)
handle = maskattn.torch.mask_handle(plan) if hasattr(maskattn.torch, "mask_handle") else None
scale = 1 / D ** 0.5
cases = {
    "api.attention": lambda: api.attention(q, k, v, plan, scale=scale, return_lse=True, check_finite=False),
    "api.attention_backward": lambda: api.attention_backward(do, q, k, v, out, lse, plan, scale=scale,
                                                             check_finite=False),
    "op attention": lambda: torch.ops.maskattn.attention(q, k, v, handle, scale, "bhnd"),
    "op attention_backward": lambda: torch.ops.maskattn.attention_backward(do, q, k, v, out, lse, handle, scale, "bhnd"),
    "torch.attention fwd (autograd off)": lambda: maskattn.torch.attention(q, k, v, plan),
    "step precompiled": fwd_bwd_step(lambda a, b, c: maskattn.torch.attention(a, b, c, plan), q, k, v, do),
    "sdpa wrapper fwd": lambda: maskattn.torch.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    "op sdpa": lambda: torch.ops.maskattn.sdpa(q, k, v, mask, False, scale),
    "step wrapper": fwd_bwd_step(lambda a, b, c: maskattn.torch.scaled_dot_product_attention(a, b, c, attn_mask=mask),
                                 q, k, v, do),
    "plans.dense_plan": lambda: plans.dense_plan(torch_view(cupy, mask[None, None]), tile),
    "torch.empty x5": lambda: [torch.empty(1000, device="cuda") for _ in range(5)],
}
for label, fn in cases.items():
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ms = median_ms(fn, 40)
    torch.cuda.synchronize()
    print(f"{label:40s} host {ms * 1e3:8.1f} us", flush=True)
