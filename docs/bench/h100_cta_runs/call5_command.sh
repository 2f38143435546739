# the final code: the bench's own timing of maskattn beside cuDNN SDPA (no compiled peers: the budget)
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 140 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 128 --backward --workloads full causal swa bigbird \
  --peers cudnn --out $OUT/bench_d128_16k > $OUT/bench.log 2>&1; echo "bench rc $? $(date +%T)"; tail -14 $OUT/bench.log
