# (m) call 3 (nvidia-h200; carry .peers/a and the two meson-python wheels): FA4's first half to /tmp/fa4, then the
# forward-only 128 x 96 tile at D = 192 (tree = main + that tile): the forward tests, then compute-sanitizer on the
# head-dim-192 cases and the forward-only tiles' runs.
set -uo pipefail
mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/
source scripts/gpu_install.sh || exit 1
timeout 240 python3 -m pytest -q tests/gpu/test_forward.py > $OUT/tests_fwd.log 2>&1
echo "forward tests rc $? $(date +%T)"; tail -2 $OUT/tests_fwd.log
for tool in racecheck memcheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "head dim 192" \
      > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T)"; grep "tile, " $OUT/$tool.log | head -9 | tr '\n' ';'; echo; tail -1 $OUT/$tool.log
done
