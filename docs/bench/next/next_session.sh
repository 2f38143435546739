# The next GPU session's second call (performance.md, 2026-11-28 (h)), right after the first has copied FA4's first part
# (`mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/`, .peers/a carried); this one carries .peers/b and .whl (the
# meson-python and pyproject-metadata wheels):
#   bash docs/bench/next/next_session.sh
# 1. The bench in turns (maskattn.bench.common.turns_ms, merged in (h)) at D = 64, 8k, H = 32: only its first form
#    (bursts without an L2 flush, which exposed Flex's launch path) ran there in (h).
# 2. The same rows at D = 128, 16k, with --graph (CUDA graphs: kernels only, no host time), so that the kernel-only
#    ratios stand beside (h)'s in-turns ones (forward 1.05-1.10x the best peer, fwd+bwd 1.08-1.14x). The graphs'
#    replays in turns (common.graphs_ms) were written after (h)'s last device call: this is their first GPU run.
# Leads ((h)): the causal D = 64 forward issues 11.6% more instructions than FA4's at the same tile (its key loop 19 a
# block more, the masks of partial tiles 257 against FA4's 111, a 264-instruction prologue per warp); the backward's
# 8-14% at D = 128. Dropped, do not retry: one-test interval masks ((h)); the fence before the P V wait at 192 rows or
# every D, no ping-pong turns at 192 rows, the backward's dO wait after S^T ((g)); two copies of the forward's key
# loop, the softmax's reductions in four chains ((f)); dS^T by stmatrix ((e)); masks after the exponentials, the
# forward's K release after the softmax, sleeping producer waits ((d)).
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
peers="--peers flex flex_flash fa4"
timeout 200 python3 -m maskattn bench --n 8192 --heads 32 --head-dim 64 --backward $peers \
    --workloads full causal swa doc_causal shared_question --out $OUT/d64 > $OUT/d64.log 2>&1
echo "bench D=64 rc $? $(date +%T)"
timeout 300 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 128 --backward --graph $peers \
    --workloads full causal swa doc_causal --out $OUT/d128_graph > $OUT/d128_graph.log 2>&1
echo "bench D=128 --graph rc $? $(date +%T)"
rm -f $OUT/*/bench.png  # only 8 files come back
for d in d64 d128_graph; do grep -A8 "against every peer" $OUT/$d/bench.md; done
