# (l) calls 11 and 12 (nvidia-h200, warm): compute-sanitizer on the new dense_plan_classify (random masks at density
# 0.5 with tiles 128 x 128, 16 x 16 and 256 x 32, and the broadcast / strided masks); call 12 is synccheck alone
source scripts/gpu_install.sh >/dev/null || exit 1
for t in racecheck memcheck synccheck; do
  timeout 100 compute-sanitizer --tool $t --error-exitcode 1 python3 -m pytest -q -x tests/gpu/test_dense_plan.py \
      -k "random_masks and 0.5 or broadcast" > $OUT/$t.log 2>&1
  echo "$t rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" $OUT/$t.log | tail -3
done
