# call 4: dQ staged in two buffers (D = 32, 96, 128) with per-warp reductions, against HEAD, per-warp alone, and a racy no-wait probe
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 150 python3 -m pytest -q -x tests/gpu/test_backward.py -k "test_head_dim_dtype or test_atomic_dq" > $OUT/pytest_quick.log 2>&1; echo "pytest rc $? $(date +%T)"; tail -n 3 $OUT/pytest_quick.log
ONLY="bwd full 16k D=128,bwd causal 16k D=128,bwd full 8k D=64,bwd bigbird,bwd graph_rcm"
cd scripts
timeout 400 python3 kernel_ab.py ../.whl/base/gpu ../.whl/probe/perwarp ../.whl/probe/nowait --backward --only "$ONLY" --rounds 2 > $OUT/ab.md 2> $OUT/ab.log
echo "ab rc $? $(date +%T)"
cat $OUT/ab.md
