"""One dense or masked forward (or our backward) for Nsight Compute, ours or FlashAttention-4's, or both timed side by
side:

    ncu --clock-control none --profile-from-start off --set full -o REPORT \
        python3 scripts/ncu_forward.py SIDE D N H [WORKLOAD]
        (SIDE: ours, ours_192, ours_bwd, fa4_128, fa4_default, fa4_window, fa4_bwd or fa4_bwd_causal_tile)
    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > REPORT.sass.csv   # per-instruction samples
    python3 scripts/ncu_forward.py {time|time_bwd|turns|turns_bwd|clocks|clocks_bwd} D N H [WORKLOAD ...]

The profiled range is one call after three warm-ups (``--profile-from-start off``), so only that call's kernels are
measured. ``ours``: maskattn's CUDA forward over ``maskattn.bench.workloads.build(WORKLOAD, N)`` (default ``full``)
at the training tile, ``ours_192`` at the forward-only tile (``tile_for(..., training=False)``: 192 x 128 at D <= 64
on Hopper); ``ours_bwd``: maskattn's default (one-pass) backward of that plan at the training tile; ``fa4_128`` /
``fa4_default`` (workloads full and causal): FlashAttention-4's ``_flash_attn_fwd`` at the 128 x 128 tile or at its
own choice (192 x 128 at D <= 96), when ``flash_attn.cute`` is importable
(``../shared/peers/fa4-wheels.sh``); ``fa4_window`` (workload swa): FlashAttention-4's causal sliding window of
WORKLOADS.md's swa (each query sees itself and the 1023 keys before it), the peer of our ``swa``; ``fa4_bwd``
(full and causal): FlashAttention-4's ``_flash_attn_bwd`` at its own tile choice, the peer of ``ours_bwd``;
``fa4_bwd_causal_tile`` (full): the same at the tile it takes for causal masks (at D = 128: 64 query rows a step
where its own choice is 80). ``time`` (``time_bwd``): triton's ``do_bench`` medians of the forwards (backwards)
that apply, in one process, one after the other; ``turns`` (``turns_bwd``): the same kernels' samples taken in
turns (scripts/gpu_timing.py's ``medians_in_turns``: 30 samples each, a sample the mean of a burst of 5 calls, no L2
flush), so that the clock, which falls as the card nears its power limit, moves under all of them alike (``time``'s
reading of the kernel that runs first, or after an idle spell, can be the faster for its clock, not its schedule).
``clocks`` (``clocks_bwd``): the same kernels each run back to back for a few seconds while ``nvidia-smi`` samples
the SM clock and the power draw every 50 ms: medians of the samples under each, and the time per call at those
clocks (does a kernel lose time to a lower clock, not to its schedule?). bf16, B = 1, H heads of D over N tokens.
"""

import inspect
import subprocess
import sys
import time

import numpy as np


def ours(d, n, h, workload, training=True, backward=False):
    import cupy as cp
    import ml_dtypes

    from maskattn import compile_mask
    from maskattn.backends import cuda
    from maskattn.bench import workloads

    from gpu_timing import inputs  # scripts/ is on the path of a script run from there

    bf16 = np.dtype(ml_dtypes.bfloat16)
    plan = compile_mask(workloads.build(workload, n), tile=cuda.tile_for(d, bf16, training=training))
    q, k, v, do = inputs(4, (1, h, n, d), bf16, np.random.default_rng(0))
    out, lse = cuda.forward(q, k, v, plan, d ** -0.5)
    cp.cuda.runtime.deviceSynchronize()
    if backward:
        return lambda: cuda.backward(do, q, k, v, out, lse, plan, d ** -0.5, False)
    return lambda: cuda.forward(q, k, v, plan, d ** -0.5, out=out)


def fa4(d, n, h, tile, causal, window=None, backward=False, causal_tile=False):
    import torch
    from flash_attn.cute import interface

    q, k, v = [torch.randn(1, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    options = {}
    if tile is not None and "tile_mn" in inspect.signature(interface._flash_attn_fwd).parameters:
        options["tile_mn"] = tile
    if window is not None:
        options.update(window_size_left=window, window_size_right=0)
    if backward:  # its forward once, for O and the LSE the backward reads
        out, lse = interface._flash_attn_fwd(q, k, v, softmax_scale=d ** -0.5, causal=causal, return_lse=True)[:2]
        dout = torch.randn_like(out)

        def bwd():
            return interface._flash_attn_bwd(q, k, v, out, dout, lse, d ** -0.5, causal)

        if not causal_tile:
            return bwd
        # its backward with the tile it takes for causal masks (64 query rows a step at D = 128, dQ not swapped)
        # where it would take another (80 rows, non-causal D = 128): what do its 80-row steps buy?
        own = interface._tile_size_bwd_sm90

        def as_causal(*args, **kwargs):
            bound = inspect.signature(own).bind(*args, **kwargs)
            bound.arguments["causal"] = True
            return own(*bound.args, **bound.kwargs)

        def bwd_at_causal_tile():
            interface._tile_size_bwd_sm90 = as_causal
            try:
                return bwd()
            finally:
                interface._tile_size_bwd_sm90 = own

        return bwd_at_causal_tile
    return lambda: interface._flash_attn_fwd(q, k, v, softmax_scale=d ** -0.5, causal=causal, **options)


# FlashAttention-4's runs beside ours, by workload (``time``)
FA4_PEERS = {"full": ["fa4_128", "fa4_default"], "causal": ["fa4_128", "fa4_default"], "swa": ["fa4_window"]}


def make(which, d, n, h, workload):
    if which.startswith("ours"):
        return ours(d, n, h, workload, training=which != "ours_192", backward=which == "ours_bwd")
    if which == "fa4_window":
        if workload != "swa":
            raise ValueError(f"fa4_window is the peer of swa, not of {workload}")
        return fa4(d, n, h, None, True, window=1023)
    if workload not in ("full", "causal"):
        raise ValueError(f"FlashAttention-4 runs full and causal, not {workload}")
    if which in ("fa4_bwd", "fa4_bwd_causal_tile"):
        return fa4(d, n, h, None, workload == "causal", backward=True, causal_tile=which != "fa4_bwd")
    return fa4(d, n, h, {"fa4_128": (128, 128), "fa4_default": None}[which], workload == "causal")


def under_clock_samples(fn, seconds=4.0):
    """fn run back to back for `seconds` while nvidia-smi samples the SM clock (MHz) and power (W) every 50 ms:
    (ms per call, median clock, median power) over the second half, once the clock has settled."""
    import torch

    sampler = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                "-lms", "50"], stdout=subprocess.PIPE, text=True)
    start = time.perf_counter()
    calls, half = 0, None
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        calls += 10
        if half is None and time.perf_counter() - start >= seconds / 2:
            half = (time.perf_counter(), calls)
    end = time.perf_counter()
    sampler.terminate()
    samples = [[float(x) for x in line.split(",")] for line in sampler.communicate()[0].splitlines() if "," in line]
    settled = np.array(samples[len(samples) // 2:])
    return 1e3 * (end - half[0]) / (calls - half[1]), np.median(settled[:, 0]), np.median(settled[:, 1])


def main():
    which, d, n, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    workloads = sys.argv[5:] or ["full"]
    if which in ("time", "time_bwd", "turns", "turns_bwd", "clocks", "clocks_bwd"):
        import torch
        from triton.testing import do_bench

        for workload in workloads:
            if which.endswith("_bwd"):
                names = ["ours_bwd", "fa4_bwd"] if workload in ("full", "causal") else ["ours_bwd"]
                if workload == "full":
                    names.append("fa4_bwd_causal_tile")
            else:
                names = (["ours", "ours_192"] if d <= 64 else ["ours"]) + FA4_PEERS.get(workload, [])
                if d > 128:  # FA4's 128 x 128 tile needs 328704 bytes of shared memory at D = 256 (the limit: 232448)
                    names = [name for name in names if name != "fa4_128"]
            if which.startswith("turns"):
                from gpu_timing import medians_in_turns  # scripts/ is on the path of a script run from there

                fns = {}
                for name in names:
                    try:
                        fns[name] = make(name, d, n, h, workload)
                    except ImportError as error:
                        print(f"{name}: not importable ({error})", flush=True)
                for name, ms in medians_in_turns(fns, reps=30).items():
                    print(f"{name:12s} {workload} D={d} n={n} H={h}: {ms:.3f} ms (in turns)", flush=True)
                continue
            for name in names:
                try:
                    fn = make(name, d, n, h, workload)
                    fn()
                    torch.cuda.synchronize()
                    label = f"{name:12s} {workload} D={d} n={n} H={h}"
                    if which.startswith("clocks"):
                        ms, mhz, watts = under_clock_samples(fn)
                        print(f"{label}: {ms:.3f} ms a call at {mhz:.0f} MHz, {watts:.0f} W", flush=True)
                    else:
                        print(f"{label}: {do_bench(fn, warmup=50, rep=300):.3f} ms", flush=True)
                except ImportError as error:
                    print(f"{name}: not importable ({error})", flush=True)
        return
    workload = workloads[0]
    import cupy as cp

    fn = make(which, d, n, h, workload)
    for _ in range(3):
        fn()
    cp.cuda.runtime.deviceSynchronize()
    cp.cuda.runtime.profilerStart()
    fn()
    cp.cuda.runtime.deviceSynchronize()
    cp.cuda.runtime.profilerStop()


if __name__ == "__main__":
    main()
