# (j) call 4 (nvidia-h200-x2): where sink_swa's 2-rank step goes beyond its compute (issue 17's last miss)
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 200 torchrun --nproc-per-node 2 scripts/cp_profile.py --workloads sink_swa --trace > $OUT/cp_profile4.log 2>&1
echo "rc $? $(date +%T)"
grep -v "^W1128\|\*\*\*\*\|^\[" $OUT/cp_profile4.log | cut -c1-200 | tail -60
