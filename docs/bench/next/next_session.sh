# The next GPU session's first call (carry .whl with the meson-python and pyproject-metadata wheels):
#   bash docs/bench/next/next_session.sh
# The GPU tests of the forward and backward on main (routine; they take ~385 s, more on a machine that compiles
# from scratch), with the SM clock and power sampled beside them: this H100 drifts 15-20% under sustained load
# (performance.md, "the H100's drift"), and the samples say how far a run's clocks moved.
# Open leads (performance.md, 2026-11-28, "where a sliding window's forward loses to FlashAttention-4", "fewer
# instructions per tile do not make the short rows faster" and "A/B timing in turns"):
# - scripts/kernel_ab.py now times its sides in one process, samples in turns: controls read 0.986-1.009, and a 1 us
#   sleep per CTA shows as 1.3-2.6% on short rows. Changes rejected earlier for gaining "less than the spread" (3-15%
#   then) can be decided now; the ones with a measured hint of gain: the persistent dynamic scheduler for plans of
#   short rows only (swa 2-8% faster, dense 1-5% slower on 2026-11-25; its branch is gone, performance.md describes it);
#   one plan read per CTA; O by the copy engine;
# - the sliding window's forward stays at 1.11-1.14x Flex FLASH. Issuing Q and the first K, V copies 0.7 us earlier
#   changed nothing on the short rows (2026-11-28 (c)), so the 3.3 us before a CTA's first K tile are not what sets
#   its time; the uniform consumer index makes the forward 3-4% slower on dense tiles though it removes the key loop's
#   R2UR (the backward gained 1-2% by it and keeps it): what the forward's consumers are bound by is still open;
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
