# Call 5 (main with the backward's consumer index by __shfl_sync, the bwd_sm90.cu hunk of uniform_consumer.diff):
# its A/B against main before it (.whl/basetree, as in call 4; samples in turns), the backward GPU tests, and the
# sanitizers on the interval cases.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
CASES="bwd swa,bwd doc_causal 16k D=128,bwd shared_question,bwd full 16k D=128,bwd causal 8k D=64,bwd causal 16k D=64"
CASES="$CASES,bwd doc_causal 16k D=64,bwd graph_rcm 16k,bwd deterministic full,fwd swa"
(cd scripts && timeout 200 python3 kernel_ab.py ../.whl/basetree/gpu --rounds 3 --backward --only "$CASES" \
    > $OUT/ab.md 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"; cat $OUT/ab.md
timeout 300 python3 -m pytest -q -x tests/gpu/test_backward.py > $OUT/pytest.log 2>&1
echo "backward tests rc $? $(date +%T)"; tail -n 2 $OUT/pytest.log
for tool in memcheck racecheck synccheck; do
  timeout 80 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "intervals" \
      > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T); $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool.log | tail -1)"
done
