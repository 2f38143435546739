"""Kernel timings on a GPU machine (run by scripts/gpu_check.sh): the forward on a few masks and shapes, the
backward per path (on Hopper: the wgmma dK/dV and dQ kernels, the mma.sync ones with MASKATTN_SM90=0, and the
one-pass wgmma kernel), and SDPA flash as the yardstick, in one short table each.

    python3 scripts/gpu_timing.py [--variants]

``--variants`` also times other (tile_m, tile_n, warps) forward configurations by patching the config table.
TFLOP/s counts 4 * B * H * D * (pairs computed); the backward 2.5x that, forward+backward 3.5x.
"""

import os
import sys

import cupy as cp
import ml_dtypes
import numpy as np

from maskattn import compile_mask, masks
from maskattn.backends import cuda
from maskattn.backends.cuda import bwd as cuda_bwd
from maskattn.backends.cuda import kernels
from maskattn.bench.common import in_turns

BF16 = np.dtype(ml_dtypes.bfloat16)


def median_ms(fn, warmup=3, reps=20, burst=5):
    """One call's time: the median over ``reps`` samples, each the mean of a burst of ``burst`` calls between two
    events. Within a burst the host queues a call while the one before runs, so a sample holds the GPU's time and
    not the host's (a sample of one call synchronised after it held 20-50 us of host work and launch beside a 0.3 ms
    kernel, performance.md 2026-11-28)."""
    return medians_in_turns({None: fn}, warmup, reps, burst)[None]


def medians_in_turns(fns: dict, warmup=3, reps=20, burst=5) -> dict:
    """:func:`median_ms` of several callables, {name: ms}, their samples taken in turns (maskattn.bench.common's
    in_turns: the first of each turn rotating), so that the GPU's clock, which drifts with its temperature and power,
    moves under all of them alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    for name in in_turns(list(fns), reps):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(burst):
            fns[name]()
        stop.record()
        stop.synchronize()
        times[name].append(cp.cuda.get_elapsed_time(start, stop) / burst)
    return {name: float(np.median(t)) for name, t in times.items()}


def inputs(count, shape, dtype, rng):
    return [cp.asarray(rng.standard_normal(shape, dtype=np.float32).astype(dtype)) for _ in range(count)]


def pairs_of(plan, B, H):
    return plan.stats()["computed_pairs"] * B * H // plan.groups


def forward_rows(rng, variants):
    cases = [
        ("full", masks.full(8192), 2, 16, 128, BF16, None),
        ("causal", masks.causal(8192), 2, 16, 128, BF16, None),
        ("sliding_window 1024", masks.sliding_window(8192, left=1024), 2, 16, 128, BF16, None),
        ("document 8x1024", masks.document([1024] * 8), 2, 16, 128, BF16, None),
        ("full fp16", masks.full(8192), 2, 16, 128, np.dtype(np.float16), None),
        ("full n=16384", masks.full(16384), 1, 16, 128, BF16, None),
        ("full d=64", masks.full(8192), 2, 16, 64, BF16, None),
    ]
    # the mma.sync kernel beside the wgmma one where Hopper runs the latter ("mma" forces it)
    cases += [(f"{name} mma.sync", spec, B, H, D, dtype, "mma") for name, spec, B, H, D, dtype, _ in cases[:2]]
    if variants:
        for name, D, config in (("full", 128, (128, 64, 4, 2)), ("full", 128, (64, 64, 4, 2)),
                                ("full", 64, (64, 128, 4, 2))):
            cases.append((f"{name} {config}", masks.full(8192), 2, 16, D, BF16, config))
    shipped = {d: c for d, c in kernels.FWD_CONFIGS.items()}
    rows = []
    for name, spec, B, H, D, dtype, config in cases:
        kernels.FWD_CONFIGS[D] = shipped[D] if config in (None, "mma") else (config,)
        os.environ["MASKATTN_SM90"] = "0" if config == "mma" else "1"
        plan = compile_mask(spec, tile=cuda.tile_for(D, dtype))
        q, k, v = inputs(3, (B, H, spec.n_q, D), dtype, rng)
        out = cp.empty_like(q)
        ms = median_ms(lambda: cuda.forward(q, k, v, plan, D ** -0.5, out=out))
        wgmma = kernels.uses_sm90(D, plan.tile, cp.cuda.Device().id)
        label = "wgmma (128, 128)" if wgmma else str(kernels.FWD_CONFIGS[D][0])
        rows.append((name, B, spec.n_q, D, dtype.name, label, ms, 4 * D * pairs_of(plan, B, H) / ms / 1e9))
    kernels.FWD_CONFIGS.update(shipped)
    os.environ.pop("MASKATTN_SM90")
    return rows


def backward_rows(rng):
    """Per mask and shape, three paths: deterministic (the wgmma dK/dV and dQ kernels where the device runs them),
    deterministic with MASKATTN_SM90=0 (mma.sync everywhere, the forward too), and deterministic=False (on Hopper
    the one-pass wgmma kernel with dQ by bulk reductions, elsewhere atomic dQ); each row's forward runs on its
    setting."""
    rows = []
    device = cp.cuda.Device().id
    for name, B, H, D, spec in (("causal", 1, 16, 128, masks.causal(8192)), ("full", 1, 16, 128, masks.full(8192)),
                                ("full 16k", 1, 16, 128, masks.full(16384)), ("full", 1, 32, 64, masks.full(8192)),
                                ("causal", 1, 32, 64, masks.causal(8192)), ("full", 1, 16, 192, masks.full(8192)),
                                ("causal", 1, 16, 256, masks.causal(8192))):
        n = spec.n_q
        plan = compile_mask(spec, tile=cuda.tile_for(D, BF16))
        q, k, v, do = inputs(4, (B, H, n, D), BF16, rng)
        flops = 4 * D * pairs_of(plan, B, H)
        for det, sm90 in ((True, "1"), (True, "0"), (False, "1")):
            os.environ["MASKATTN_SM90"] = sm90
            out, lse = cuda.forward(q, k, v, plan, D ** -0.5)
            fwd = median_ms(lambda: cuda.forward(q, k, v, plan, D ** -0.5, out=out), reps=10)
            run = lambda: cuda.backward(do, q, k, v, out, lse, plan, D ** -0.5, det)  # noqa: E731
            bwd = median_ms(run, reps=10)
            wgmma = cuda_bwd.uses_sm90(D, plan.tile, device)
            label = ("wgmma" if wgmma else "mma.sync") + ("" if det else " one pass" if wgmma else " atomic dQ")
            rows.append((f"{name} D={D}", label, fwd, bwd, flops / fwd / 1e9, 2.5 * flops / bwd / 1e9,
                         3.5 * flops / (fwd + bwd) / 1e9))
    os.environ.pop("MASKATTN_SM90")
    return rows


def sdpa_rows():
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, H, n, D = 1, 16, 8192, 128
    rows = []
    for causal in (False, True):
        q, k, v = (torch.randn(B, H, n, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        do = torch.randn_like(q)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            def fwd():
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            def fwd_bwd():
                F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(do)

            f_ms, fb_ms = median_ms(fwd, reps=10), median_ms(fwd_bwd, reps=10)
        flops = 4 * D * B * H * (n * (n + 1) // 2 if causal else n * n)
        rows.append(("causal" if causal else "full", "SDPA flash", f_ms, fb_ms - f_ms, flops / f_ms / 1e9,
                     2.5 * flops / (fb_ms - f_ms) / 1e9, 3.5 * flops / fb_ms / 1e9))
    return rows


def main():
    rng = np.random.default_rng(0)
    fwd = forward_rows(rng, "--variants" in sys.argv)
    bwd = backward_rows(rng)
    try:
        bwd += sdpa_rows()
    except Exception as err:  # torch is only a yardstick here
        print("SDPA timing skipped:", type(err).__name__, err)
    print("\nforward, H=16, TFLOP/s on computed pairs")
    print(f"{'case':<24}{'B':>3}{'n':>7}{'D':>5} {'dtype':<9}{'kernel / tile, warps':<21}{'ms':>8}{'TFLOP/s':>9}")
    for name, B, n, D, dt, config, ms, tf in fwd:
        print(f"{name:<24}{B:>3}{n:>7}{D:>5} {dt:<9}{config:<21}{ms:>8.3f}{tf:>9.1f}")
    print("\nbackward, B=1 bf16, n=8192 (but 16k), H=32 at D=64, else H=16; SDPA flash: H=16, D=128")
    print(f"{'mask':<17}{'path':<20}{'fwd ms':>8}{'bwd ms':>8}{'fwd TF':>8}{'bwd TF':>8}{'f+b TF':>8}")
    for name, label, f, b, tf, tb, tfb in bwd:
        print(f"{name:<17}{label:<20}{f:>8.3f}{b:>8.3f}{tf:>8.1f}{tb:>8.1f}{tfb:>8.1f}")


if __name__ == "__main__":
    main()
