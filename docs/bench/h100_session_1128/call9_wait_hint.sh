# mbarrier_wait with try_wait's suspend-time hint (the tree: main with variants/wait_hint.diff applied) against main
# without it (.whl/basetree = 7c57f48):
# kernel_ab in turns, then the forward and backward GPU tests as far as the time allows.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
(cd scripts && timeout 180 python3 kernel_ab.py ../.whl/basetree/gpu --rounds 2 --backward --only "fwd full 16k D=128,fwd causal 16k D=128,fwd swa,fwd doc_causal,fwd full 8k D=64,fwd shared_question,bwd full 16k D=128,bwd swa,bwd causal 16k D=128" > $OUT/ab.md 2> $OUT/ab.log)
echo "ab rc $?"; cat $OUT/ab.md; tail -2 $OUT/ab.log | cut -c1-300
timeout 120 python3 -m pytest -q -x tests/gpu/test_forward.py tests/gpu/test_backward.py > $OUT/pytest.log 2>&1
echo "tests rc $?"; tail -n 3 $OUT/pytest.log
