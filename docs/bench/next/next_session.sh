# The next GPU session's second call (performance.md, 2026-11-28 (j)), right after the first has copied FA4's first part
# (`mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/`, .peers/a carried); this one carries .peers/b and .whl (the
# meson-python and pyproject-metadata wheels):
#   bash docs/bench/next/next_session.sh
# It times the workloads whose leads README still gives from the one-after-another timer (shared_question, bigbird,
# graph_rcm, lf_dilated) in turns at D = 128, 16k, with the backward (the backward's 80-row steps now run on interval
# plans too, (j)).
# Multi-GPU, where `status` lends the kinds (commands in docs/bench/h200_session_1128j/call3.sh and call6.sh):
# - nvidia-h200-x8: issue 19's 8-GPU rows (`torchrun --nproc-per-node 8 -m maskattn -- bench --distributed --n 131072
#   524288 --workloads causal doc_causal shared_question`, the 8-rank tests with MASKATTN_TEST_RANKS=8) have never run.
# - Issue 17's last miss, sink_swa on 2 ranks (1.63-1.65x one GPU, target 1.7x): rank 1 copies its own K/V into the
#   packed buffer and autograd copies its own dK/dV views (6.66 against 6.14 ms for rank 0). Either balance those
#   copies in the split (~25 units of 128 tokens; a 4-unit move changed nothing) or let the kernels read keys from two
#   tensors (own and fetched), which removes them for every mask.
# - Causal on 4 ranks trails the zigzag ring (0.90x at 128K, 0.98x at 512K): `scripts/cp_profile.py` on 4 ranks says
#   which rank is late.
# Leads ((i)): our backward at the 80-row steps is 1.063x FA4's on dense D = 128 (1.024x FA4's at 64 rows): the rest of
# the gap is (d)'s tensor-pipe occupancy (64% against 76%). Dropped, do not retry: the LSE loaded ahead at 80-row steps
# (NQ = 10) spills once interval plans take the steps ((j)); one-test interval masks ((h)); the fence before the P V
# wait at 192 rows or every D, no ping-pong turns at 192 rows, the backward's dO wait after S^T ((g)); two copies of the
# forward's key loop, the softmax's reductions in four chains ((f)); dS^T by stmatrix at 64 rows ((e)); masks after the
# exponentials, the forward's K release after the softmax, sleeping producer waits ((d)).
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
timeout 500 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 128 --backward --peers flex flex_flash \
    --workloads shared_question bigbird graph_rcm lf_dilated --out $OUT/d128_sparse > $OUT/d128_sparse.log 2>&1
echo "bench rc $? $(date +%T)"
rm -f $OUT/*/bench.png  # only 8 files come back
grep -A8 "against every peer" $OUT/d128_sparse/bench.md
