# call 3: call 2 again (its A/B was cut by the time limit), 2 rounds, no tests
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

ONLY="bwd full 16k D=128,bwd causal 16k D=128,bwd full 8k D=64,bwd bigbird,bwd graph_rcm"
cd scripts
timeout 380 python3 kernel_ab.py ../.whl/base/gpu ../.whl/probe/rotate ../.whl/probe/perwarp ../.whl/probe/noreduce --backward --only "$ONLY" --rounds 2 > $OUT/ab.md 2> $OUT/ab.log
echo "ab rc $? $(date +%T)"
cat $OUT/ab.md
