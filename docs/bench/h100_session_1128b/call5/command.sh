# One device call (~2 min on a fresh machine): where the forward CTA's first 1.8 us go before its first K copy
# (performance.md, 2026-11-28, "Where a forward CTA's time goes"). The probe build stamps the producer's clock once
# each plan read (m_levels, m_order, row_ptr, the first col_idx) has arrived and when Q's copy is issued. On the host:
#   mkdir -p .whl/v/stamps_fine && cp -r gpu .whl/v/stamps_fine/ && \
#       patch .whl/v/stamps_fine/gpu/fwd_sm90.cu docs/bench/h100_session_1128b/variants/cta_stamps_producer.diff
# then carry .whl (with the meson-python and pyproject-metadata wheels) and run:
#   bash docs/bench/next/cta_producer_stamps.sh
# If the reads take most of it, a plan that gives each CTA its coordinates in one read (or none, for a uniform
# schedule) is the change to try; if Q's and K's copies do, their order and the tensor maps' first use are.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
cd scripts
MASKATTN_KERNEL_SOURCES=$PWD/../.whl/v/stamps_fine/gpu timeout 200 python3 \
    ../docs/bench/h100_session_1128b/probe_cta_phases.py fine --producer --workloads swa causal 2>&1 | tee $OUT/phases_fine.txt
