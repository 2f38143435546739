# (n) call 5 (nvidia-h200, warm after call 4; carry .peers/b and the two wheels): FA4's second half, then the
# forward bench against every peer at D = 96 (forward-only 192 x 112 since call 3) and D = 128.
set -uo pipefail
source .peers/b/install.sh > /dev/null 2>&1 || { echo "fa4 install failed"; exit 1; }
source scripts/gpu_install.sh || exit 1
timeout 250 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 96 --peers flex flex_flash fa4 \
    --workloads full causal doc_causal swa shared_question bigbird graph_rcm --out $OUT/d96 > $OUT/d96.log 2>&1
echo "D=96 bench rc $? $(date +%T)"
timeout 250 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 128 --peers flex flex_flash fa4 \
    --workloads full causal doc_causal swa shared_question bigbird graph_rcm --out $OUT/d128 > $OUT/d128.log 2>&1
echo "D=128 bench rc $? $(date +%T)"; rm -f $OUT/*/bench.png
for d in d96 d128; do grep -A10 "against every peer" $OUT/$d/bench.md | grep "^| [0-9]" | cut -d"|" -f2-4,7-12,13-14; done
