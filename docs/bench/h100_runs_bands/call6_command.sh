# the bands (tree): GPU tests of device-built runs and SDPA; then the bands against greedy runs within 0.5 (branch banded-runs)
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 100 python3 -m pytest -q -x tests/gpu/test_dense_plan.py tests/gpu/test_sdpa_gpu.py > $OUT/pytest.log 2>&1
echo "pytest rc $? $(date +%T)"; tail -n 3 $OUT/pytest.log
python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/site_band .whl/band > $OUT/build_band.log 2>&1 || { tail -30 $OUT/build_band.log; exit 1; }
cd scripts && timeout 150 python3 kernel_ab.py ../.whl/band50/gpu --backward --site ../.whl/band50/gpu /tmp/site_band \
  --env ../.whl/band50/gpu MASKATTN_RUN_SLACK=0.5 \
  --only "bwd bigbird,fwd shared_question,fwd doc_causal,bwd causal 16k D=128" --rounds 2 > $OUT/ab_bands.md 2> $OUT/ab_bands.log
echo "ab rc $? $(date +%T)"; cat $OUT/ab_bands.md
