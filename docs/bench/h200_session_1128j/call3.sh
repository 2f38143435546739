# (j) call 3 (nvidia-h200-x4), main after the packed-path change: 4-rank GPU tests, then issue 17's bench on 2 of the
# GPUs, then issue 19's on 4
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi topo -m > $OUT/topo4.txt 2>&1; head -5 $OUT/topo4.txt | cut -c1-60
MASKATTN_TEST_RANKS=4 timeout 170 python3 -m pytest -q tests/gpu/test_distributed_gpu.py > $OUT/tests4.log 2>&1
echo "4-rank tests rc $? $(date +%T)"; tail -3 $OUT/tests4.log
CUDA_VISIBLE_DEVICES=0,1 timeout 110 torchrun --nproc-per-node 2 -m maskattn -- bench --distributed --out $OUT/cp2 \
    > $OUT/cp2.log 2>&1
echo "2-rank bench rc $? $(date +%T)"; grep "ranks=" $OUT/cp2.log | cut -c1-330
timeout 240 torchrun --nproc-per-node 4 -m maskattn -- bench --distributed --n 131072 524288 \
    --workloads causal doc_causal shared_question --out $OUT/cp4 > $OUT/cp4.log 2>&1
echo "4-rank bench rc $? $(date +%T)"; grep "ranks=" $OUT/cp4.log | cut -c1-400
