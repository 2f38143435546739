# (k) call 7 (nvidia-h200-x4): returned partials of keys sent to several ranks summed token by token in float32 (rank
# 0 of causal spent 12 ms a step on them, call 6): the 4-rank tests and bench at 128K
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
MASKATTN_TEST_RANKS=4 timeout 150 python3 -m pytest -q tests/gpu/test_distributed_gpu.py > $OUT/tests4.log 2>&1
echo "4-rank tests rc $? $(date +%T)"; tail -1 $OUT/tests4.log
timeout 200 torchrun --nproc-per-node 4 -m maskattn -- bench --distributed --n 131072 \
    --workloads causal doc_causal shared_question --out $OUT/cp4 > $OUT/cp4.log 2>&1
echo "4-rank bench rc $? $(date +%T)"; rm -f $OUT/cp4/*.png; grep "ranks=" $OUT/cp4.log | cut -c1-330
