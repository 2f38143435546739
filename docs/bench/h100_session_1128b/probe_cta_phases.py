"""Where a forward CTA's time goes. A probe build of fwd_sm90.cu (main's gpu/ with `variants/cta_stamps.diff`
applied, at .whl/v/stamps/gpu; or `variants/cta_stamps_producer.diff`, see --producer) writes timestamps in place of
the LSE: per CTA its SM, its start and end (%globaltimer), consumer 0's clock at each phase, consumer 1's end and the
producer's first K copy. Run from scripts/ on the GPU machine:

    MASKATTN_KERNEL_SOURCES=$PWD/../.whl/v/stamps/gpu python3 \\
        ../docs/bench/h100_session_1128b/probe_cta_phases.py

An argument names the run: its raw stamps go to $OUT/stamps_NAME.npz where OUT is set. --producer reads the
producer's stamps of `variants/cta_stamps_producer.diff` too (the clock once each plan read has arrived, and at Q's
copy); --producer barriers, those of `cta_stamps_producer2.diff` (also around the barriers' set-up,
`__syncthreads` and setmaxnreg). --workloads chooses (default swa doc_causal causal full). Prints, per workload
(16k, D = 128, H = 16, bf16), the kernel's time, the mean phase lengths in microseconds, the CTAs' mean length, the
span from the first CTA's start to the last one's end, and per SM the gaps between one CTA's end and the next one's
start.
"""

import argparse
import os
import pathlib
import sys

import cupy as cp
import ml_dtypes
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "scripts"))
from gpu_timing import inputs, median_ms  # noqa: E402
from maskattn import compile_mask  # noqa: E402
from maskattn.backends import cuda  # noqa: E402
from maskattn.bench import workloads  # noqa: E402

PHASES = ["barrier init + syncthreads", "wait for Q", "then for the first K", "first tile (S, softmax)",
          "other tiles, last P V", "normalise, stage O", "epilogue barrier", "O store read by the copy engine"]

bf16 = np.dtype(ml_dtypes.bfloat16)
n, heads, d = 16384, 16, 128
parser = argparse.ArgumentParser()
parser.add_argument("name", nargs="?")
parser.add_argument("--producer", nargs="?", const="reads", choices=["reads", "barriers"])
parser.add_argument("--workloads", nargs="+", default=["swa", "doc_causal", "causal", "full"])
args = parser.parse_args()
raw = {}
for workload in args.workloads:
    plan = compile_mask(workloads.build(workload, n), tile=cuda.tile_for(d, bf16))
    q, k, v = inputs(3, (1, heads, n, d), bf16, np.random.default_rng(0))
    ms = median_ms(lambda: cuda.forward(q, k, v, plan, d ** -0.5))
    _, lse = cuda.forward(q, k, v, plan, d ** -0.5)
    cp.cuda.Device().synchronize()
    st = cp.asnumpy(lse).view(np.uint32).reshape(heads, n // 128, 128)[:, :, :24].reshape(-1, 24).astype(np.int64)
    raw[workload] = st
    tiles = np.tile(np.diff(plan.row_ptr[0]), heads)
    smid, g0, g8 = st[:, 0], st[:, 1], st[:, 2]
    g_end = np.maximum(g8, st[:, 12])  # the later consumer's end
    base = g0.min()
    g0, g_end = (g0 - base) % 2 ** 32, (g_end - base) % 2 ** 32
    cyc = st[:, 3:12]
    ghz = np.median((cyc[:, 8] - cyc[:, 0]) % 2 ** 32 / np.maximum(g8 - st[:, 1], 1))
    phases = np.diff(cyc, axis=1) % 2 ** 32 / ghz / 1e3  # us
    print(f"\n{workload}: {ms:.3f} ms, {len(st)} CTAs on {len(np.unique(smid))} SMs, {tiles.mean():.1f} tiles a CTA, "
          f"SM clock {ghz:.2f} GHz")
    for phase, us in zip(PHASES, phases.T):
        print(f"  {phase:34s} {us.mean():7.2f} us (median {np.median(us):.2f}, p90 {np.percentile(us, 90):.2f})")
    other_end = (st[:, 14] - cyc[:, 8]) % 2 ** 32
    other_end = np.where(other_end >= 2 ** 31, other_end - 2 ** 32, other_end) / ghz / 1e3
    first_copy = (st[:, 15] - cyc[:, 0]) % 2 ** 32 / ghz / 1e3
    length = (g_end - g0) / 1e3
    if args.producer:  # the producer's thread 0, from the CTA's start: the clock once each read has arrived
        since = lambda col: ((st[:, col] - cyc[:, 0]) % 2 ** 32 / ghz / 1e3).mean()  # noqa: E731
        print(f"  producer: m_levels read by {since(16):.2f} us, m_order {since(17):.2f}, row_ptr {since(18):.2f}, "
              f"Q's copy issued at {since(19):.2f}, the first col_idx by {since(15):.2f}")
        if args.producer == "barriers":  # variants/cta_stamps_producer2.diff
            print(f"  producer: barriers' set-up from {since(20):.2f} to {since(21):.2f} us, past __syncthreads at "
                  f"{since(22):.2f}, past setmaxnreg at {since(23):.2f}")
    print(f"  consumer 1 ends after consumer 0 by {other_end.mean():.2f} us; producer's first K copy at "
          f"{first_copy.mean():.2f} us; a CTA lasts {length.mean():.2f} us (globaltimer); first start to last end "
          f"{g_end.max() / 1e3:.1f} us")
    gaps, busy = [], []
    for sm in np.unique(smid):
        on = np.argsort(g0[smid == sm])
        starts, ends = g0[smid == sm][on], g_end[smid == sm][on]
        gaps.append(starts[1:] - ends[:-1])
        busy.append((ends - starts).sum() / (ends.max() - starts.min()))
    gaps = np.concatenate(gaps) / 1e3
    print(f"  gap from a CTA's end to the next one's start on its SM: mean {gaps.mean():.2f} us, median "
          f"{np.median(gaps):.2f}, p10 {np.percentile(gaps, 10):.2f}; SMs busy {np.mean(busy):.1%} of their span")
    if np.ptp(tiles) > 0:  # rows of several lengths
        slope, fixed = np.polyfit(tiles, length, 1)
        print(f"  CTA length ~ {fixed:.2f} us + {slope:.3f} us a tile (least squares over the CTAs)")
    del q, k, v, lse
    cp.get_default_memory_pool().free_all_blocks()
if os.environ.get("OUT") and args.name:
    np.savez(f"{os.environ['OUT']}/stamps_{args.name}.npz", **raw)
