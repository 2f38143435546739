# (l) call 6 (nvidia-h200, warm, FA4 installed by calls 3-4): issue 14's lines at D = 96, 192 (at least Flex's best
# backend) and 256 (0.9x FA4): dense and causal, forward and fwd+bwd, 16k H=16 (D = 96) and 8k H=16 (192, 256)
set -uo pipefail
source .peers/b/install.sh > /dev/null 2>&1 || exit 1
source scripts/gpu_install.sh || exit 1
for spec in "16384 96" "8192 192" "8192 256"; do
  set -- $spec
  timeout 170 python3 -m maskattn bench --n $1 --heads 16 --head-dim $2 --backward --peers flex flex_flash fa4 \
      --workloads full causal --out $OUT/d$2 > $OUT/d$2.log 2>&1
  echo "D=$2 bench rc $? $(date +%T)"
  rm -f $OUT/*/bench.png
  grep -A5 "against every peer" $OUT/d$2/bench.md | grep "^| [0-9]" | cut -d"|" -f2-4,7-10,12-15
done
