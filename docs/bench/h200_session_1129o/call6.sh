# (o) call 6 (nvidia-h200; carry the two wheels): main 345cf2f's kernels (the column split of call 5 dropped): the
# whole backward suite and the training checks (torch.compile, the 50-step run).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 500 python3 -m pytest -q tests/gpu/test_backward.py tests/gpu/test_training.py > $OUT/tests.log 2>&1
echo "tests rc $? $(date +%T)"; grep -E "passed|failed|FAILED|Error" $OUT/tests.log | tail -8
