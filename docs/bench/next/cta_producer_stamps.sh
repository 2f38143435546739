# One device call (~1 min on a fresh machine): where the forward CTA's 0.75 us go between its plan reads' arrival and
# Q's copy (performance.md, 2026-11-28, "Where a forward CTA's time goes": the reads are in by 1.03 us from the CTA's
# start, Q's copy is issued at 1.78). The probe build stamps the producer's thread 0 also around the barriers' set-up,
# at __syncthreads and after setmaxnreg. On the host:
#   mkdir -p .whl/v/stamps_fine && cp -r gpu .whl/v/stamps_fine/ && \
#       patch .whl/v/stamps_fine/gpu/fwd_sm90.cu docs/bench/h100_session_1128b/variants/cta_stamps_producer2.diff
# then carry .whl (with the meson-python and pyproject-metadata wheels) and run:
#   bash docs/bench/next/cta_producer_stamps.sh
# If the barrier or setmaxnreg holds Q back, the producer's thread can set up the barriers and issue Q's and the
# first K and V copies before the CTA-wide barrier (its own init, fenced for the copy engine, is all they need); the
# consumers still wait at the barrier before their first mbarrier wait.
source scripts/gpu_install.sh || exit 1
cd scripts
MASKATTN_KERNEL_SOURCES=$PWD/../.whl/v/stamps_fine/gpu timeout 200 python3 \
    ../docs/bench/h100_session_1128b/probe_cta_phases.py fine --producer barriers --workloads swa causal 2>&1 \
    | tee $OUT/phases_fine.txt
