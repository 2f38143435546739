# Owed by (q): the GPU tests the final tree (D = 128's forward at 128 x 176 on masks without partial tiles) did not get,
# in two calls of about four minutes each on nvidia-h200 (carry the two wheels): `bash owed_tests.sh forward`, then
# `bash owed_tests.sh backward`. (q) ran test_forward.py's forward-only and whole-tile tests on it, and these very
# files on the tree before it (238 and 174 passed).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
case "${1:-forward}" in
  forward) files="tests/gpu/test_forward.py tests/gpu/test_torch_gpu.py tests/gpu/test_sdpa_gpu.py" ;;
  backward) files="tests/gpu/test_backward.py tests/gpu/test_training.py" ;;
esac
timeout 560 python3 -m pytest -q -rf --tb=short $files > $OUT/tests.txt 2>&1
echo "$1 tests rc $? $(date +%T)"; grep -E "^FAILED|^E  " $OUT/tests.txt | cut -c1-300 | head -20; tail -1 $OUT/tests.txt
