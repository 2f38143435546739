# (o) call 1 (nvidia-h200; carry the two wheels and .whl/basetree, main da97ed6's sources): the one-pass backward's
# 80-row steps over runs of query blocks (RUNS) at D = 96 too. The backward GPU tests that run them (every family at
# 96: bf16 in test_family_other_head_dims, fp16 in test_runs_of_query_blocks), the three sanitizers on the 80-row
# cases, then kernel_ab against da97ed6's package (its own process; D = 128's backward is the same code on both sides:
# the control for the process difference).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/base_site .whl/basetree \
    > $OUT/base_build.log 2>&1 || { tail -20 $OUT/base_build.log; exit 1; }
echo "base installed $(date +%T)"
timeout 200 python3 -m pytest -q tests/gpu/test_backward.py -k "runs_of_query_blocks or (other_head_dims and 96)" \
    > $OUT/tests_bwd.log 2>&1
echo "backward tests rc $? $(date +%T)"; tail -2 $OUT/tests_bwd.log
for tool in memcheck racecheck synccheck; do
  timeout 80 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "80-row runs" \
      > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T)"; tail -1 $OUT/$tool.log
done
(cd scripts && timeout 200 python3 kernel_ab.py ../.whl/basetree/gpu --site ../.whl/basetree/gpu /tmp/base_site \
    --backward --rounds 3 --only "bwd full 16k D=96,bwd causal 16k D=96,bwd doc_causal 16k D=96,bwd full 16k D=128,bwd causal 16k D=128") \
    > $OUT/kernel_ab.log 2> $OUT/kernel_ab.err
echo "kernel_ab rc $? $(date +%T)"; cat $OUT/kernel_ab.log
