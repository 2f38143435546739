# (n) call 7 (nvidia-h200; carry the two wheels), a timing probe on a tree that is not main: wgmma m64n144k16 and
# m64n160k16 added, VALID_TILE admitting 192 x 144 and 192 x 160 at D = 64 (nvcc: 96 and 224 bytes of spills) and
# 192 x 128 at D = 96 (144 bytes). Timing only, in turns; no tests.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 100 python3 scripts/tiles_ab.py --head-dim 64 --heads 32 --tiles 192x128 192x144 192x160 --n 8192 \
    --workloads full causal > $OUT/tiles_ab64.log 2>&1
echo "D=64 rc $? $(date +%T)"; tail -4 $OUT/tiles_ab64.log
timeout 80 python3 scripts/tiles_ab.py --head-dim 96 --tiles 192x112 192x128 --n 16384 \
    --workloads full causal > $OUT/tiles_ab96.log 2>&1
echo "D=96 rc $? $(date +%T)"; tail -4 $OUT/tiles_ab96.log
