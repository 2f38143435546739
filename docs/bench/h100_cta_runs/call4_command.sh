# the final kernels (runs of equal rows head by head, forward and backward): tests/gpu and compute-sanitizer
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 280 python3 -m pytest -q tests/gpu/test_backward.py > $OUT/pytest_backward.log 2>&1; echo "backward rc $? $(date +%T)"; tail -n 2 $OUT/pytest_backward.log
timeout 120 python3 -m pytest -q tests/gpu/test_decode.py tests/gpu/test_prepared_calls.py tests/gpu/test_dense_plan.py tests/gpu/test_training.py > $OUT/pytest_rest.log 2>&1; echo "rest rc $? $(date +%T)"; tail -n 2 $OUT/pytest_rest.log
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer | head -1)
for tool in racecheck memcheck; do
  timeout 50 $CS --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "none" > $OUT/sanitize_none_$tool.log 2>&1; echo "$tool rc $? $(date +%T)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/sanitize_none_$tool.log | tail -1
done
