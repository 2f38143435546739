# Branch bwd-kv-table (not on main): the node-order backward's K and V through the row table, once per CTA (they
# were looked up per copied chunk). One device call, with .whl carried and .whl/basetree = git archive of main:
#   rm -rf .whl/basetree && mkdir .whl/basetree && git archive main meson.build pyproject.toml setup.cfg python \
#       maskprep gpu README.md | tar -x -C .whl/basetree
#   bash docs/bench/next/bwd_kv_table.sh
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 200 python3 -m pytest -q -x tests/gpu/test_backward.py -k "graph_rcm or dilated" > $OUT/pytest_perm.log 2>&1
echo "tests rc $?"; tail -n 2 $OUT/pytest_perm.log
for tool in racecheck synccheck memcheck; do
  timeout 100 compute-sanitizer --tool $tool python3 scripts/sanitize.py perm > $OUT/${tool}_perm.log 2>&1
  echo "$tool rc $? $(grep -E 'SUMMARY' $OUT/${tool}_perm.log | tail -1)"
done
(cd scripts && timeout 240 python3 kernel_ab.py ../.whl/basetree/gpu --rounds 3 --backward --only "bwd graph_rcm,bwd lf_dilated" > $OUT/ab.md 2> $OUT/ab_stderr.log)
echo "ab rc $?"; cat $OUT/ab.md
