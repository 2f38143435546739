# CTA order: runs of equal rows head by head (m_levels / n_levels), against HEAD (its own site); then test_forward
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/site_head .whl/headsite > $OUT/build_head.log 2>&1 || { tail -30 $OUT/build_head.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd scripts
timeout 200 python3 kernel_ab.py ../.whl/headsite/gpu --site ../.whl/headsite/gpu /tmp/site_head \
  --only "fwd full 16k D=128,fwd causal 16k D=128,fwd full 8k D=64,fwd swa,fwd bigbird" --rounds 3 > $OUT/ab_fwd.md 2> $OUT/ab_fwd.log
echo "ab fwd rc $? $(date +%T)"; cat $OUT/ab_fwd.md
timeout 200 python3 kernel_ab.py ../.whl/headsite/gpu ../.whl/bwdrank/gpu --site ../.whl/headsite/gpu /tmp/site_head --backward \
  --only "bwd full 16k D=128,bwd full 8k D=64,bwd bigbird" --rounds 2 > $OUT/ab_bwd.md 2> $OUT/ab_bwd.log
echo "ab bwd rc $? $(date +%T)"; cat $OUT/ab_bwd.md
cd ..
timeout 150 python3 -m pytest -q -x tests/gpu/test_forward.py > $OUT/pytest_forward.log 2>&1; echo "pytest rc $? $(date +%T)"; tail -n 3 $OUT/pytest_forward.log
