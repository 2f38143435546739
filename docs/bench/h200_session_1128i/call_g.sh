# Call G (after call F copied FA4's first part): carry .peers/b and .whl. With the 80-row steps (c778c87): our
# backward against FA4's in turns (and FA4's at its causal tile), then the bench in turns at D=128 16k, full and
# causal, against FA4.
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
(cd scripts && timeout 150 python3 ncu_forward.py turns_bwd 128 16384 16 full) 2>&1 | grep "in turns" | tee $OUT/bwd_turns.log
timeout 200 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 128 --backward --peers fa4 \
    --workloads full causal --out $OUT/d128 > $OUT/d128.log 2>&1
echo "bench rc $?"
rm -f $OUT/*/bench.png
grep -A6 "against every peer" $OUT/d128/bench.md
