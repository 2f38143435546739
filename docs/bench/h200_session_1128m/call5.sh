# (m) call 5 (nvidia-h200; carry the two wheels): D = 192's forward-only tile at 112 keys (mask_bits now takes rows
# that begin half way into a word): the forward tests at D = 192, compute-sanitizer on the head-dim-192 cases and the
# forward-only runs, then 64 / 96 / 112 keys in turns in one process (keys_ab.py).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 90 python3 -m pytest -q tests/gpu/test_forward.py -k "forward_only or (other_head_dims and 192)" \
    > $OUT/tests_fwd.log 2>&1
echo "forward tests rc $? $(date +%T)"; tail -2 $OUT/tests_fwd.log
timeout 70 python3 docs/bench/h200_session_1128m/keys_ab.py > $OUT/keys_ab.log 2>&1
echo "keys A/B rc $? $(date +%T)"; cat $OUT/keys_ab.log | tail -4
for tool in memcheck racecheck; do
  timeout 45 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "head dim 192" \
      > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T)"; grep "(128, 112)" $OUT/$tool.log | tr '\n' ';'; echo; tail -1 $OUT/$tool.log
done
