"""Where the GPU plan of a dense mask spends its time (issue 16): the whole ``plans.dense_plan`` beside its launches
alone (the two memsets, ``dense_plan_classify``, ``dense_plan_fill``), a plain read of the mask at memory speed,
and variants of the classify kernel: adjacent tiles a CTA (PLAN_SPAN), loads in flight a thread, CTAs an SM; with
--base, a former dense_plan.cu's classify beside them. 16k x 16k sliding-window mask (one group), 128 x 128 tiles;
CuPy events, in turns (scripts/gpu_timing.py's medians_in_turns: bursts of 5, medians of 20).

    python3 scripts/probe_dense_plan.py [--n 16384] [--window 1024] [--base OLD_DENSE_PLAN_CU]
"""
import argparse

import cupy as cp
import numpy as np

from gpu_timing import medians_in_turns
from maskattn.backends.cuda import plans
from maskattn.backends.cuda.kernels import kernel_source
from maskattn.backends.cuda.launch import Launcher

READ = r"""
extern "C" __global__ void read_all(const uint4* __restrict__ p, long long n, unsigned* out) {
  unsigned acc = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) out[0] = acc;
}
"""


def _replaced(text, edits):
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=16384)
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--base", help="a former gpu/dense_plan.cu to time beside (its classify, one tile a CTA)")
    args = parser.parse_args()
    n, tile = args.n, (128, 128)
    i = cp.arange(n)
    mask = ((i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < args.window))[None, None]
    launch = plans._dense_launch(plans.sources_key(), mask.device.id, 1, 1, n, n, tile, mask.strides)
    buf = cp.zeros(launch.nbytes, np.uint8)
    stream, plan = cp.cuda.get_current_stream().ptr, buf.data.ptr
    fns = {"dense_plan": lambda: launch(stream, mask.data.ptr, plan), "memsets": lambda: launch.zero(stream, plan),
           "classify": lambda: launch.classify(stream, mask.data.ptr, plan), "fill": lambda: launch.fill(stream, plan)}
    launch(stream, mask.data.ptr, plan)  # the counts fill reads
    source = kernel_source("dense_plan.cu")
    bounds = "__launch_bounds__(PLAN_THREADS)\n    dense_plan_classify"
    variants = {f"classify span {span}, {loads} loads{', 4 CTAs an SM' if min4 else ''}": {
        "constexpr int PLAN_SPAN = 4;": f"constexpr int PLAN_SPAN = {span};",
        "constexpr int PLAN_LOADS = 4;": f"constexpr int PLAN_LOADS = {loads};",
        bounds: bounds.replace("(PLAN_THREADS)", "(PLAN_THREADS, 4)") if min4 else bounds}
        for span, loads, min4 in ((2, 4, False), (4, 8, False), (4, 4, True))}  # 8 tiles: 64 KB of static shared memory
    sources = {label: _replaced(source, edits) for label, edits in variants.items()}
    if args.base:  # a former dense_plan.cu, one tile a CTA
        sources["classify, base source"] = open(args.base).read()
    blocks = -(-n // tile[0])  # query blocks and key blocks
    outputs = launch.arrays(plan, launch.CLASSIFY_ARRAYS)
    for label, text in sources.items():
        span = int(text.split("constexpr int PLAN_SPAN = ")[1].split(";")[0]) if "PLAN_SPAN =" in text else 1
        kernel = cp.RawModule(code=text, options=("-std=c++17",)).get_function("dense_plan_classify")
        variant = Launcher(kernel, (blocks * -(-blocks // span), 1, 1), (256, 1, 1), 0, 1 + len(outputs),
                           launch.classify_fixed)
        fns[label] = (lambda v=variant: v(stream, mask.data.ptr, *outputs))
    read = cp.RawKernel(READ, "read_all")
    sink = cp.zeros(1, cp.uint32)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    vectors = n * n // 16
    fns["read 268 MB"] = lambda: read((sms * 8,), (512,), (mask, np.int64(vectors), sink))
    times = medians_in_turns(fns)
    gb = n * n / 1e9
    print(f"| {n}^2 mask, window {args.window} | ms | mask read TB/s |")
    print("| --- | --- | --- |")
    for name, ms in times.items():
        print(f"| {name} | {ms:.4f} | {gb / ms:.2f} |")


if __name__ == "__main__":
    main()
