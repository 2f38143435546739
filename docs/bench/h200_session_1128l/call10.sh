# (l) call 10 (nvidia-h200): call 9's probe again without the 8-tile variants (64 KB of static shared memory: ptxas
# refused them, and the probe stopped there)
set -uo pipefail
source scripts/gpu_install.sh || exit 1
(cd scripts && timeout 90 python3 probe_dense_plan.py --base ../.whl/base_dense_plan.cu 2>&1 | tail -14 | tee $OUT/probe.log)
