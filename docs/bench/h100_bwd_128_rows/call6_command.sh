# call 6: compute-sanitizer on the two-pass (deterministic) kernels at 128-row steps (bits, head dim 32) and the rest below
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer | head -1)
for tool in racecheck memcheck; do
  timeout 45 $CS --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "bits, head dim 32" > $OUT/sanitize_$tool.log 2>&1; echo "$tool rc $? $(date +%T)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/sanitize_$tool.log | tail -1; grep -c " ran" $OUT/sanitize_$tool.log
done
