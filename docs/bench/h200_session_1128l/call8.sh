# (l) call 8 (nvidia-h200): where the 0.125 ms of a dense 16k mask's GPU plan go (call 7: the SDPA wrapper's forward
# is that much over a precompiled plan's on every workload): scripts/probe_dense_plan.py
set -uo pipefail
source scripts/gpu_install.sh || exit 1
cd scripts && timeout 200 python3 probe_dense_plan.py 2>&1 | tail -12 | tee $OUT/probe_dense_plan.log
