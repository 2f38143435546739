set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/base_site .whl/basetree > $OUT/build_base.log 2>&1 || { tail -30 $OUT/build_base.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date +%T
timeout 150 python3 -m pytest -q -x tests/gpu/test_backward.py -k "fixed_point or bit_identical or (test_family and causal and bfloat16) or atomic_dq" > $OUT/pytest_subset.log 2>&1
echo "subset rc $? $(date +%T)"; tail -n 3 $OUT/pytest_subset.log
(cd scripts && timeout 330 python3 kernel_ab.py ../.whl/basetree/gpu --site ../.whl/basetree/gpu /tmp/base_site --rounds 2 --backward --deterministic --only "bwd full 16k D=128,bwd causal 16k D=128,bwd swa,bwd full 8k D=64,bwd deterministic" > $OUT/ab.md 2> $OUT/ab_stderr.log)
echo "ab rc $? $(date +%T)"; cat $OUT/ab.md
