# (n) call 3 (nvidia-h200; carry the two wheels): D = 96's forward-only tile at 192 x 112 (three consumer
# warpgroups, as the 192-row tile at D <= 64; 128 keys there spill 144 bytes at 160 registers, 112 none): the forward
# tests at the forward-only tiles, 128 x 128 against 192 x 112 in turns at 16k, the three sanitizers on D = 96's
# cases, then the bench against Flex Triton and Flex FLASH (FA4's kernels; FA4 itself needs two calls).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 170 python3 -m pytest -q tests/gpu/test_forward.py -k "forward_only or (other_head_dims and 96)" \
    > $OUT/tests_fwd.log 2>&1
echo "forward tests rc $? $(date +%T)"; tail -2 $OUT/tests_fwd.log
timeout 150 python3 scripts/tiles_ab.py --head-dim 96 --tiles 128x128 192x112 --n 16384 \
    --workloads full causal doc_causal shared_question swa > $OUT/tiles_ab.log 2>&1
echo "tiles A/B rc $? $(date +%T)"; tail -8 $OUT/tiles_ab.log
for tool in memcheck racecheck synccheck; do
  timeout 70 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "head dim 96" \
      > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T)"; grep -c "(192, 112)" $OUT/$tool.log; tail -1 $OUT/$tool.log
done
timeout 150 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 96 --peers flex flex_flash \
    --workloads full causal doc_causal swa shared_question bigbird graph_rcm --out $OUT/d96 > $OUT/d96.log 2>&1
echo "D=96 bench rc $? $(date +%T)"; rm -f $OUT/*/bench.png
grep -A10 "against every peer" $OUT/d96/bench.md | grep "^| [0-9]" | cut -d"|" -f2-4,7-12,13-14
