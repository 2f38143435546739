# Call 6: the tree (main + stmatrix for dS^T and the O / dK / dV epilogues, wgmma.cuh) against main (.whl/basetree =
# git archive of main 129cfdc's gpu/), and .whl/v/S = the tree + the backward producer's stage waits sleeping
# (try_wait's suspend-time hint), in turns in one process; then the backward GPU tests on the tree.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
CASES="bwd full 16k D=128,bwd causal 16k D=128,bwd causal 8k D=64,bwd full 8k D=64,bwd swa,bwd doc_causal 16k D=128"
CASES="$CASES,bwd bigbird,bwd graph_rcm 16k,bwd deterministic full,fwd full 16k D=128,fwd swa,fwd causal 8k D=64"
(cd scripts && timeout 250 python3 kernel_ab.py ../.whl/basetree/gpu ../.whl/v/S/gpu --rounds 3 --backward \
    --only "$CASES" > $OUT/ab.md 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"; cat $OUT/ab.md; tail -2 $OUT/ab.log
timeout 300 python3 -m pytest -q -x tests/gpu/test_backward.py > $OUT/pytest_bwd.log 2>&1
echo "backward tests rc $? $(date +%T)"; tail -n 2 $OUT/pytest_bwd.log
