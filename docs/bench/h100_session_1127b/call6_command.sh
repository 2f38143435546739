set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader
cd scripts && timeout 500 python3 kernel_ab.py ../gpu ../.whl/ab/nofence/gpu ../.whl/ab/nowait/gpu --rounds 2 --backward --deterministic --only "bwd full 16k D=128,bwd deterministic full 16k D=128,bwd deterministic causal 16k D=128,bwd deterministic swa" 2> $OUT/ab.log
echo "ab rc $? $(date +%T)"
