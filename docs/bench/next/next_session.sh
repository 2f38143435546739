# The next GPU session's first call (carry .whl with the meson-python and pyproject-metadata wheels):
#   bash docs/bench/next/next_session.sh
# The GPU tests of the forward and backward on main (routine; they take ~385 s, more on a machine that compiles
# from scratch), with the SM clock and power sampled beside them: this H100 drifts 15-20% under sustained load
# (performance.md, "the H100's drift"), and the samples say how far a run's clocks moved.
# Open leads (performance.md, 2026-11-27 late):
# - O by the copy engine gained 1-2% on short rows (merged); the rest of the per-CTA gap to FA4 is the staging,
#   barrier and LSE, or a persistent kernel for short-row plans;
# - the deterministic backward is the one pass in fixed point now (1.00-1.05x the default on dense D = 128); its
#   rows resolve 2^-29 of a bound built from max|K| per KV head: per-channel exponents of K (the CTA's KV head is
#   fixed, so a consumer could take its columns' exponents once) would keep K's outlier channels from costing the
#   other channels bits, if real models show rows where that matters; the mma.sync kernels (sm_80, sm_89) keep two
#   passes, and the same integer reductions (red.global.add.s32) could make them one pass too, measured on the
#   H100's MASKATTN_SM90=0 path first;
# - plans with a node order (performance.md, "fed at the speed of plain tiles"): the perm forward is 1.3x its
#   plan-order twin now (was 2x); left: the backward's K and V, gathered once per CTA by per-chunk lookups
#   (branch bwd-kv-table puts them through the row table: its checks and A/B are docs/bench/next/bwd_kv_table.sh
#   on that branch, one call, not run yet), bwd_dq_convert's per-row perm lookups. The backward producer keeps 40
#   registers for perm plans: 24 spills 12-32 bytes at D = 64 and 128 (nvcc, 2026-11-28). graph_rcm's D = 64 backward read 0.69-1.03x of 5acf51c across three calls: rerun it in turns. FA4 / Flex
#   FLASH were not in the process for graph_rcm after the change.
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 2000 > $OUT/clocks.csv &
sampler=$!
timeout 520 python3 -m pytest -q -x tests/gpu/test_forward.py tests/gpu/test_backward.py > $OUT/pytest.log 2>&1
echo "tests rc $? $(date +%T)"; tail -n 2 $OUT/pytest.log
kill $sampler
sort -t, -k2 -n $OUT/clocks.csv | sed -n '2p;$p'
