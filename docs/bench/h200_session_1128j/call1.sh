# (j) call 1 (nvidia-h200-x2), on a checkout of branch bwd-runs-intervals; .whl/basetree = main's package
# (git archive main meson.build pyproject.toml setup.cfg python maskprep gpu README.md | tar -x -C .whl/basetree)
set -uo pipefail
source scripts/gpu_install.sh || exit 1
python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/base_site .whl/basetree \
    > $OUT/base_build.log 2>&1 || { tail -20 $OUT/base_build.log; exit 1; }
echo "installed $(date +%T)"
nvidia-smi topo -m > $OUT/topo.txt 2>&1; head -5 $OUT/topo.txt
# context parallelism on main's package: where the step's time goes per rank
PYTHONPATH=/tmp/base_site:$PYTHONPATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    timeout 220 torchrun --nproc-per-node 2 scripts/cp_profile.py > $OUT/cp_profile.log 2>&1
echo "cp_profile rc $? $(date +%T)"
grep -v "^\[\|Warning\|warn" $OUT/cp_profile.log | tail -30
# the branch: 80-row steps on interval plans
timeout 150 python3 -m pytest -q -x tests/gpu/test_backward.py -k "runs_of_query_blocks or atomic_dq or runs_of_full_blocks" \
    > $OUT/tests.log 2>&1
echo "tests rc $? $(date +%T)"; tail -3 $OUT/tests.log
(cd scripts && timeout 200 python3 kernel_ab.py ../.whl/basetree/gpu --site ../.whl/basetree/gpu /tmp/base_site --backward \
    --rounds 2 --only "bwd causal 16k D=128,bwd swa,bwd doc_causal 16k D=128,bwd shared_question,bwd full 16k D=128") \
    > $OUT/ab.log 2>&1
echo "ab rc $? $(date +%T)"; tail -14 $OUT/ab.log
