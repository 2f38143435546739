# Call 9 (branch bwd-dq-writer, the last of the session's device time): the one-pass backward with FlashAttention-4's
# dQ writer warp (warp 1 of the producer warpgroup issues the bulk reductions; the consumers hand their staged
# chunks over on named barriers, DQ_FULL / DQ_EMPTY). Correctness first (the D = 128 families in bf16 and the head
# dims), then its time against main (.whl/basetree), in turns.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 90 python3 -m pytest -q -x tests/gpu/test_backward.py -k "test_family and bfloat16 or test_head_dim_dtype" \
    > $OUT/pytest.log 2>&1
echo "tests rc $? $(date +%T)"; tail -n 3 $OUT/pytest.log
(cd scripts && timeout 110 python3 kernel_ab.py ../.whl/basetree/gpu --rounds 2 --backward \
    --only "bwd full 16k D=128,bwd causal 16k D=128,bwd causal 8k D=64" > $OUT/ab.md 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"; cat $OUT/ab.md; tail -3 $OUT/ab.log | cut -c1-300
