set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/site_band .whl/band > $OUT/build_band.log 2>&1 || { tail -30 $OUT/build_band.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd scripts && timeout 540 python3 kernel_ab.py ../.whl/band/gpu ../.whl/band50/gpu --backward \
  --site ../.whl/band/gpu /tmp/site_band --site ../.whl/band50/gpu /tmp/site_band \
  --env ../.whl/band50/gpu MASKATTN_RUN_SLACK=0.5 \
  --only "fwd causal 16k D=128,fwd doc_causal,fwd shared_question,bwd causal 16k D=128,bwd causal 8k D=64,bwd doc_causal" \
  --rounds 3 > $OUT/ab_band.md 2> $OUT/ab_band.log
echo "ab rc $? $(date +%T)"; cat $OUT/ab_band.md
