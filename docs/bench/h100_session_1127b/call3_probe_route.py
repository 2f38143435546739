"""causal vs block causal vs full: kernel time by route and timing method (H100)."""
import time
import numpy as np, torch, maskattn
from maskattn import masks
from maskattn.bench.common import bench_ms
n, H, D = 16384, 16, 128
j = np.arange(n)
def intervals(ute, first=False):
    cols = np.stack([np.full(n, n), np.full(n, n), np.zeros(n), ute], axis=-1).astype(np.int32)
    if first: cols[0, 2:] = (0, 1)
    return masks.from_intervals(cols[None, None], n_q=n)
specs = {"full": masks.full(n, n), "block causal+1": intervals(128 * (j // 128), True), "causal": masks.causal(n)}
plans = {k: maskattn.compile_mask(s, (128, 128)) for k, s in specs.items()}
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(1, H, n, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
def burst(fn, calls=10, l2=False):
    ts = []
    for _ in range(7):
        if l2: flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls): fn()
        b.record(); b.synchronize(); ts.append(a.elapsed_time(b) / calls)
    return float(np.median(ts))
def host(fn, calls=50):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(calls): fn()
    t1 = time.perf_counter(); torch.cuda.synchronize()
    return (t1 - t) / calls * 1e3
print(torch.cuda.get_device_name())
print("| mask | round | do_bench | burst10 | burst10+flush | single | host ms/call | profiler kernel ms |")
for rnd in range(2):
    for name, plan in plans.items():
        fn = lambda: maskattn.attention(q, k, v, plan)
        fn(); torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5): fn()
            torch.cuda.synchronize()
        ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        kern = {}
        for e in ev: kern.setdefault(e.name, []).append(e.device_time_total / 1e3)
        ktxt = "; ".join(f"{nm[:40]} {np.median(t):.3f}x{len(t)//5}" for nm, t in kern.items())
        print(f"| {name} | {rnd} | {bench_ms(fn):.3f} | {burst(fn):.3f} | {burst(fn, l2=True):.3f} | {burst(fn, 1):.3f} | {host(fn):.3f} | {ktxt} |", flush=True)
