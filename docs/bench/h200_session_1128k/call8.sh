# (k) call 8 (nvidia-h200-x4; refused in (k), device time ran out: for the next session, on branch cp-sliced-returns):
# the rows sent copied and the returned partials added by slices over runs of consecutive keys (on causal's rank 0 of
# 4 the gather of its sends took 2.5 ms before the all-to-all, and index_add_'s atomics 6 ms of its sums): the 4-rank
# tests and bench at 128K, then the profile of causal on 4 ranks
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
MASKATTN_TEST_RANKS=4 timeout 150 python3 -m pytest -q tests/gpu/test_distributed_gpu.py > $OUT/tests4.log 2>&1
echo "4-rank tests rc $? $(date +%T)"; tail -1 $OUT/tests4.log
timeout 100 torchrun --nproc-per-node 4 -m maskattn -- bench --distributed --n 131072 \
    --workloads causal shared_question --out $OUT/cp4 > $OUT/cp4.log 2>&1
echo "4-rank bench rc $? $(date +%T)"; rm -f $OUT/cp4/*.png; grep "ranks=" $OUT/cp4.log | cut -c1-330
timeout 120 torchrun --nproc-per-node 4 scripts/cp_profile.py --workloads causal --trace > $OUT/cp_profile8.log 2>&1
echo "profile rc $? $(date +%T)"; grep -A12 "^host step" $OUT/cp_profile8.log | cut -c1-110; grep "^| [0-3] " $OUT/cp_profile8.log
