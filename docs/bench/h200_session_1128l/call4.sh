# (l) call 4 (nvidia-h200, right after call 3), carry .peers/b and the two meson-python wheels: the bench in turns at
# D = 128, 16k with FA4 and both Flex backends, forward and fwd+bwd, on main with the backward's cubins back at 827aee6's
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
timeout 480 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 128 --backward --peers flex flex_flash fa4 \
    --workloads full causal swa doc_causal shared_question bigbird graph_rcm lf_dilated --out $OUT/d128 \
    > $OUT/d128.log 2>&1
echo "bench rc $? $(date +%T)"
rm -f $OUT/*/bench.png
grep -A12 "against every peer" $OUT/d128/bench.md; tail -3 $OUT/d128.log
