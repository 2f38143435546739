# (l) call 5 (nvidia-h200, warm after call 4, FA4 installed there): the same at D = 64, 8k, H = 32
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
timeout 480 python3 -m maskattn bench --n 8192 --heads 32 --head-dim 64 --backward --peers flex flex_flash fa4 \
    --workloads full causal swa doc_causal shared_question bigbird graph_rcm lf_dilated --out $OUT/d64 \
    > $OUT/d64.log 2>&1
echo "bench rc $? $(date +%T)"
rm -f $OUT/*/bench.png
grep -A12 "against every peer" $OUT/d64/bench.md; tail -3 $OUT/d64.log
