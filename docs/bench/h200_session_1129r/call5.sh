# One body of the key loop for whole tiles and one for partial ones (fwd_sm90.cu's TWO_BODIES, bwd_sm90.cu's
# run_step): in turns against HEAD's kernels (.whl/base/gpu: `git archive HEAD gpu | tar -x -C .whl/base`), then the
# forward's and the backward's GPU tests on the tree.
set -uo pipefail
source scripts/gpu_install.sh > /dev/null 2>&1 || exit 1
timeout 100 python3 scripts/kernel_ab.py .whl/base/gpu --control --rounds 2 --backward --only "bwd causal 16k D=128,bwd causal 8k D=64,bwd swa,bwd doc_causal 16k D=128,bwd shared_question,bwd bigbird,fwd causal 8k D=64,fwd causal 8k D=192" > $OUT/ab.txt 2> $OUT/ab_err.txt
echo "ab rc $? $(date +%T)"
timeout 200 python3 -m pytest -q -rf --tb=short tests/gpu/test_forward.py > $OUT/tests_fwd.txt 2>&1
echo "forward tests rc $? $(date +%T)"; grep -E "^FAILED|^E  " $OUT/tests_fwd.txt | cut -c1-300 | head -10; tail -1 $OUT/tests_fwd.txt
timeout 270 python3 -m pytest -q -rf --tb=short tests/gpu/test_backward.py > $OUT/tests_bwd.txt 2>&1
echo "backward tests rc $? $(date +%T)"; grep -E "^FAILED|^E  " $OUT/tests_bwd.txt | cut -c1-300 | head -10; tail -1 $OUT/tests_bwd.txt
grep -E "^\| " $OUT/ab.txt || tail -5 $OUT/ab_err.txt
