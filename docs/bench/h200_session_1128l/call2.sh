# (l) call 2 (nvidia-h200-x2, branch cp-sliced-returns): the 2-rank bench at 128K and causal's timeline
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 250 torchrun --nproc-per-node 2 -m maskattn -- bench --distributed --out $OUT/cp2 > $OUT/cp2.log 2>&1
echo "2-rank bench rc $? $(date +%T)"; rm -f $OUT/cp2/*.png; grep "ranks=" $OUT/cp2.log | cut -c1-330
timeout 120 torchrun --nproc-per-node 2 scripts/cp_profile.py --workloads causal --trace > $OUT/cp_profile2.log 2>&1
echo "profile rc $? $(date +%T)"
grep -A16 "^host step" $OUT/cp_profile2.log | cut -c1-130; grep "^| [01] " $OUT/cp_profile2.log | cut -d"|" -f2,7,11,16,17
