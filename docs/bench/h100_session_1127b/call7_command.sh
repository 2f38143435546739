set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/base_site .whl/basetree > $OUT/build_base.log 2>&1 || { tail -30 $OUT/build_base.log; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 -m pytest -q -x tests/gpu/test_backward.py -k "bit_identical or (test_family and bfloat16) or test_after_gpu_forward" > $OUT/pytest_quick.log 2>&1
echo "tests rc $? $(date +%T)"; tail -n 2 $OUT/pytest_quick.log
(cd scripts && timeout 300 python3 kernel_ab.py ../.whl/basetree/gpu --site ../.whl/basetree/gpu /tmp/base_site --rounds 3 --backward --deterministic --only "bwd full 16k D=128,bwd deterministic full 16k D=128,bwd deterministic causal 16k D=128,bwd deterministic swa,bwd deterministic doc_causal 16k D=128,bwd deterministic bigbird,bwd deterministic causal 8k D=64" 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"
cd /tmp && timeout 120 python3 -m maskattn bench --sdpa --n 16384 --heads 16 --head-dim 128 --backward --out $OUT/sdpa > $OUT/sdpa.log 2>&1
echo "sdpa rc $? $(date +%T)"; tail -n 22 $OUT/sdpa.log
