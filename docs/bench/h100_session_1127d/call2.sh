set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date +%T
timeout 420 python3 -m pytest -q tests/gpu/test_backward.py tests/gpu/test_training.py > $OUT/pytest_backward_training.log 2>&1
echo "tests rc $? $(date +%T)"; tail -n 3 $OUT/pytest_backward_training.log
for run in "memcheck|" "racecheck|perm" "synccheck|bits" "racecheck|head dim 64"; do
  tool=${run%%|*}; only=${run#*|}
  timeout 100 compute-sanitizer --tool $tool python3 scripts/sanitize.py "$only" > "$OUT/${tool}_${only// /_}.log" 2>&1
  echo "$tool '$only' rc $? $(grep -E 'ERROR SUMMARY' "$OUT/${tool}_${only// /_}.log" | tail -1) $(date +%T)"
done
