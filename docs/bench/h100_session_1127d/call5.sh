set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date +%T
timeout 300 python3 -m pytest -q tests/gpu/test_backward.py::test_fixed_point_dq_is_as_exact_as_float32 tests/gpu/test_prepared_calls.py tests/gpu/test_torch_gpu.py tests/gpu/test_sdpa_gpu.py > $OUT/pytest.log 2>&1
echo "tests rc $? $(date +%T)"; tail -n 3 $OUT/pytest.log; grep -E "^E .*rows apart|^FAILED" $OUT/pytest.log | head -5
