# (r)'s lead, prepared on the host and never run: with TWO_BODIES (fwd_sm90.cu) the branch between the key loop's two
# bodies needs the entry's kind at the top of the step, so the consumers' global read of kind[e] (and col_idx[e]) is
# waited for there, where one body only needed it after the step's waits and S's product. entry_ahead.diff reads each
# entry one step ahead, and lets D <= 64's 128-row tile take two bodies too (it read 1.015x with them, (r)). nvcc: no
# spills at D = 64 (both tiles), 128 (bits), 192 (bits), 256 (intervals). On the host first:
#   rm -rf .whl/base .whl/ahead .whl/ahead128 && for f in base ahead ahead128; do mkdir -p .whl/$f && \
#     git archive HEAD gpu | tar -x -C .whl/$f; done && for f in ahead ahead128; do (cd .whl/$f && \
#     patch -p1 < ../../docs/bench/next/entry_ahead.diff); done
#   sed -i 's/!PERM;/!PERM \&\& !(D <= 64 \&\& TILE_M == 128);/' .whl/ahead128/gpu/fwd_sm90.cu
# (.whl/ahead128: the entries read ahead, D <= 64's 128-row tile still on one body, to tell the two effects apart)
# then one call on nvidia-h200 (carry [".whl"]): `bash docs/bench/next/entry_ahead.sh`. If it gains, apply the diff,
# and run test_forward.py and the sanitizers on it.
set -uo pipefail
source scripts/gpu_install.sh > /dev/null 2>&1 || exit 1
cases="fwd causal 8k D=64,fwd causal 16k D=128,fwd swa,fwd doc_causal 16k D=128,fwd causal 8k D=256"
cases+=",fwdonly causal 8k D=64,fwdonly doc_causal"
timeout 300 python3 scripts/kernel_ab.py .whl/base/gpu .whl/ahead/gpu .whl/ahead128/gpu --control --rounds 3 \
    --only "$cases" \
    > $OUT/ab.txt 2> $OUT/ab_err.txt
echo "ab rc $? $(date +%T)"; grep -E "^\| " $OUT/ab.txt || tail -5 $OUT/ab_err.txt
