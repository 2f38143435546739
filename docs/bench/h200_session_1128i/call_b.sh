# Call B (after call A copied FA4's first part): carry .peers/b and .whl.
# 1. FA4's backward at its own non-causal D=128 tile (80 rows a step, dQ swapped) against the same at its causal tile
#    (64 rows), and ours, in turns: what do 80-row steps buy FA4?
# 2. The bench in turns at D = 64, 8k, H = 32 (in (h) only its first form ran there).
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
(cd scripts && timeout 170 python3 ncu_forward.py turns_bwd 128 16384 16 full) 2>&1 | grep -v Warning | tail -5 | tee $OUT/fa4_tiles.log
echo "tiles rc $? $(date +%T)"
timeout 250 python3 -m maskattn bench --n 8192 --heads 32 --head-dim 64 --backward --peers flex flex_flash fa4 \
    --workloads full causal swa doc_causal shared_question --out $OUT/d64 > $OUT/d64.log 2>&1
echo "bench D=64 rc $? $(date +%T)"
rm -f $OUT/*/bench.png
grep -A9 "against every peer" $OUT/d64/bench.md; tail -3 $OUT/d64.log
