# Nsight Compute on our sliding-window forward (swa, 16k, D = 128, H = 16) and FlashAttention-4's causal window of
# the same tiles, one launch each after warm-ups; then both timed by do_bench. Device call 2 of the FA4 carry
# (.peers/b; call 1 copied .peers/a to /tmp/fa4), with .whl carried.
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/run.log
cd scripts
for w in ours fa4_window; do
  timeout 200 ncu --clock-control none --profile-from-start off --set full -o $OUT/$w python3 ncu_forward.py $w 128 16384 16 swa >> $OUT/run.log 2>&1
  echo "ncu $w rc $?" | tee -a $OUT/run.log
  ncu -i $OUT/$w.ncu-rep --page details --csv > $OUT/${w}_details.csv 2>> $OUT/run.log
  ncu -i $OUT/$w.ncu-rep --page source --csv --print-source sass > $OUT/${w}_sass.csv 2>> $OUT/run.log
done
timeout 120 python3 ncu_forward.py time 128 16384 16 swa 2>&1 | tee -a $OUT/run.log
for w in ours fa4_window; do
  echo "== $w"
  grep -E '"(Duration|Elapsed Cycles|Executed Ipc Active|Issue Slots Busy|Executed Instructions|Achieved Occupancy|L2 Hit Rate|Registers Per Thread|Dynamic Shared Memory Per Block|Grid Size|Block Size|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput)"' $OUT/${w}_details.csv | awk -F'","' '{print $(NF-2)" = "$NF" "$(NF-1)}' | head -30
done
