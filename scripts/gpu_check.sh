#!/usr/bin/env bash
# Build, test and time the CUDA backend on a GPU machine, in one go (one call of the device tool):
#   installs carried wheels (.whl/, e.g. meson-python where no index is reachable), builds and installs maskattn,
#   runs tests/gpu and compute-sanitizer (memcheck, racecheck, synccheck on scripts/sanitize.py), then scripts/gpu_timing.py and the decode bench
#   (python -m maskattn bench --decode) print short tables last (MASKATTN_VARIANTS=1: also other forward tile
#   configurations; MASKATTN_SANITIZE=0, MASKATTN_TIMING=0, MASKATTN_DECODE=0 skip those parts).
# Logs go to $OUT (default /tmp/maskattn-gpu): build.log, pytest.log, timing.log, decode/.
# Usage: bash scripts/gpu_check.sh [pytest args...]
#        MASKATTN_NCU=1 bash scripts/gpu_check.sh   # instead of tests and timing: Nsight Compute on one forward
#                                                   # launch (bf16, D=128, n=8192, full mask) -> $OUT/ncu.txt
set -uo pipefail
cd "$(dirname "$0")/.."
echo "== build"
source scripts/gpu_install.sh || exit 1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import cupy, numpy, Cython; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'Cython', Cython.__version__)"
  echo "meson $(meson --version) ninja $(ninja --version)"; } 2>&1 | tee "$OUT/device.txt"

if [ "${MASKATTN_NCU:-0}" = 1 ]; then
  cat >/tmp/maskattn_ncu.py <<'EOF'
import cupy as cp
import ml_dtypes
import numpy as np

from maskattn import compile_mask, masks
from maskattn.backends import cuda

dtype = np.dtype(ml_dtypes.bfloat16)
plan = compile_mask(masks.full(8192), tile=cuda.tile_for(128, dtype))
rng = np.random.default_rng(0)
q, k, v = (cp.asarray(rng.standard_normal((2, 16, 8192, 128), dtype=np.float32).astype(dtype)) for _ in range(3))
for _ in range(3):
    cuda.forward(q, k, v, plan, 128 ** -0.5)
cp.cuda.Device().synchronize()
EOF
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
  "$NCU" --clock-control none -k regex:fwd_kernel -s 2 -c 1 --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section InstructionStats python3 /tmp/maskattn_ncu.py >"$OUT/ncu.txt" 2>&1
  grep -E "Duration|Throughput|Occupancy|Stall|Warp Cycles|Issued|Eligible|Registers|Shared Memory|Pipe|Bank" \
    "$OUT/ncu.txt" | head -60
  exit 0
fi

echo "== tests/gpu"
start=$(date +%s)
python3 -m pytest tests/gpu -q -rs --tb=line -p no:cacheprovider --durations=5 "$@" 2>&1 | tee "$OUT/pytest.log"
echo "tests took $(( $(date +%s) - start )) s"

if [ "${MASKATTN_SANITIZE:-1}" = 1 ]; then
  echo "== compute-sanitizer (memcheck, racecheck, synccheck): every kernel family, small"
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
  for tool in memcheck racecheck synccheck; do
    "$SAN" --tool $tool --error-exitcode 7 python3 scripts/sanitize.py >"$OUT/sanitize-$tool.log" 2>&1
    echo "$tool exit $? ($(grep -c 'ran' "$OUT/sanitize-$tool.log") runs): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize-$tool.log" | tail -1)"
  done
fi

if [ "${MASKATTN_TIMING:-1}" = 1 ]; then
  echo "== timing"
  python3 scripts/gpu_timing.py ${MASKATTN_VARIANTS:+--variants} 2>&1 | tee "$OUT/timing.log"
fi

if [ "${MASKATTN_DECODE:-1}" = 1 ]; then
  echo "== decode bench"
  python3 -m maskattn bench --decode --out "$OUT/decode" 2>&1 | tee "$OUT/decode.log" | grep -v "^|"
  cat "$OUT/decode/decode.md" 2>/dev/null
fi
