# call B: FA4 installed; every peer but Flex in one process at D = 128, 16k, fwd and fwd+bwd; then SDPA/torch GPU tests
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
source .peers/b/install.sh || exit 1
export PYTHONPATH=$PYTHONPATH:/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
(cd /tmp && timeout 330 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 128 --backward --workloads full causal swa bigbird \
  --peers fa4 cudnn --out $OUT/peers_d128_16k > $OUT/peers_d128_16k.log 2>&1)
echo "bench rc $? $(date +%T)"; tail -n 14 $OUT/peers_d128_16k.log
timeout 150 python3 -m pytest -q tests/gpu/test_sdpa_gpu.py tests/gpu/test_torch_gpu.py > $OUT/pytest.log 2>&1
echo "pytest rc $? $(date +%T)"; tail -n 3 $OUT/pytest.log
