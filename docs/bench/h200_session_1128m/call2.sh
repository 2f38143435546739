# (m) call 2 (nvidia-h200): forward key tiles per head dim, an experiment (host hook MASKATTN_EXP_TILE_N in
# kernels.py, uncommitted; variants .whl/tn_a: D = 192 at 128 x 96; .whl/tn_b: D = 192 at 128 x 112 and D = 96 at
# 128 x 160; base = main's gpu/ at 128 x 64 and 128 x 128). First each variant's forward tests at its head dims
# (bits at 112 keys are expected to fail: mask_bits takes rows of whole words), then the A/B.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
MASKATTN_KERNEL_SOURCES=$PWD/.whl/tn_a MASKATTN_EXP_TILE_N=192:96 timeout 100 python3 -m pytest -q -x \
    tests/gpu/test_forward.py -k "other_head_dims and 192" > $OUT/tests_tn_a.log 2>&1
echo "tn_a tests rc $? $(date +%T)"; tail -2 $OUT/tests_tn_a.log
MASKATTN_KERNEL_SOURCES=$PWD/.whl/tn_b MASKATTN_EXP_TILE_N=192:112,96:160 timeout 100 python3 -m pytest -q \
    tests/gpu/test_forward.py -k "other_head_dims and (192 or 96)" > $OUT/tests_tn_b.log 2>&1
echo "tn_b tests rc $? $(date +%T)"; grep -E "^FAILED|passed|failed" $OUT/tests_tn_b.log | cut -c1-150 | tail -12
(cd scripts && timeout 420 python3 kernel_ab.py ../.whl/base/gpu ../.whl/tn_a ../.whl/tn_b --rounds 3 \
    --env ../.whl/tn_a MASKATTN_EXP_TILE_N=192:96 --env ../.whl/tn_b MASKATTN_EXP_TILE_N=192:112,96:160 \
    --only "fwd full 8k D=192,fwd causal 8k D=192,fwd full 16k D=96,fwd causal 16k D=96") > $OUT/ab_tiles.log 2>&1
echo "A/B rc $? $(date +%T)"; tail -6 $OUT/ab_tiles.log
