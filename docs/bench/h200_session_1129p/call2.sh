# (p) call 2 (nvidia-h200; carry .peers/a and the two wheels): FA4's first half to /tmp/fa4; then the forward's GPU
# tests on the final tree (D = 256's 128 x 80 tile merged in 9964bdf): forward, decode, prepared calls, torch.
set -uo pipefail
mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/
source scripts/gpu_install.sh || exit 1
timeout 450 python3 -m pytest -q tests/gpu/test_forward.py tests/gpu/test_decode.py tests/gpu/test_prepared_calls.py \
    tests/gpu/test_torch_gpu.py > $OUT/tests.log 2>&1
echo "forward-side tests rc $? $(date +%T)"; tail -2 $OUT/tests.log
