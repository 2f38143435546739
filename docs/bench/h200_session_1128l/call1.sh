# (l) call 1 (nvidia-h200-x2; tree = branch cp-sliced-returns, whose gpu/ equals main's): first the A/B in turns of
# the dense backward against 827aee6 ((k) read full fwd+bwd 1.105x FA4 against (i)'s 1.06x), then the branch's 2-rank
# GPU tests (the sent rows and returned partials by runs)
set -uo pipefail
source scripts/gpu_install.sh || exit 1
pip install --no-build-isolation --no-deps --no-index -q --target /tmp/base_site .whl/basetree || exit 1
echo "installed $(date +%T)"
(cd scripts && CUDA_VISIBLE_DEVICES=0 timeout 330 python3 kernel_ab.py ../.whl/basetree/gpu --site ../.whl/basetree/gpu \
    /tmp/base_site --backward --rounds 3 --only "bwd full 16k D=128,bwd causal 16k D=128") > $OUT/ab_bwd.log 2>&1
echo "A/B rc $? $(date +%T)"; tail -8 $OUT/ab_bwd.log
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 150 python3 -m pytest -q tests/gpu/test_distributed_gpu.py > $OUT/tests2.log 2>&1
echo "2-rank tests rc $? $(date +%T)"; tail -2 $OUT/tests2.log
