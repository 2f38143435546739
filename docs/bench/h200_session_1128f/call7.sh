# Call 7: the tree (main + the wait for V after S is issued) and three softmax variants on top of it (.whl/v/t1: the
# row max and sum in four chains each; t2: both row halves' max, then their shuffles, before the exponentials; t3:
# both) against main in turns; then the forward GPU tests and compute-sanitizer's racecheck and synccheck on the tree.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
(cd scripts && timeout 200 python3 kernel_ab.py ../.whl/basetree/gpu ../.whl/v/t1 ../.whl/v/t2 ../.whl/v/t3 --rounds 3 \
  --only "fwd full 16k D=128,fwd causal 16k D=128,fwd full 8k D=64,fwd causal 8k D=64,fwd doc_causal 16k D=128,fwd swa 16k D=128,fwd full 8k D=256,fwd full 8k D=192,fwd full 16k D=96,fwd shared_question") \
  > $OUT/ab.md 2>&1
echo "ab rc $? $(date +%T)"; grep '^|' $OUT/ab.md
timeout 200 python3 -m pytest -q -x tests/gpu/test_forward.py > $OUT/pytest_fwd.log 2>&1
echo "forward tests rc $? $(date +%T): $(tail -n 1 $OUT/pytest_fwd.log)"
for tool in racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "bits" > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T): $(grep -c 'Error\|Hazard' $OUT/$tool.log) error lines; $(tail -n 1 $OUT/$tool.log)"
done
