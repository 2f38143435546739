# (l) call 9 (nvidia-h200), carry .whl/base_dense_plan.cu (main's before the change): dense_plan_classify over four
# adjacent tiles a CTA: the dense-plan and SDPA GPU tests, the probe against the former kernel and variants, then
# the --sdpa bench at 16k again
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 170 python3 -m pytest -q tests/gpu/test_dense_plan.py tests/gpu/test_sdpa_gpu.py > $OUT/tests.log 2>&1
echo "tests rc $? $(date +%T)"; tail -2 $OUT/tests.log
(cd scripts && timeout 90 python3 probe_dense_plan.py --base ../.whl/base_dense_plan.cu 2>&1 | tail -14 | tee $OUT/probe.log)
timeout 170 python3 -m maskattn bench --sdpa --backward --n 16384 --heads 16 --head-dim 128 --out $OUT/sdpa \
    > $OUT/sdpa.log 2>&1
echo "sdpa bench rc $? $(date +%T)"
grep "^| 16384" $OUT/sdpa/sdpa.md | cut -d"|" -f3,5,6,12,17
