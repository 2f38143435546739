# The next GPU session's first two calls (performance.md, 2026-11-28 (e)):
#   call A, carry .peers/a:          mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/
#   call B, carry .peers/b and .whl: bash docs/bench/next/next_session.sh
# (.peers/a and .peers/b from ../shared/peers/fa4-wheels.sh; .whl holds the meson-python and pyproject-metadata wheels.)
# On the H200 of 2026-11-28 (e) our dense forward at 16k D=128 (MASK_NONE) took 3.525 ms against 3.141 on the H100 of
# 2026-11-28 (c), the same kernel, while FA4's did not move (3.208 / 3.228) and the causal forward did not either. This
# call times ours against FA4 alone, twice, forward and backward, then each under sampled clocks and power (a kernel
# drawing more power runs at a lower clock: that could be the dense forward's fragility), then takes an Nsight Compute
# report of our dense forward (compare it with docs/bench/h100_session_1128d's if the gap holds).
# The dQ writer (FA4's dQaccum_store, on mbarriers) is merged; the backward alone was then 1.11x FA4's at 16k D=128
# and even at 8k D=64 (bench, H200).
# Other leads (performance.md, 2026-11-28 (c) to (e)):
# - FA4's backward keeps two stages of Q, dO, LSE and delta and waits for dO between S^T and dP^T; ours two stages of
#   a step, announced together; its tensor pipe is busy 76.5% of its cycles against our 64.1% (ncu, (d));
# - the dense 16k D=128 forward (MASK_NONE) gets 3-6% slower from unrelated small changes (early barriers, Q first,
#   the uniform consumer index, a stmatrix epilogue) while the key loop's SASS hardly moves: not understood;
# - the persistent dynamic scheduler for plans of short rows only (swa 2-8% faster on 2026-11-25), one plan read per
#   CTA, decided with the in-turns timer;
# - the deterministic backward's per-channel exponents of K; the mma.sync kernels' one pass in fixed point;
# - node orders: bwd_dq_convert's per-row perm lookups.
# Dropped, do not retry: dS^T by stmatrix (D=128 within 0.5%, D=64 4-6% slower, (e)); masks after the exponentials,
# the forward's K release after the softmax, sleeping producer waits ((d)).
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $OUT/gpu.csv
for round in 1 2; do
  timeout 120 python3 scripts/ncu_forward.py time 128 16384 16 full causal
done > $OUT/fwd_time.log 2>&1
# each kernel back to back for 4 s under nvidia-smi's clock and power samples: a kernel that draws more power runs at
# a lower clock, which would slow only the densest instantiation and move with small unrelated changes
timeout 120 python3 scripts/ncu_forward.py clocks 128 16384 16 full causal >> $OUT/fwd_time.log 2>&1
echo "forward timed $(date +%T)"; cat $OUT/fwd_time.log
timeout 150 python3 scripts/ncu_forward.py time_bwd 128 16384 16 full causal > $OUT/bwd_time.log 2>&1
timeout 100 python3 scripts/ncu_forward.py time_bwd 64 8192 32 full causal >> $OUT/bwd_time.log 2>&1
echo "backward timed $(date +%T)"; cat $OUT/bwd_time.log
timeout 150 ncu --clock-control none --profile-from-start off --set full -o $OUT/ours_fwd_full \
    python3 scripts/ncu_forward.py ours 128 16384 16 full > $OUT/ncu.log 2>&1
echo "ncu rc $? $(date +%T)"; tail -n 3 $OUT/ncu.log
# the GPU tests that reach the backward through torch, SDPA, training and prepared calls: not yet run on the writer
# (2026-11-28 (e) ran tests/gpu/test_backward.py, 135 passed, and the sanitizers)
timeout 240 python3 -m pytest -q -x tests/gpu --ignore=tests/gpu/test_backward.py --ignore=tests/gpu/test_forward.py \
    --ignore=tests/gpu/test_decode.py > $OUT/pytest_rest.log 2>&1
echo "other GPU tests rc $? $(date +%T): $(tail -n 1 $OUT/pytest_rest.log)"
