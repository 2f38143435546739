# Call 8: main's forward GPU tests (the forward kernels are unchanged since 5ff09b4; the host path's launch-cache key
# changed in 4688946 and 129cfdc), with the SM clock sampled beside them.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 2000 > $OUT/clocks.csv &
sampler=$!
timeout 400 python3 -m pytest -q -x tests/gpu/test_forward.py tests/gpu/test_decode.py > $OUT/pytest.log 2>&1
echo "tests rc $? $(date +%T)"; tail -n 2 $OUT/pytest.log
kill $sampler
sort -t, -k2 -n $OUT/clocks.csv | sed -n '2p;$p'
