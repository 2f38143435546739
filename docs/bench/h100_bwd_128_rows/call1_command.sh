# call 1 (session 2026-11-27b): dK/dV steps of 128 rows at D <= 64, bits masked on the packed operands; tests then A/B against HEAD (own package)
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
(python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/base_site .whl/basetree > $OUT/build_base.log 2>&1; echo "base built rc $? $(date +%T)") &
echo "built $(date +%T)"
timeout 200 python3 -m pytest -q -x tests/gpu/test_backward.py -k "64 or 32" -p no:cacheprovider > $OUT/pytest_small.log 2>&1; echo "pytest small rc $? $(date +%T)"
tail -3 $OUT/pytest_small.log
wait
timeout 200 python3 scripts/kernel_ab.py .whl/basetree/gpu --base-site /tmp/base_site --backward --only bwd --rounds 2 > $OUT/ab.md 2> $OUT/ab.err; echo "ab rc $? $(date +%T)"
cat $OUT/ab.md; tail -3 $OUT/ab.err
timeout $((590 - SECONDS)) python3 -m pytest -q -x tests/gpu/test_backward.py -k "not (64 or 32)" -p no:cacheprovider > $OUT/pytest_rest.log 2>&1; echo "pytest rest rc $? $(date +%T)"
tail -3 $OUT/pytest_rest.log
