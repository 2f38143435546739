# call 5: the rest of tests/gpu (test_backward.py passed in call 4 on this code) and compute-sanitizer on the atomic (one-pass) cases, decode, dense plans, 192-row forwards
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"
timeout 265 python3 -m pytest -q tests/gpu --ignore=tests/gpu/test_backward.py -p no:cacheprovider > $OUT/pytest.log 2>&1; echo "pytest rc $? $(date +%T)"
tail -4 $OUT/pytest.log
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer | head -1)
for tool in racecheck synccheck memcheck; do
  timeout $([ $tool = racecheck ] && echo 75 || echo 55) $CS --tool $tool --error-exitcode 1 python3 scripts/sanitize.py atomic > $OUT/sanitize_$tool.log 2>&1; echo "$tool rc $? $(date +%T)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|Error" $OUT/sanitize_$tool.log | tail -2
done
