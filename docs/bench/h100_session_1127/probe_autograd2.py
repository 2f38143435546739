"""Host time of maskattn's backward pieces in the autograd worker thread, and of an eager path without custom ops."""
import collections, functools, threading, time
import numpy as np, torch
import maskattn
from maskattn import api
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
spent = collections.defaultdict(float)
calls = collections.Counter()


def timed(name, fn):
    @functools.wraps(fn)
    def inner(*a, **kw):
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            spent[name, threading.current_thread().name] += time.perf_counter() - t
            calls[name, threading.current_thread().name] += 1
    return inner


api.attention_backward = timed("api.attention_backward", api.attention_backward)
api.attention = timed("api.attention", api.attention)
maskattn.torch.api = api
import maskattn.backends.cuda.bwd as bwdmod
bwdmod._BackwardLaunch.__call__ = timed("_BackwardLaunch.__call__", bwdmod._BackwardLaunch.__call__)


class Eager(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, c):
        out, lse = api.attention(a.detach(), b.detach(), c.detach(), plan, return_lse=True, check_finite=False)
        ctx.save_for_backward(a, b, c, out, lse)
        return out

    @staticmethod
    def backward(ctx, g):
        a, b, c, out, lse = ctx.saved_tensors
        return api.attention_backward(g.contiguous(), a, b, c, out, lse, plan, check_finite=False)


steps = {"custom ops (main)": lambda a, b, c: maskattn.torch.attention(a, b, c, plan),
         "autograd.Function, no custom op": Eager.apply}
for mt in (True, False):
    torch.autograd.set_multithreading_enabled(mt)
    for label, fn in steps.items():
        step = fwd_bwd_step(fn, q, k, v, do)
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        spent.clear(); calls.clear()
        ms = median_ms(step, 40)
        torch.cuda.synchronize()
        parts = "; ".join(f"{name}@{th[:10]} {spent[name, th] / calls[name, th] * 1e6:.0f} us"
                          for name, th in sorted(spent))
        print(f"multithreading {mt!s:5s} {label:34s} host per step {ms * 1e3:7.1f} us | {parts}", flush=True)
