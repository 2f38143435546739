# (k) call 6 (nvidia-h200-x4): causal on 4 ranks trails the zigzag ring (0.95x at 128K, call 5): each rank's step on
# the GPU's timeline
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 240 torchrun --nproc-per-node 4 scripts/cp_profile.py --workloads causal --trace > $OUT/cp_profile6.log 2>&1
echo "rc $? $(date +%T)"
grep -A30 "^host step" $OUT/cp_profile6.log | cut -c1-120 | grep -v "^--\|^$"; grep "^| [0-3] " $OUT/cp_profile6.log
