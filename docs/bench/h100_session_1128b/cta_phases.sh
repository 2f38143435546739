# One device call: main's forward timed, then the probe build's per-CTA phases (probe_cta_phases.py). Carry .whl with
# the meson-python wheels, .whl/basetree (git archive of main) and .whl/v/stamps/gpu (main's gpu/ with
# variants/cta_stamps.diff applied).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
cd scripts
timeout 200 python3 kernel_ab.py ../.whl/basetree/gpu --rounds 1 --only "fwd swa 16k,fwd doc_causal 16k,fwd causal 16k D=128,fwd full 16k D=128" > $OUT/ab.md 2> $OUT/ab.log
echo "ab rc $?"; cat $OUT/ab.md
MASKATTN_KERNEL_SOURCES=$PWD/../.whl/v/stamps/gpu timeout 250 python3 ../docs/bench/h100_session_1128b/probe_cta_phases.py 2>&1 | tee $OUT/phases.txt
