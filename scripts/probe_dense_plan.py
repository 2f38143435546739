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
    stream = cp.cuda.get_current_stream().ptr
    at = {name: buf.data.ptr + offset for name, (offset, _, _) in launch.layout.items()}
    runtime = cp.cuda.runtime
    m = nb = -(-n // 128)
    i32, i64 = np.int32, np.int64
    shape_args = (*(i64(s) for s in mask.strides), i32(1), i32(n), i32(n), i32(128), i32(128), i32(m), i32(nb))
    classify_out = tuple(at[x] for x in ("tile_kind", "bit_pool", "row_len", "col_len", "group_len"))

    def memsets():
        runtime.memsetAsync(buf.data.ptr + launch.runs_from, 0xFF, launch.runs_to - launch.runs_from, stream)
        runtime.memsetAsync(buf.data.ptr + launch.zero_from, 0, launch.zero_to - launch.zero_from, stream)

    fns = {"dense_plan": lambda: launch(stream, mask.data.ptr, buf.data.ptr), "memsets": memsets,
           "classify": lambda: launch.classify(stream, mask.data.ptr, *classify_out)}
    launch(stream, mask.data.ptr, buf.data.ptr)  # the counts fill reads
    fill_args = tuple(at[x] for x in ("tile_kind", "row_len", "col_len", "group_len", "row_ptr", "col_idx", "kind",
                                      "payload_idx", "m_order", "col_ptr", "row_idx", "bwd_kind", "bwd_payload_idx",
                                      "n_order", "m_levels", "n_levels"))
    fns["fill"] = lambda: launch.fill(stream, *fill_args)
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
    for label, text in sources.items():
        span = int(text.split("constexpr int PLAN_SPAN = ")[1].split(";")[0]) if "PLAN_SPAN =" in text else 1
        kernel = cp.RawModule(code=text, options=("-std=c++17",)).get_function("dense_plan_classify")
        cargs = (np.uint64(mask.data.ptr), *(np.uint64(p) for p in classify_out), *shape_args)
        grid = (m * -(-nb // span),)
        fns[label] = (lambda k=kernel, g=grid, a=cargs: k(g, (256,), a))
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
