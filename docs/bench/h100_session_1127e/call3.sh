# call 3: Nsight Compute on graph_rcm's forward, gathered through perm against the same mask in plan order
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
for which in perm ordered; do
  timeout 200 ncu --clock-control none --profile-from-start off --set full -k regex:fwd_sm90 \
    python3 docs/bench/h100_session_1127e/ncu_perm.py $which > $OUT/ncu_fwd_$which.txt 2>&1
  echo "$which rc $?"
  grep -E "^\s+(Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit Rate|L2 Hit Rate|Compute \(SM\) Throughput|Mem Busy|Max Bandwidth|L2 Compression|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Dynamic Shared)" $OUT/ncu_fwd_$which.txt
done
