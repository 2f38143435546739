# (n) call 6 (nvidia-h200; carry the two wheels): the final tree (D = 96's forward-only 192 x 112 tile in
# SM90_FORWARD_TILES; the row loader's partial last pass): every forward test, decode, prepared calls and the torch
# bridge on the GPU.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 480 python3 -m pytest -q tests/gpu/test_forward.py tests/gpu/test_decode.py tests/gpu/test_prepared_calls.py \
    tests/gpu/test_torch_gpu.py > $OUT/tests.log 2>&1
echo "tests rc $? $(date +%T)"; grep -E "passed|failed|FAILED|Error" $OUT/tests.log | tail -8
