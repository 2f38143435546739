# (m) call 4 (nvidia-h200, warm after call 3; carry .peers/b and the two wheels): FA4's second half, then the bench
# at D = 192 against every peer in turns (the forward takes the 128 x 96 tile where it pays), then the training
# tile's forward against the forward-only one in one process (kernel_ab on a copy of the tree).
set -uo pipefail
source .peers/b/install.sh > /dev/null 2>&1 || exit 1
source scripts/gpu_install.sh || exit 1
timeout 300 python3 -m maskattn bench --n 8192 --heads 16 --head-dim 192 --backward --peers flex flex_flash fa4 \
    --workloads full causal doc_causal swa shared_question bigbird --out $OUT/d192 > $OUT/d192.log 2>&1
echo "D=192 bench rc $? $(date +%T)"; rm -f $OUT/*/bench.png
grep -A9 "against every peer" $OUT/d192/bench.md | grep "^| [0-9]" | cut -d"|" -f2-4,7-10,12-15
cp -r gpu /tmp/treecopy
(cd scripts && timeout 100 python3 kernel_ab.py /tmp/treecopy --rounds 3 \
    --only "fwd full 8k D=192,fwd causal 8k D=192,fwdonly full 8k D=192,fwdonly causal 8k D=192") > $OUT/ab.log 2>&1
echo "A/B rc $? $(date +%T)"; tail -5 $OUT/ab.log
