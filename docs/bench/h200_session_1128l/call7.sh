# (l) call 7 (nvidia-h200): issue 16 at its own shape, in turns (the in-turns timer has run --sdpa only at 4096,
# (i) call 10): maskattn.torch.scaled_dot_product_attention with a new dense mask each call against SDPA with it
# and against a precompiled plan, forward and fwd+bwd, 16k, H=16, D=128, bf16
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 540 python3 -m maskattn bench --sdpa --backward --n 16384 --heads 16 --head-dim 128 --out $OUT/sdpa \
    > $OUT/sdpa.log 2>&1
echo "sdpa bench rc $? $(date +%T)"
rm -f $OUT/*/bench.png $OUT/*/*.png
tail -40 $OUT/sdpa.log | cut -c1-250
