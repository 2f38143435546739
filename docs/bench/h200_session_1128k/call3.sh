# (k) call 3 (nvidia-h200), carry .peers/a and .whl: FA4's first part copied for call 4; the backward after the review
# mends (the dQ writer's rows in one slot, wgmma_ss's N = 80 branch): the whole backward suite and compute-sanitizer on
# the 80-row runs
set -uo pipefail
mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/ && echo "fa4 part a copied"
source scripts/gpu_install.sh || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 300 python3 -m pytest -q -x tests/gpu/test_backward.py > $OUT/bwd_tests.log 2>&1
echo "backward tests rc $? $(date +%T)"; tail -2 $OUT/bwd_tests.log
for tool in memcheck racecheck synccheck; do
  timeout 70 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "80-row runs" \
      > $OUT/sanitize_$tool.log 2>&1
  echo "$tool rc $? $(grep "ERROR SUMMARY\|RACECHECK SUMMARY" $OUT/sanitize_$tool.log | tail -1) $(date +%T)"
done
