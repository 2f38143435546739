# call 4: one pass: FA4's product order, LSE ahead (D >= 96), dQ staging freed before DS_READY by every thread (no C7519 serialization) against 9a2d3cc's kernels; all backward tests
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"
timeout 200 python3 scripts/kernel_ab.py .whl/base/gpu --backward --only bwd --rounds 3 > $OUT/ab.md 2> $OUT/ab.err; echo "ab rc $? $(date +%T)"
cat $OUT/ab.md; tail -2 $OUT/ab.err | cut -c1-300
timeout $((590 - SECONDS)) python3 -m pytest -q -x tests/gpu/test_backward.py -p no:cacheprovider > $OUT/pytest.log 2>&1; echo "pytest rc $? $(date +%T)"
tail -3 $OUT/pytest.log
