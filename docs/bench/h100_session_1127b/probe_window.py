"""Per-CTA and per-tile forward cost, ours against FlashAttention-4, over sliding windows (16k, D = 128, H = 16,
bf16), and both backwards' price of determinism on the dense mask. Run on the GPU machine with FA4 importable:

    python3 probe_window.py

Windows left = 127 .. 4095 and the full mask, each timed by do_bench, ours and FA4's in turns, three rounds. Reading:
time x 132 SMs = 2048 CTAs x F + tiles x c (least squares per side over the windows). Then fwd+bwd through autograd,
dense, FA4 with deterministic False / True, ours with torch.use_deterministic_algorithms False / True."""
import numpy as np
import torch
from flash_attn.cute import flash_attn_func

import maskattn
from maskattn import masks
from maskattn.bench.common import bench_ms, fwd_bwd_ms

n, H, D, SMS = 16384, 16, 128, 132
lefts = [127, 255, 511, 1023, 2047, 4095, None]
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(1, H, n, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
plans = {left: maskattn.compile_mask(masks.sliding_window(n, left=left), (128, 128)) for left in lefts}


def fa4(a, b, c, left, deterministic=False):
    window = (-1 if left is None else left, 0)
    out = flash_attn_func(a.transpose(1, 2), b.transpose(1, 2), c.transpose(1, 2), window_size=window,
                          deterministic=deterministic)
    return (out[0] if isinstance(out, tuple) else out).transpose(1, 2)


print(torch.cuda.get_device_name())
ours = {left: [] for left in lefts}
theirs = {left: [] for left in lefts}
for rnd in range(3):
    for left in lefts:
        ours[left].append(bench_ms(lambda: maskattn.attention(q, k, v, plans[left])))
        theirs[left].append(bench_ms(lambda: fa4(q, k, v, left)))
print("| left | tiles | ours ms (3 rounds) | FA4 ms | ours / FA4 |")
print("| --- | --- | --- | --- | --- |")
tiles = np.array([plans[left].stats(D)["active_blocks"] * H for left in lefts], float)
for left, t in zip(lefts, tiles):
    print(f"| {left} | {int(t)} | {' / '.join(f'{x:.3f}' for x in ours[left])} | "
          f"{' / '.join(f'{x:.3f}' for x in theirs[left])} | {np.median(ours[left]) / np.median(theirs[left]):.3f} |")
for name, times in (("ours", ours), ("FA4", theirs)):
    y = np.array([np.median(times[left]) for left in lefts]) * 1e3 * SMS  # us of SM time
    A = np.stack([np.full(len(lefts), 128.0 * H), tiles], axis=1)
    (F, c), *_ = np.linalg.lstsq(A[:-1], y[:-1], rcond=None)  # the windows (full: its own check)
    print(f"{name}: F = {F:.2f} us per CTA, c = {c:.3f} us per tile (windows); full predicted "
          f"{(A[-1] @ (F, c)) / SMS / 1e3:.3f} ms, measured {np.median(times[None]):.3f}", flush=True)

print("| fwd+bwd dense | default | deterministic | ratio |")
print("| --- | --- | --- | --- |")
dense = plans[None]
for rnd in range(2):
    a = fwd_bwd_ms(lambda x, y, z: fa4(x, y, z, None), q, k, v, do)
    b = fwd_bwd_ms(lambda x, y, z: fa4(x, y, z, None, True), q, k, v, do)
    print(f"| FA4 round {rnd} | {a:.3f} | {b:.3f} | {b / a:.3f} |", flush=True)
    c = fwd_bwd_ms(lambda x, y, z: maskattn.torch.attention(x, y, z, dense), q, k, v, do)
    torch.use_deterministic_algorithms(True)
    d = fwd_bwd_ms(lambda x, y, z: maskattn.torch.attention(x, y, z, dense), q, k, v, do)
    torch.use_deterministic_algorithms(False)
    print(f"| ours round {rnd} | {c:.3f} | {d:.3f} | {d / c:.3f} |", flush=True)
