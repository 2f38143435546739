# Call 5: A/B of three kernel-source variants against main (.whl/basetree = git archive of main 129cfdc's gpu/),
# samples in turns in one process:
# - .whl/v/A: the backward's masks after the exponentials (bwd_sm90.cu, bwd_common.cuh), so that ptxas keeps dP^T's
#   wait below them;
# - .whl/v/C: the forward's K release after the softmax (fwd_sm90.cu), so that the wait for P V stays below the
#   exponentials on masked tiles;
# - the tree: both, and stmatrix for dS^T and the O / dK / dV epilogues (wgmma.cuh).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
CASES="fwd swa,fwd doc_causal 16k D=128,fwd causal 16k D=128,fwd full 16k D=128,fwd shared_question,fwd full 8k D=256"
CASES="$CASES,bwd full 16k D=128,bwd causal 16k D=128,bwd causal 8k D=64,bwd swa,bwd bigbird,bwd graph_rcm 16k"
(cd scripts && timeout 560 python3 kernel_ab.py ../.whl/basetree/gpu ../.whl/v/A/gpu ../.whl/v/C/gpu --rounds 3 \
    --backward --only "$CASES" > $OUT/ab.md 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"; cat $OUT/ab.md; tail -3 $OUT/ab.log
