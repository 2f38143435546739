# D = 256's forward-only 128 x 80 tile (FlashAttention-3's), prepared in (o) on the host: docs/bench/next/
# d256_keys80.patch (apply with `git apply`, then carry the two wheels). No alignment slack at that tile (the kernel
# traps where the dynamic shared memory's base is not 1024-byte aligned: the first tests say whether it is); plans
# with bit tiles (ptxas spills 32 bytes) or a node order (row tables do not fit) keep 128 x 64. Host checks: nvcc
# no spills (`tests/test_nvcc.py -k "fwd_sm90 and 256"` 9 passed), the host suite, same_cubins against main (only
# the new 128 x 80 instantiations are new; see the patch's commit note). Model from D = 192's 64 -> 96 -> 112 keys
# (t ~ 31 + N per tile): about 0.93-0.95x the 64-key time. One call: the tests at the tile, the sanitizers, then
# 128 x 64 against 128 x 80 in turns at 8k.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 200 python3 -m pytest -q tests/gpu/test_forward.py -k "d256 or (forward_only_tile_splits and 256)" \
    > $OUT/tests_fwd.log 2>&1
echo "forward tests rc $? $(date +%T)"; tail -3 $OUT/tests_fwd.log
for tool in memcheck racecheck synccheck; do
  timeout 80 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "head dim 256" \
      > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T)"; grep -c "(128, 80)" $OUT/$tool.log; tail -1 $OUT/$tool.log
done
timeout 200 python3 scripts/tiles_ab.py --head-dim 256 --tiles 128x64 128x80 --n 8192 \
    --workloads full causal doc_causal swa shared_question > $OUT/tiles_ab.log 2>&1
echo "tiles A/B rc $? $(date +%T)"; tail -7 $OUT/tiles_ab.log
