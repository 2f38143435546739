# Owed by (r): the checks its last kernel change (fwd_sm90.cu's TWO_BODIES: one key-loop body for whole tiles, one
# for partial ones) did not get, in one call of about nine minutes on nvidia-h200 (carry the two wheels):
# `bash docs/bench/next/owed_tests.sh`. (r) ran tests/gpu/test_forward.py on it (237 passed) and racecheck on
# `sanitize.py "bits, one pass (atomic dQ)"` (clean); these are the other GPU files that run the forward, and
# memcheck and synccheck, with racecheck on the interval cases too.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 300 python3 -m pytest -q -rf --tb=short tests/gpu/test_torch_gpu.py tests/gpu/test_sdpa_gpu.py \
    tests/gpu/test_training.py > $OUT/tests.txt 2>&1
echo "tests rc $? $(date +%T)"; grep -E "^FAILED|^E  " $OUT/tests.txt | cut -c1-300 | head -20; tail -1 $OUT/tests.txt
# node orders went back to one body after (r)'s forward tests: theirs again
timeout 120 python3 -m pytest -q -rf --tb=short tests/gpu/test_forward.py -k "perm or graph or dilated" \
    > $OUT/tests_perm.txt 2>&1
echo "perm tests rc $? $(date +%T)"; grep -E "^FAILED|^E  " $OUT/tests_perm.txt | cut -c1-300 | head; tail -1 $OUT/tests_perm.txt
for run in "memcheck|bits, one pass (atomic dQ)" "synccheck|bits, one pass (atomic dQ)" "racecheck|intervals, head dim 96,"; do
  tool=${run%%|*}
  timeout 80 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "${run#*|}" \
      > $OUT/$tool.txt 2>&1
  echo "$tool rc $? $(date +%T)"; grep -c "ran" $OUT/$tool.txt; tail -1 $OUT/$tool.txt
done
