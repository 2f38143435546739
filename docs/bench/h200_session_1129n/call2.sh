# (n) call 2 (nvidia-h200, warm after call 1; carry .peers/b and the two wheels): FA4's second half, then the
# forward bench against every peer at D = 192 (forward-only 128 x 112 since (m)) and D = 96 (128 x 160 from call 1's
# patch). The backward is unchanged at both: --backward left off to fit the call.
set -uo pipefail
source .peers/b/install.sh > /dev/null 2>&1 || { echo "fa4 install failed"; exit 1; }
source scripts/gpu_install.sh || exit 1
timeout 200 python3 -m maskattn bench --n 8192 --heads 16 --head-dim 192 --peers flex flex_flash fa4 \
    --workloads full causal doc_causal swa shared_question bigbird --out $OUT/d192 > $OUT/d192.log 2>&1
echo "D=192 bench rc $? $(date +%T)"
timeout 250 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 96 --peers flex flex_flash fa4 \
    --workloads full causal doc_causal swa shared_question bigbird graph_rcm --out $OUT/d96 > $OUT/d96.log 2>&1
echo "D=96 bench rc $? $(date +%T)"; rm -f $OUT/*/bench.png
for d in d192 d96; do grep -A10 "against every peer" $OUT/$d/bench.md | grep "^| [0-9]" | cut -d"|" -f2-4,7-12,13-14; done
