# Device call 2 of the FA4 carry (.peers/b; call 1 copied .peers/a to /tmp/fa4), with .whl carried. The backward
# against FlashAttention-4's: do_bench times of both (full and causal, 16k D=128 H=16 and 8k D=64 H=32), then Nsight
# Compute on each one's main backward kernel, causal 8k D=128 H=16 (one launch after warm-ups).
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
cd scripts
timeout 150 python3 ncu_forward.py time_bwd 128 16384 16 full causal 2>&1 | grep -v Warning | grep -v exe_args | tee $OUT/time.log
timeout 100 python3 ncu_forward.py time_bwd 64 8192 32 full causal 2>&1 | grep -v Warning | grep -v exe_args | tee -a $OUT/time.log
for w in ours_bwd fa4_bwd; do
  timeout 150 ncu --clock-control none --profile-from-start off --set full -k regex:'bwd_dkdv|BackwardSm90' \
    -o $OUT/$w python3 ncu_forward.py $w 128 8192 16 causal > $OUT/ncu_$w.log 2>&1
  echo "ncu $w rc $?"
  ncu -i $OUT/$w.ncu-rep --page details --csv > $OUT/${w}_details.csv 2>> $OUT/ncu_$w.log
  ncu -i $OUT/$w.ncu-rep --page source --csv --print-source sass > $OUT/${w}_sass.csv 2>> $OUT/ncu_$w.log
done
python3 ncu_sass_summary.py $OUT/ours_bwd_sass.csv $OUT/fa4_bwd_sass.csv > $OUT/sass_summary.txt 2>&1
for w in ours_bwd fa4_bwd; do
  echo "== $w"
  grep -E '"(Duration|Elapsed Cycles|Executed Ipc Active|Issue Slots Busy|Executed Instructions|L2 Hit Rate|Registers Per Thread|Dynamic Shared Memory Per Block|Grid Size|Block Size|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput)"' $OUT/${w}_details.csv | awk -F'","' '{print $(NF-2)" = "$NF" "$(NF-1)}' | head -30
done
head -c 5000 $OUT/sass_summary.txt
