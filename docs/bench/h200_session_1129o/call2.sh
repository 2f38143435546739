# (o) call 2 (nvidia-h200; carry .peers/a and the two wheels): FA4's first half to /tmp/fa4; then the final rule
# (80-row steps at D = 96 for plans without partial tiles only): the backward tests at 96 and of the runs, and the
# three sanitizers on D = 96's dense 80-row case.
set -uo pipefail
mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/
source scripts/gpu_install.sh || exit 1
timeout 200 python3 -m pytest -q tests/gpu/test_backward.py -k "runs_of_query_blocks or 96" > $OUT/tests_bwd.log 2>&1
echo "backward tests rc $? $(date +%T)"; tail -2 $OUT/tests_bwd.log
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "head dim 96, one pass" \
      > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T)"; grep -c "80-row runs forward and backward ran" $OUT/$tool.log; tail -1 $OUT/$tool.log
done
