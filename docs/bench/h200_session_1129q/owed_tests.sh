# Owed by (p): the GPU tests the final tree (455e1cd: the last wave's split, a one-dimensional forward grid) did not
# get, in two calls of about six minutes each on nvidia-h200 (carry the two wheels): `bash owed_tests.sh forward`,
# then `bash owed_tests.sh backward`. (p) ran test_decode, test_prepared_calls and the forward-only split tests on it.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
case "${1:-forward}" in
  forward) files="tests/gpu/test_forward.py tests/gpu/test_torch_gpu.py tests/gpu/test_sdpa_gpu.py" ;;
  backward) files="tests/gpu/test_backward.py tests/gpu/test_training.py" ;;
esac
timeout 560 python3 -m pytest -q -rf --tb=short $files > $OUT/tests.txt 2>&1
echo "$1 tests rc $? $(date +%T)"; grep -E "^FAILED|^E  " $OUT/tests.txt | cut -c1-300 | head -20; tail -1 $OUT/tests.txt
