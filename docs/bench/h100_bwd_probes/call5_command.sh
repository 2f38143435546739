# call 5: bit tiles' step rows staged with Q and dO (D <= 128): test_backward.py, then A/B on bit-masked workloads
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd scripts
timeout 150 python3 kernel_ab.py ../.whl/base/gpu --backward --only "bwd bigbird,bwd graph_rcm,bwd doc_causal 16k D=64" --rounds 3 > $OUT/ab.md 2> $OUT/ab.log
echo "ab rc $? $(date +%T)"
cat $OUT/ab.md
cd ..
timeout 330 python3 -m pytest -q -x tests/gpu/test_backward.py > $OUT/pytest_backward.log 2>&1; echo "pytest rc $? $(date +%T)"; tail -n 3 $OUT/pytest_backward.log
