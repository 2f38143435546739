# Call 5: the tree (main + the wait for V after S is issued + the key loop in two copies, masked and unmasked, so
# that the unmasked one has no branch after its products) against main in turns, beside .whl/v/vlate (the V wait
# alone) and .whl/v/e3tree4 (the tree + the softmax's four max and sum chains); then the forward GPU tests on the tree.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
(cd scripts && timeout 200 python3 kernel_ab.py ../.whl/basetree/gpu ../.whl/v/vlate ../.whl/v/e3tree4 --rounds 3 \
  --only "fwd full 16k D=128,fwd causal 16k D=128,fwd full 8k D=64,fwd causal 8k D=64,fwd doc_causal 16k D=128,fwd swa 16k D=128,fwd full 8k D=256,fwd full 8k D=192,fwd full 16k D=96,fwd bigbird,fwd shared_question,fwd graph_rcm 16k") \
  > $OUT/ab.md 2>&1
echo "ab rc $? $(date +%T)"; grep '^|' $OUT/ab.md
timeout 330 python3 -m pytest -q -x tests/gpu/test_forward.py > $OUT/pytest_fwd.log 2>&1
echo "forward tests rc $? $(date +%T): $(tail -n 1 $OUT/pytest_fwd.log)"
