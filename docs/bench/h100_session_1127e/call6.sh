# call 6: the forward epilogue's rows through a table (one lookup a row, all in flight), store_rows_sw128 taking every offset before its first store; checks, A/B against main (perm workloads and dense controls), probe_perm.py
# compute-sanitizer on the perm cases, then kernel_ab against main's kernels on the node-order workloads
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date +%T
timeout 240 python3 -m pytest -q -x tests/gpu/test_forward.py tests/gpu/test_backward.py -k "graph_rcm or dilated or rejects" > $OUT/pytest_perm.log 2>&1
echo "tests rc $? $(date +%T)"; tail -n 3 $OUT/pytest_perm.log
for run in "racecheck|perm" "synccheck|perm" "memcheck|perm"; do
  tool=${run%%|*}; only=${run#*|}
  timeout 100 compute-sanitizer --tool $tool python3 scripts/sanitize.py "$only" > "$OUT/${tool}_${only// /_}.log" 2>&1
  echo "$tool '$only' rc $? $(grep -E 'ERROR SUMMARY' "$OUT/${tool}_${only// /_}.log" | tail -1) $(date +%T)"
done
(cd scripts && timeout 300 python3 kernel_ab.py ../.whl/basetree/gpu --rounds 3 --backward --only "graph_rcm,lf_dilated,fwd full 16k D=128,bwd full 16k D=128,bwd doc_causal 16k D=64" > $OUT/ab.md 2> $OUT/ab_stderr.log)
echo "ab rc $? $(date +%T)"; cat $OUT/ab.md
timeout 120 python3 docs/bench/h100_session_1127e/probe_perm.py --rounds 2 > $OUT/probe_perm.md 2> $OUT/probe_perm.err
echo "probe rc $? $(date +%T)"; cat $OUT/probe_perm.md
