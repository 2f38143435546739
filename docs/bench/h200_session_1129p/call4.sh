# (p) call 4 (nvidia-h200; carry the two wheels): the split of the last wave's CTAs (fwd.py's tail_splits_for,
# common.cuh's forward_cta with split_from; working tree on 9964bdf). The split tests (both kernels), the forward-only
# tiles' launch paths, the sanitizers on the decode runs (where the tail cases are), then in turns the default
# launch (tail split) against num_splits=1 on full (and causal, which takes no split: a control).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 240 python3 -m pytest -q tests/gpu/test_decode.py tests/gpu/test_prepared_calls.py \
    "tests/gpu/test_forward.py::test_forward_only_tile_splits_packing_and_cache_lengths" > $OUT/tests.log 2>&1
echo "split tests rc $? $(date +%T)"; tail -2 $OUT/tests.log
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "no attention case" \
      > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T)"; tail -1 $OUT/$tool.log
done
python3 scripts/tiles_ab.py --head-dim 96 --tiles 192x112 --n 16384 --unsplit --workloads full causal 2>&1 | tee $OUT/ab96.log
python3 scripts/tiles_ab.py --head-dim 128 --tiles 128x128 --n 16384 --unsplit --workloads full 2>&1 | tee $OUT/ab128.log
python3 scripts/tiles_ab.py --head-dim 64 --heads 32 --tiles 192x128 --n 8192 --unsplit --workloads full 2>&1 | tee $OUT/ab64.log
python3 scripts/tiles_ab.py --head-dim 256 --tiles 128x80 --n 8192 --unsplit --workloads full 2>&1 | tee $OUT/ab256.log
echo "A/B done $(date +%T)"
