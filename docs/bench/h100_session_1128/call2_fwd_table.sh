# The node-order forward's rows looked up once, by the producer, into the epilogue's table (Q's copies, the LSE and
# O's stores read it): the perm forward tests, the sanitizers on perm plans, and the A/B against main (.whl/basetree).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 200 python3 -m pytest -q -x tests/gpu/test_forward.py -k "graph_rcm or dilated or rejects" > $OUT/pytest_perm.log 2>&1
echo "tests rc $?"; tail -n 2 $OUT/pytest_perm.log
for tool in racecheck synccheck memcheck; do
  timeout 100 compute-sanitizer --tool $tool python3 scripts/sanitize.py perm > $OUT/${tool}_perm.log 2>&1
  echo "$tool rc $? $(grep -E 'SUMMARY' $OUT/${tool}_perm.log | tail -1)"
done
(cd scripts && timeout 200 python3 kernel_ab.py ../.whl/basetree/gpu --rounds 3 --only "fwd graph_rcm,fwd lf_dilated" > $OUT/ab.md 2> $OUT/ab_stderr.log)
echo "ab rc $?"; cat $OUT/ab.md
