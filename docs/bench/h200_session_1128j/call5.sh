# (j) call 5 (nvidia-h200-x2): main after the packed keys by copies into slices: the 2-rank tests and issue 17's bench
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 150 python3 -m pytest -q tests/gpu/test_distributed_gpu.py > $OUT/tests2.log 2>&1
echo "2-rank tests rc $? $(date +%T)"; tail -2 $OUT/tests2.log
timeout 150 torchrun --nproc-per-node 2 -m maskattn -- bench --distributed --out $OUT/cp2 > $OUT/cp2.log 2>&1
echo "2-rank bench rc $? $(date +%T)"; grep "ranks=" $OUT/cp2.log | cut -c1-330
