"""The garbage collector's share of a fwd+bwd step's host time on CUDA tensors: collections and their time per step,
and what cyclic garbage a step leaves (gc.DEBUG_SAVEALL)."""
import collections, gc, time
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
mask = torch.as_tensor(np.ascontiguousarray(workloads.build("lf_dilated", n, seed=0).to_dense()[0, 0]), device="cuda")
q = torch.randn(1, H, n, D, device="cuda", dtype=torch.bfloat16)
k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
plan = plans.dense_plan(torch_view(cupy, mask[None, None]), tile)
handle = maskattn.torch.mask_handle(plan)
print("objects tracked:", len(gc.get_objects()), "thresholds", gc.get_threshold())
spent, starts = collections.Counter(), {}


def callback(phase, info):
    if phase == "start":
        starts["t"] = time.perf_counter()
    else:
        spent[info["generation"], "n"] += 1
        spent[info["generation"], "s"] += time.perf_counter() - starts["t"]


gc.callbacks.append(callback)
routes = {"precompiled": lambda a, b, c: maskattn.torch.attention(a, b, c, handle),
          "sdpa wrapper": lambda a, b, c: maskattn.torch.scaled_dot_product_attention(a, b, c, attn_mask=mask),
          "torch sdpa flash": torch.nn.functional.scaled_dot_product_attention}
for label, fn in routes.items():
    step = fwd_bwd_step(fn, q, k, v, do)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    spent.clear()
    ms = median_ms(step, 200)
    torch.cuda.synchronize()
    per = {g: (spent[g, "n"] / 200, spent[g, "s"] / 200 * 1e6) for g in range(3)}
    print(f"{label:16s} host per step {ms * 1e3:6.0f} us | per step, by generation: collections, us: "
          + "; ".join(f"gen{g} {c:.3f} {t:.0f} us" for g, (c, t) in per.items()), flush=True)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    gc.collect()
    gc.set_debug(0)
    kinds = collections.Counter(type(o).__qualname__ for o in gc.garbage)
    print(f"    cyclic garbage per step: {len(gc.garbage) / 20:.0f} objects; {kinds.most_common(10)}", flush=True)
    names = collections.Counter(getattr(o, "__qualname__", None) or "" for o in gc.garbage if callable(o))
    print(f"    callables among it: {names.most_common(8)}", flush=True)
    gc.garbage.clear()
