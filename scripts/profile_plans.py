"""Where plan compile + upload and a backward call spend host time (GPU machine):

    python3 scripts/profile_plans.py
"""

import cProfile
import pstats

import torch
from profile_overhead import per_call_us  # scripts/ is on the path when run as a script

import maskattn
from maskattn import _cuda, workloads


tile = _cuda.tile_for(128, "bfloat16")
for name in ("causal", "swa", "lf_global"):
    spec = workloads.build(name, 16384)
    plans = []

    def compile_only():
        spec._plans.clear()
        plans.append(maskattn.compile_mask(spec, tile))

    compile_us = per_call_us(compile_only)
    pending = iter(plans[::-1])
    upload_us = per_call_us(lambda: _cuda.device_plan(next(pending)), reps=100)
    print(f"{name:10s} 16k  compile {compile_us:7.1f} us  upload {upload_us:7.1f} us")
    if name == "causal":
        plans.clear()
        for _ in range(200):
            compile_only()
        pending = iter(plans)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            _cuda.device_plan(next(pending))
        torch.cuda.synchronize()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)

spec = workloads.build("graph_rcm", 8192)
q, k, v, do = (torch.randn(1, 16, 8192, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
out, lse = maskattn.attention(q, k, v, spec, return_lse=True)
bwd = lambda: maskattn.attention_backward(do, q, k, v, out, lse, spec)  # noqa: E731
print(f"graph_rcm 8k backward: wall {per_call_us(bwd, reps=50):8.1f} us/call")
spec_b = workloads.build("bigbird", 8192)
out_b, lse_b = maskattn.attention(q, k, v, spec_b, return_lse=True)
bwd_b = lambda: maskattn.attention_backward(do, q, k, v, out_b, lse_b, spec_b)  # noqa: E731
print(f"bigbird 8k backward:   wall {per_call_us(bwd_b, reps=50):8.1f} us/call")
prof = cProfile.Profile()
prof.enable()
for _ in range(50):
    bwd()
torch.cuda.synchronize()
prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(16)
