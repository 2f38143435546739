"""Where maskattn's own host time goes in api.attention / api.attention_backward on torch CUDA tensors."""
import cProfile, io, pstats
import numpy as np, torch
from maskattn import api
from maskattn._arrays import cupy_or_none, torch_view
from maskattn.backends import cuda
from maskattn.backends.cuda import plans
from maskattn.bench import workloads

H, D, n = 16, 128, 16384
cupy = cupy_or_none()
tile = cuda.tile_for(D, "bfloat16")
mask = torch.as_tensor(np.ascontiguousarray(workloads.build("lf_dilated", n, seed=0).to_dense()[0, 0]), device="cuda")
q = torch.randn(1, H, n, D, device="cuda", dtype=torch.bfloat16)
k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
plan = plans.dense_plan(torch_view(cupy, mask[None, None]), tile)
out, lse = api.attention(q, k, v, plan, return_lse=True, check_finite=False)
for label, fn in (("forward", lambda: api.attention(q, k, v, plan, return_lse=True, check_finite=False)),
                  ("backward", lambda: api.attention_backward(do, q, k, v, out, lse, plan, check_finite=False))):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(200):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
    print(label, s.getvalue()[-5000:])
