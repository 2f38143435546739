set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/base_site .whl/basetree > $OUT/build_base.log 2>&1 || { tail -30 $OUT/build_base.log; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader
(cd scripts && timeout 330 python3 kernel_ab.py ../.whl/basetree/gpu --site ../.whl/basetree/gpu /tmp/base_site --rounds 3 --only "fwd full 16k D=128,fwd causal 16k D=128,fwd swa,fwd doc_causal 16k D=128,fwd bigbird,fwd shared_question,fwd causal 8k D=64" 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"
timeout 220 python3 -m pytest -q -x tests/gpu/test_forward.py > $OUT/pytest.log 2>&1
echo "tests rc $? $(date +%T)"; tail -n 2 $OUT/pytest.log
