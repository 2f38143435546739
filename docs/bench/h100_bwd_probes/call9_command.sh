# call 9: the same at D = 64, 8k, H = 32
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
source .peers/b/install.sh || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=$PYTHONPATH:/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd /tmp
timeout 500 python3 -m maskattn bench --n 8192 --heads 32 --head-dim 64 --backward --workloads full causal doc_causal swa shared_question bigbird graph_rcm --out $OUT/peers_d64_8k > $OUT/peers_d64_8k.log 2>&1
echo "bench rc $? $(date +%T)"
tail -n 24 $OUT/peers_d64_8k.log
