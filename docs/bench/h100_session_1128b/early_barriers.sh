# One device call: the forward's barriers set up before the plan's reads (tree) against main (.whl/basetree), by the
# per-CTA phases of both (probe builds .whl/v/stamps_main/gpu and .whl/v/stamps_early/gpu: variants/cta_stamps.diff
# on each), then kernel_ab.py in turns, then the forward's GPU tests and compute-sanitizer on the tree.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
cd scripts
for side in main early; do
  echo "== stamps $side"
  MASKATTN_KERNEL_SOURCES=$PWD/../.whl/v/stamps_$side/gpu timeout 100 python3 ../docs/bench/h100_session_1128b/probe_cta_phases.py $side 2>&1 | grep -v "RankWarning\|polyfit" | tee -a $OUT/phases_$side.txt
done
timeout 200 python3 kernel_ab.py ../.whl/basetree/gpu --rounds 3 --only "fwd swa,fwd doc_causal,fwd shared_question,fwd causal 16k D=128,fwd full 16k D=128,fwd full 8k" > $OUT/ab.md 2> $OUT/ab.log
echo "ab rc $?"; cat $OUT/ab.md
cd ..
timeout 200 python3 -m pytest -q -x tests/gpu/test_forward.py > $OUT/pytest.log 2>&1
echo "forward tests rc $?"; tail -n 2 $OUT/pytest.log
for tool in racecheck synccheck; do
  timeout 40 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "intervals" > $OUT/$tool.log 2>&1
  echo "$tool rc $?; $(grep 'SUMMARY' $OUT/$tool.log)"
done
