# (k) call 1 (nvidia-h200-x2): sink_swa's 2-rank step on the GPU's timeline (issue 17's last miss): which rank waits
# for what, between the compute's kernels
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 240 torchrun --nproc-per-node 2 scripts/cp_profile.py --workloads sink_swa --trace > $OUT/cp_profile1.log 2>&1
echo "rc $? $(date +%T)"
grep -v "^W1128\|\*\*\*\*\|^\[\|USDT" $OUT/cp_profile1.log | cut -c1-180 | grep -v "^---" | tail -120
