# (k) call 5 (nvidia-h200-x4), carry .whl's two wheels: the backward suite's tail that call 3's timeout cut; the
# 4-rank tests and bench at 128K with the packed path's copies through 8-byte words (issue 19's 4-GPU rows, causal
# against the ring)
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sort | uniq -c
timeout 120 python3 -m pytest -q tests/gpu/test_backward.py -k "single_query or nothing_visible or rejects_bad or \
packed_qkv or after_gpu_forward or fixed_point or deterministic" > $OUT/bwd_tail.log 2>&1
echo "backward tail rc $? $(date +%T)"; tail -1 $OUT/bwd_tail.log
MASKATTN_TEST_RANKS=4 timeout 150 python3 -m pytest -q tests/gpu/test_distributed_gpu.py > $OUT/tests4.log 2>&1
echo "4-rank tests rc $? $(date +%T)"; tail -1 $OUT/tests4.log
timeout 200 torchrun --nproc-per-node 4 -m maskattn -- bench --distributed --n 131072 \
    --workloads causal doc_causal shared_question sink_swa --out $OUT/cp4 > $OUT/cp4.log 2>&1
echo "4-rank bench rc $? $(date +%T)"; rm -f $OUT/cp4/*.png; grep "ranks=" $OUT/cp4.log | cut -c1-330
