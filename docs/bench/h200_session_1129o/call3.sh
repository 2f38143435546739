# (o) call 3 (nvidia-h200, warm after call 2; carry .peers/b and the two wheels): FA4's second half, then the bench
# with the backward against every peer at D = 96 (80-row backward steps on plans without partial tiles since call 2).
set -uo pipefail
source .peers/b/install.sh > /dev/null 2>&1 || { echo "fa4 install failed"; exit 1; }
source scripts/gpu_install.sh || exit 1
timeout 480 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 96 --backward --peers flex flex_flash fa4 \
    --workloads full causal doc_causal swa shared_question bigbird graph_rcm --out $OUT/d96 > $OUT/d96.log 2>&1
echo "D=96 bench rc $? $(date +%T)"; rm -f $OUT/*/bench.png
grep -A12 "against every peer" $OUT/d96/bench.md | grep "^| 16384" | cut -d"|" -f3,4,8-13
