# Prepared in (m), host-checked only: D = 96's forward-only tile at 128 x 160 (FlashAttention-4 takes 192 x 144
# there; ours is 128 x 128, 1.12x the best peer's dense forward in (l)). Apply first, on the host:
#     git apply docs/bench/next/d96_keys160.patch
# (VALID_TILE admits it; wgmma m64n160k16; the row tables of plans with a node order sized by TILE_N, so the epilogue's
# table no longer overlaps the producer's second slot, which broke graph_rcm at 160 keys in (m) call 2; nvcc: no
# spills, node orders included; 204,736 bytes of shared memory with the row tables). At 16k the 160-key plans list
# 1.00-1.02x the work on full, causal, documents, shared_question and VLM, 1.06x on graph_rcm (taken), 1.11-1.28x
# on the windows, Longformers and BigBird (kept at 128). Then one nvidia-h200 call (carry the two meson-python
# wheels): the forward tests at the forward-only tiles, the tiles in turns, the sanitizers. Keep it only if 160 keys
# beat 128 beyond the rounds' spread; then bench D = 96 against the peers (FA4 by two calls).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 150 python3 -m pytest -q tests/gpu/test_forward.py -k "forward_only or (other_head_dims and 96)" \
    > $OUT/tests_fwd.log 2>&1
echo "forward tests rc $? $(date +%T)"; tail -2 $OUT/tests_fwd.log
timeout 120 python3 scripts/tiles_ab.py --head-dim 96 --tiles 128x128 128x160 --n 16384 \
    --workloads full causal doc_causal > $OUT/tiles_ab.log 2>&1
echo "tiles A/B rc $? $(date +%T)"; cat $OUT/tiles_ab.log
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "head dim 96" \
      > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T)"; grep "(128, 160)" $OUT/$tool.log | tr '\n' ';'; echo; tail -1 $OUT/$tool.log
done
