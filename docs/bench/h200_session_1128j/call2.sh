# (j) call 2 (nvidia-h200-x2), on a checkout of branch bwd-runs-intervals rebased on main a6e2b74 (packed exchange)
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 200 torchrun --nproc-per-node 2 -m maskattn -- bench --distributed --out $OUT/cp2 > $OUT/cp2.log 2>&1
echo "bench rc $? $(date +%T)"
grep -v "^W1128\|\*\*\*\*" $OUT/cp2.log | grep "ranks=" | cut -c1-400
timeout 260 python3 -m pytest -q -x tests/gpu/test_backward.py > $OUT/bwd_tests.log 2>&1
echo "backward tests rc $? $(date +%T)"; tail -3 $OUT/bwd_tests.log
for tool in memcheck racecheck synccheck; do
  timeout 70 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "80-row runs" \
      > $OUT/sanitize_$tool.log 2>&1
  echo "$tool rc $? $(grep -c "ERROR SUMMARY: 0\|RACECHECK SUMMARY: 0" $OUT/sanitize_$tool.log) $(date +%T)"
done
