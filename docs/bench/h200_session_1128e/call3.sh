# Call 3 (H200): the dQ writer handing over on mbarriers (branch bwd-dq-writer-mbar) against main, in turns; then the
# backward GPU tests and the three sanitizers on the one-pass cases. Carry .whl (.whl/basetree = main's gpu/).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
CASES="bwd full 16k D=128,bwd causal 16k D=128,bwd causal 8k D=64,bwd full 8k D=64,bwd causal 16k D=64"
CASES="$CASES,bwd doc_causal 16k D=64,bwd shared_question,bwd deterministic full"
(cd scripts && timeout 200 python3 kernel_ab.py ../.whl/basetree/gpu --rounds 3 --backward --only "$CASES" \
    > $OUT/ab.md 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"
timeout 230 python3 -m pytest -q -x tests/gpu/test_backward.py > $OUT/pytest.log 2>&1
echo "backward tests rc $? $(date +%T): $(tail -n 1 $OUT/pytest.log)"
for tool in racecheck memcheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "one pass" \
      > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T); $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool.log | tail -1)"
done
cat $OUT/ab.md
