# (m) call 1 (nvidia-h200; tree = main + the forward's vote on O's rescale at D >= 192, base = main's gpu/ in
# .whl/base): the A/B in turns (with a control copy of the base, and a variant with the vote at every head dim),
# then the forward tests at D = 192 and 256, then compute-sanitizer on the head-dim cases.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
cp -r gpu /tmp/vote_all
sed -i 's/constexpr bool RESCALE_VOTE = D >= 192;/constexpr bool RESCALE_VOTE = true;/' /tmp/vote_all/fwd_sm90.cu
grep -c "RESCALE_VOTE = true" /tmp/vote_all/fwd_sm90.cu || exit 1
(cd scripts && timeout 300 python3 kernel_ab.py ../.whl/base/gpu /tmp/vote_all --rounds 3 --control \
    --only "fwd full 8k D=192,fwd full 8k D=256,fwd causal 8k D=192,fwd causal 8k D=256,fwd full 16k D=128,fwd causal 16k D=128,fwd full 8k D=64,fwd full 16k D=96") \
    > $OUT/ab_fwd.log 2>&1
echo "A/B rc $? $(date +%T)"; tail -14 $OUT/ab_fwd.log
timeout 200 python3 -m pytest -q tests/gpu/test_forward.py -k "192 or 256" > $OUT/tests_fwd.log 2>&1
echo "tests rc $? $(date +%T)"; tail -2 $OUT/tests_fwd.log
for tool in synccheck racecheck memcheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "head dim" \
      > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T)"; tail -1 $OUT/$tool.log
done
