# (p) call 3 (nvidia-h200, warm after call 2; carry .peers/b and the two wheels): FA4's second half, then D = 256
# against every peer, forward and fwd+bwd (the forward-only tile is 128 x 80 since 9964bdf).
set -uo pipefail
source .peers/b/install.sh > /dev/null 2>&1 || { echo "fa4 install failed"; exit 1; }
source scripts/gpu_install.sh || exit 1
timeout 480 python3 -m maskattn bench --n 8192 --heads 16 --head-dim 256 --backward --peers flex flex_flash fa4 \
    --workloads full causal doc_causal swa shared_question bigbird --out $OUT/d256 > $OUT/d256.log 2>&1
echo "D=256 bench rc $? $(date +%T)"; rm -f $OUT/*/bench.png
grep -A12 "against every peer" $OUT/d256/bench.md | grep "^| 8192" | cut -d"|" -f3,4,8-13
