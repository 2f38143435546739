# (p) call 7 (nvidia-h200, warm after call 6; carry .peers/b and the two wheels): FA4's second half, then the forward
# against every peer at D = 96 and 128 on full and causal (the last wave's split on full since this stop's change).
set -uo pipefail
source .peers/b/install.sh > /dev/null 2>&1 || { echo "fa4 install failed"; exit 1; }
source scripts/gpu_install.sh || exit 1
for D in 96 128; do
  timeout 100 python3 -m maskattn bench --n 16384 --heads 16 --head-dim $D --peers flex_flash fa4 \
      --workloads full causal --out $OUT/d$D > $OUT/d$D.log 2>&1
  echo "D=$D bench rc $? $(date +%T)"; rm -f $OUT/*/bench.png
  grep -A6 "against every peer" $OUT/d$D/bench.md | grep "^| 16384" | cut -d"|" -f3,4,5,8-14
done
