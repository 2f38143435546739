# The next GPU session's first call (carry .whl with the meson-python and pyproject-metadata wheels):
#   bash docs/bench/next/next_session.sh
# The GPU tests of the forward and backward on main (routine; they take ~385 s, more on a machine that compiles
# from scratch), with the SM clock and power sampled beside them: this H100 drifts 15-20% under sustained load
# (performance.md, "the H100's drift"), and the samples say how far a run's clocks moved.
# Open leads (performance.md, 2026-11-28, "where a sliding window's forward loses to FlashAttention-4" and "fewer
# instructions per tile do not make the short rows faster"):
# - the sliding window is the one sparse workload over the 0.9x lines (fwd 1.11x, fwd+bwd 1.03x Flex FLASH at 16k
#   D = 128); fewer instructions in the key loop (uniform descriptors) and in the masks (one-sided tests) gained
#   nothing, so what is left is per CTA (the epilogue, ~1.8 us of our ~3 us extra a CTA): a CTA holds the whole
#   register file, so nothing overlaps its epilogue; what has been tried against it (persistent static and dynamic,
#   O by the copy engine, one plan read per CTA, tensor-map prefetch) gained less than the spread; timestamps in the
#   kernel (2026-11-28, "Where a forward CTA's time goes") put 3.3 us of the window's 19.3 us CTA before its first K
#   tile lands, 1.8 us of them before the first K copy is even issued, whatever the barriers' order:
#   the plan's reads are in by 1.03 us, Q's copy goes out at 1.78 (call 5); docs/bench/next/cta_producer_stamps.sh
#   splits the 0.75 us between them (the barriers' set-up, __syncthreads, setmaxnreg), one call of about a minute;
#   branch fwd-q-first (compiled, not run on a GPU) issues Q's and the first two K and V copies before __syncthreads
#   and setmaxnreg, by the thread that set up their barriers: docs/bench/next/fwd_q_first.sh on that branch runs its
#   A/B, forward tests and sanitizers in one call;
# - scripts/gpu_timing.py's median_ms (kernel_ab.py's timer) synchronises after every call, so each sample holds the
#   call's host work and launch: 20-50 us on the window's 311 us kernel (performance.md, 2026-11-28); timing a burst
#   of calls between two events would take it out of the A/B ratios and their noise (check it against do_bench);
# - the deterministic backward is the one pass in fixed point now (1.00-1.05x the default on dense D = 128); its
#   rows resolve 2^-29 of a bound built from max|K| per KV head: per-channel exponents of K would keep K's outlier
#   channels from costing the other channels bits, if real models show rows where that matters; the mma.sync kernels
#   (sm_80, sm_89) keep two passes, and the same integer reductions could make them one pass too;
# - node orders: bwd_dq_convert's per-row perm lookups; the backward producer keeps 40 registers for perm plans
#   (24 spills 12-32 bytes at D = 64 and 128).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 2000 > $OUT/clocks.csv &
sampler=$!
timeout 520 python3 -m pytest -q -x tests/gpu/test_forward.py tests/gpu/test_backward.py > $OUT/pytest.log 2>&1
echo "tests rc $? $(date +%T)"; tail -n 2 $OUT/pytest.log
kill $sampler
sort -t, -k2 -n $OUT/clocks.csv | sed -n '2p;$p'
