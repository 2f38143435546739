# Call E: carry .whl. The 80-row steps' checks on the final kernel: compute-sanitizer memcheck, racecheck and
# synccheck on the new cases (and the decode and dense-plan runs after them), then the whole backward GPU suite.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "80-row runs" > $OUT/sanitize_$tool.log 2>&1
  echo "$tool rc $? $(tail -1 $OUT/sanitize_$tool.log)"
done
timeout 330 python3 -m pytest -q tests/gpu/test_backward.py -p no:cacheprovider 2>&1 | tail -6 | tee $OUT/test_backward.log
