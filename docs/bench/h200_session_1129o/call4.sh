# (o) call 4 (nvidia-h200; carry .whl, with .whl/probe: main 345cf2f's package with call4_d128_keys160_176.diff, i.e.
# wgmma m64n160k16 / m64n176k16 and VALID_TILE admitting 128 x 160 and 128 x 176 at D = 128, FlashAttention-3's
# non-causal D = 128 tile being 128 x 176; nvcc: no spills at 232 registers). Timing only, in turns; no tests.
set -uo pipefail
cd .whl/probe && source scripts/gpu_install.sh || exit 1
timeout 300 python3 scripts/tiles_ab.py --head-dim 128 --tiles 128x128 128x160 128x176 --n 16384 \
    --workloads full causal doc_causal swa > $OUT/tiles_ab128.log 2>&1
echo "D=128 rc $? $(date +%T)"; tail -6 $OUT/tiles_ab128.log
