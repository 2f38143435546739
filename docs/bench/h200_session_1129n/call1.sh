# (n) call 1 (nvidia-h200; carry .peers/a and the two wheels): FA4's first half to /tmp/fa4, then D = 96 at the
# forward-only 128 x 160 tile of docs/bench/next/d96_keys160.patch (applied to the tree): the forward tests at the
# forward-only tiles, 128 x 128 against 128 x 160 in turns at 16k, the three sanitizers on D = 96's cases.
set -uo pipefail
mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/
source scripts/gpu_install.sh || exit 1
timeout 170 python3 -m pytest -q tests/gpu/test_forward.py -k "forward_only or (other_head_dims and 96)" \
    > $OUT/tests_fwd.log 2>&1
echo "forward tests rc $? $(date +%T)"; tail -2 $OUT/tests_fwd.log
timeout 150 python3 scripts/tiles_ab.py --head-dim 96 --tiles 128x128 128x160 --n 16384 \
    --workloads full causal doc_causal shared_question > $OUT/tiles_ab.log 2>&1
echo "tiles A/B rc $? $(date +%T)"; tail -8 $OUT/tiles_ab.log
for tool in memcheck racecheck synccheck; do
  timeout 70 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "head dim 96" \
      > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T)"; grep -c "(128, 160)" $OUT/$tool.log; tail -1 $OUT/$tool.log
done
