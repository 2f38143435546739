# Call C: carry .peers/b and .whl (FA4 installed again from /tmp/fa4). The bench with --graph at D = 128, 16k: the
# first GPU run of common.graphs_ms (every side's CUDA graph captured, replays in turns).
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
timeout 400 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 128 --backward --graph \
    --peers flex flex_flash fa4 --workloads full causal swa doc_causal --out $OUT/d128_graph > $OUT/d128_graph.log 2>&1
echo "bench D=128 --graph rc $? $(date +%T)"
rm -f $OUT/*/bench.png
grep -A8 "against every peer" $OUT/d128_graph/bench.md; tail -5 $OUT/d128_graph.log
