"""``python -m maskattn bench --overhead``: host time of one attention call on a GPU machine: wall time per call (the
GPU kept busy elsewhere does not hide it here), GPU time per call back to back and inside a CUDA graph (the kernels
alone), a cProfile of the torch path, and the pieces (the CuPy-level call, one raw launch)."""

from __future__ import annotations

import cProfile
import pstats
import time

import maskattn
from maskattn import compile_mask, masks
from maskattn.backends import cuda

from . import workloads
from .common import graph_ms


def per_call_us(fn, reps=300):
    import torch

    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1e6


def gpu_us(fn, reps=50):
    """GPU time per call from events around a batch of back-to-back calls."""
    import torch

    fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / reps * 1e3


def graph_us(fn):
    """GPU time per call in a CUDA graph (maskattn.bench.graph_ms, one input set): no host work between kernels."""
    return graph_ms([fn]) * 1e3


def run(args):
    import cupy as cp
    import torch

    cases = {
        "tree 1024 B1": (masks.medusa_tree(workloads.MC_SIM_7B_63, prefix_len=1024), 1, 32, 32),
        "tree 4096 B8": (masks.medusa_tree(workloads.MC_SIM_7B_63, prefix_len=4096), 8, 32, 32),
        "decode 4096 B8": (masks.causal(1, 4096), 8, 32, 8),
    }
    for name, (spec, B, H, Hk) in cases.items():
        q = torch.randn(B, H, spec.n_q, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Hk, spec.n_k, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        qc, kc, vc = (cp.from_dlpack(x) for x in (q, k, v))
        gqa = {"enable_gqa": True} if H != Hk else {}
        sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, **gqa)  # noqa: E731
        print(f"== {name}")
        call = lambda: maskattn.attention(q, k, v, spec)  # noqa: E731
        print(f"  maskattn torch   wall {per_call_us(call):8.1f} us/call  gpu {gpu_us(call):8.1f} us  "
              f"in a CUDA graph {graph_us(call):8.1f} us")
        print(f"  maskattn cupy    wall {per_call_us(lambda: maskattn.attention(qc, kc, vc, spec)):8.1f} us/call")
        pack = H // Hk
        plan = compile_mask(spec.repeat_rows(pack), tile=cuda.tile_for(128, qc.dtype, rows=spec.n_q * pack))
        forward = lambda: cuda.forward(qc, kc, vc, plan, 0.088, pack=pack)  # noqa: E731
        print(f"  cuda.forward     wall {per_call_us(forward):8.1f} us/call  gpu {gpu_us(forward):8.1f} us")
        out, lse = cuda.forward(qc, kc, vc, plan, 0.088, pack=pack, num_splits=1)
        launch = cuda.forward_launch(qc, kc, vc, plan, 0.088, pack=pack, num_splits=1)
        stream = cp.cuda.get_current_stream().ptr
        raw = per_call_us(lambda: launch(stream, qc.data.ptr, kc.data.ptr, vc.data.ptr, out.data.ptr, lse.data.ptr))
        print(f"  one fwd launch   wall {raw:8.1f} us (unsplit, grid {launch.grid})")
        print(f"  sdpa no mask     wall {per_call_us(sdpa):8.1f} us/call  gpu {gpu_us(sdpa):8.1f} us  "
              f"in a CUDA graph {graph_us(sdpa):8.1f} us")
        if name == "tree 1024 B1":
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(200):
                maskattn.attention(q, k, v, spec)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(14)
