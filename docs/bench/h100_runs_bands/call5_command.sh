# GPU tests and synccheck on the tree (runs with slack 0.5)
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"
timeout 60 compute-sanitizer --tool synccheck python3 scripts/sanitize.py none > $OUT/synccheck.log 2>&1; echo "synccheck rc $? $(date +%T)"; tail -n 2 $OUT/synccheck.log
timeout 440 python3 -m pytest -q -x tests/gpu/test_forward.py tests/gpu/test_backward.py > $OUT/pytest.log 2>&1
echo "pytest rc $? $(date +%T)"; tail -n 3 $OUT/pytest.log
