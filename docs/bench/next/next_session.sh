# The next GPU session's first call (performance.md, 2026-11-28 (f)), with branch bwd-do-wait checked out and .whl
# carried (.whl/basetree = `git archive main gpu`; the meson-python and pyproject-metadata wheels):
#   bash docs/bench/next/next_session.sh
# bwd-do-wait: the backward's dO and delta on an mbarrier of their own (DO_FULL), waited for only after S^T is issued,
# as FlashAttention-4's backward waits for dO between its two products. The forward's analogue (the V wait after S,
# 0f381e1) made the forward 2-8% faster; the branch is compiled and checked on the host only (test_nvcc, test_nvrtc).
# Decide it by the in-turns A/B below (a --control copy of main gives the noise floor), then the backward tests and
# the three sanitizers on the branch; merge only if it is faster and all of them pass.
# The fwd192 cases (the forward-only 192-row tile at D = 64, where FA4's dense forward is 1.10x faster than ours)
# are the same kernels on both sides here: a baseline for the next forward work.
# Other leads (performance.md, 2026-11-28 (c) to (f)):
# - the forward loop's 60 uniform-datapath instructions per block for wgmma descriptors (FA4: 13); the uniform
#   consumer index was 3-4% slower on the forward in (c), so another way (descriptors per stage hoisted);
# - D = 256 read 1% slower with the forward's V wait after S in three calls (kept for one code path);
# - the persistent dynamic scheduler for plans of short rows only; the deterministic backward's per-channel K exponents.
# Dropped, do not retry: two copies of the forward's key loop (masked / unmasked), the softmax's reductions in four
# chains or both halves' max first ((f)); dS^T by stmatrix ((e)); masks after the exponentials, the forward's K release
# after the softmax, sleeping producer waits ((d)).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv > $OUT/gpu.csv
(cd scripts && timeout 260 python3 kernel_ab.py ../.whl/basetree/gpu --control --rounds 3 --backward \
  --only "bwd full 16k D=128,bwd causal 16k D=128,bwd full 8k D=64,bwd causal 8k D=64,bwd doc_causal 16k D=64,bwd shared_question,bwd swa,bwd deterministic,fwd192") \
  > $OUT/ab.md 2>&1
echo "ab rc $? $(date +%T)"; grep '^|' $OUT/ab.md
timeout 250 python3 -m pytest -q -x tests/gpu/test_backward.py > $OUT/pytest_bwd.log 2>&1
echo "backward tests rc $? $(date +%T): $(tail -n 1 $OUT/pytest_bwd.log)"
for tool in racecheck synccheck memcheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "one pass" > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T): $(tail -n 1 $OUT/$tool.log)"
done
