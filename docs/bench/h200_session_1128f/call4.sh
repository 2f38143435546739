# Call 4 (after call 3 copied .peers/a to /tmp/fa4; .peers/b and .whl carried): FA4's dense forward at D = 128 under
# Nsight Compute beside ours (call 2's report, carried in .whl/ncu), their details and per-instruction pages; then two
# forward variants against main in turns: .whl/v/tree4 (the softmax's row max and sum in four independent chains, as
# FA4's fmax_reduce) and .whl/v/vlate (the wait for V after S is issued, as FA4's mma_one_n_block_intrawg_overlap).
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
timeout 150 ncu --clock-control none --profile-from-start off --set full -o /tmp/fa4_fwd_full \
    python3 scripts/ncu_forward.py fa4_128 128 16384 16 full > $OUT/ncu.log 2>&1
echo "ncu rc $? $(date +%T)"; tail -n 2 $OUT/ncu.log
for r in .whl/ncu/ours_fwd_full /tmp/fa4_fwd_full; do
  w=$(basename $r)
  ncu -i $r.ncu-rep --page details --csv > $OUT/${w}_details.csv 2>> $OUT/ncu.log
  ncu -i $r.ncu-rep --page source --csv --print-source sass > /tmp/${w}_sass.csv 2>> $OUT/ncu.log
  python3 scripts/ncu_sass_summary.py /tmp/${w}_sass.csv > $OUT/${w}_sass_summary.txt 2>&1
  gzip -c /tmp/${w}_sass.csv > $OUT/${w}_sass.csv.gz
done
echo "ncu -i done $(date +%T)"
(cd scripts && timeout 300 python3 kernel_ab.py ../.whl/basetree/gpu ../.whl/v/tree4 ../.whl/v/vlate --rounds 3 \
  --only "fwd full 16k D=128,fwd causal 16k D=128,fwd full 8k D=64,fwd causal 8k D=64,fwd doc_causal 16k D=128,fwd swa 16k D=128,fwd full 8k D=256") \
  > $OUT/ab.md 2>&1
echo "ab rc $? $(date +%T)"; cat $OUT/ab.md | tail -n 14
