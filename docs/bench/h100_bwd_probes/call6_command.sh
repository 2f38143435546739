# call 6: compute-sanitizer on every bit-tile case (staged bits), then the rest of tests/gpu as time allows
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer | head -1)
for tool in memcheck racecheck synccheck; do
  timeout 110 $CS --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "bits" > $OUT/sanitize_bits_$tool.log 2>&1; echo "$tool rc $? $(date +%T)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/sanitize_bits_$tool.log | tail -1; grep -c " ran" $OUT/sanitize_bits_$tool.log
done
timeout 200 python3 -m pytest -q tests/gpu/test_training.py tests/gpu/test_torch_gpu.py > $OUT/pytest_training_torch.log 2>&1; echo "pytest rc $? $(date +%T)"; tail -n 3 $OUT/pytest_training_torch.log
