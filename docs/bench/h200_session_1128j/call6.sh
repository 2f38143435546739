# (j) call 6 (nvidia-h200-x2): the 2-rank bench again on the two rows at the line (shared_question, sink_swa), and
# sink_swa's per-rank times with the split moved 4 units (512 tokens) towards rank 1
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 100 torchrun --nproc-per-node 2 -m maskattn -- bench --distributed --workloads shared_question sink_swa \
    > $OUT/cp2_again.log 2>&1
echo "bench rc $? $(date +%T)"; grep "ranks=" $OUT/cp2_again.log | cut -c1-200
for split in work 0,518,1024; do
  timeout 60 torchrun --nproc-per-node 2 scripts/cp_profile.py --workloads sink_swa --split $split \
      > $OUT/cp_profile_$split.log 2>&1
  echo "profile $split rc $?"; grep "^| [01] " $OUT/cp_profile_$split.log | cut -d"|" -f2,7,11,16,17
done
