# call 8 (after call 7 copied .peers/a): FA4 installed, every peer in one process at D = 128, 16k, fwd and fwd+bwd
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
source .peers/b/install.sh || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=$PYTHONPATH:/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd /tmp
timeout 500 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 128 --backward --workloads full causal doc_causal swa shared_question bigbird graph_rcm --out $OUT/peers_d128_16k > $OUT/peers_d128_16k.log 2>&1
echo "bench rc $? $(date +%T)"
tail -n 14 $OUT/peers_d128_16k.log
