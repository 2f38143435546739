# Branch fwd-tma-store (prepared on the host 2026-11-27, not yet run on a GPU): the forward's O stored by the copy
# engine from the staged tile (one thread per consumer, the CTA leaving once the copy has read shared memory), where
# Q's rows are a head's tokens. Probe variants said the epilogue holds 60% of our per-CTA gap to FA4 on short rows
# (performance.md, "The epilogue holds most of it"). One call, carrying .whl with the meson-python wheels and
# .whl/basetree = `git archive main meson.build pyproject.toml setup.cfg python maskprep gpu README.md`:
#   bash docs/bench/next/fwd_tma_store.sh
# Then, if it gains: compute-sanitizer memcheck / racecheck / synccheck on `scripts/sanitize.py none` and the rest of
# tests/gpu (prepared calls, SDPA, decode) before merging.
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/base_site .whl/basetree > $OUT/build_base.log 2>&1 || { tail -30 $OUT/build_base.log; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 240 python3 -m pytest -q -x tests/gpu/test_forward.py > $OUT/pytest.log 2>&1
echo "tests rc $? $(date +%T)"; tail -n 2 $OUT/pytest.log
(cd scripts && timeout 300 python3 kernel_ab.py ../.whl/basetree/gpu --site ../.whl/basetree/gpu /tmp/base_site --rounds 3 --only "fwd full 16k D=128,fwd causal 16k D=128,fwd swa,fwd doc_causal 16k D=128,fwd shared_question,fwd bigbird,fwd full 8k D=64,fwd full 8k D=256" 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"
