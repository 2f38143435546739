# Call 9, right after call 8 (`mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/`, .peers/a carried) on the same warm
# machine, carrying .peers/b and .whl: FlashAttention-4 installed, then maskattn main (0f381e1: the forward's V wait
# after S) against Flex Triton, Flex FLASH and FA4 in one process, as session (e)'s call 5.
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
timeout 260 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 128 --backward --peers flex flex_flash fa4 \
    --workloads full causal swa doc_causal shared_question --out $OUT/d128 > $OUT/d128.log 2>&1
echo "d128 rc $? $(date +%T)"
timeout 110 python3 -m maskattn bench --n 8192 --heads 32 --head-dim 64 --backward --peers flex flex_flash fa4 \
    --workloads full causal swa --out $OUT/d64 > $OUT/d64.log 2>&1
echo "d64 rc $? $(date +%T)"
for f in d128 d64; do grep -A12 "^Forward, against every peer" $OUT/$f/bench.md; \
    grep -A12 "^Forward+backward, against every peer" $OUT/$f/bench.md; done
