# call 1: the GPU tests that 5acf51c changed, then what a node order costs the Hopper kernels (probe_perm.py)
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date +%T
timeout 200 python3 -m pytest -q -x tests/gpu/test_backward.py -k "fixed_point or bit_identical or nothing_visible" > $OUT/pytest_subset.log 2>&1
echo "subset rc $? $(date +%T)"; tail -n 3 $OUT/pytest_subset.log
timeout 300 python3 docs/bench/h100_session_1127e/probe_perm.py --rounds 3 > $OUT/probe_perm.md 2> $OUT/probe_perm.err
echo "probe rc $? $(date +%T)"; cat $OUT/probe_perm.md; tail -5 $OUT/probe_perm.err
