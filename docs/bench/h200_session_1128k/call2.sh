# (k) call 2 (nvidia-h200-x2): the packed path's copies through 8-byte words (issue 17): the 2-rank tests, sink_swa's
# timeline again, and the 2-rank bench
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 150 python3 -m pytest -q tests/gpu/test_distributed_gpu.py > $OUT/tests2.log 2>&1
echo "2-rank tests rc $? $(date +%T)"; tail -2 $OUT/tests2.log
timeout 120 torchrun --nproc-per-node 2 scripts/cp_profile.py --workloads sink_swa --trace > $OUT/cp_profile2.log 2>&1
echo "profile rc $? $(date +%T)"
grep -A16 "^host step" $OUT/cp_profile2.log | cut -c1-130; grep "^| [01] " $OUT/cp_profile2.log | cut -d"|" -f2,7,11,16,17
timeout 200 torchrun --nproc-per-node 2 -m maskattn -- bench --distributed --out $OUT/cp2 > $OUT/cp2.log 2>&1
echo "2-rank bench rc $? $(date +%T)"; rm -f $OUT/cp2/*.png; grep "ranks=" $OUT/cp2.log | cut -c1-330
