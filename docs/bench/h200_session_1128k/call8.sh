# (k) call 8 (nvidia-h200-x4): as call 7, the returned partials added by slices over runs of consecutive keys (index_add_
# took 6 ms of its atomics on causal rank 0, call 6 again): the 4-rank tests and bench at 128K
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
MASKATTN_TEST_RANKS=4 timeout 150 python3 -m pytest -q tests/gpu/test_distributed_gpu.py > $OUT/tests4.log 2>&1
echo "4-rank tests rc $? $(date +%T)"; tail -1 $OUT/tests4.log
timeout 100 torchrun --nproc-per-node 4 -m maskattn -- bench --distributed --n 131072 \
    --workloads causal shared_question --out $OUT/cp4 > $OUT/cp4.log 2>&1
echo "4-rank bench rc $? $(date +%T)"; rm -f $OUT/cp4/*.png; grep "ranks=" $OUT/cp4.log | cut -c1-330
