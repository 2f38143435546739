set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader
(cd scripts && timeout 400 python3 kernel_ab.py ../gpu ../.whl/ab/noepi/gpu ../.whl/ab/nostore/gpu --rounds 3 --only "fwd full 16k D=128,fwd swa,fwd doc_causal 16k D=128,fwd shared_question" 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"
