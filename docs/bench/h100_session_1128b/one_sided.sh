# One device call: the one-sided interval tests (mask.cuh, bwd_common.cuh) against main's kernels in turns (and a
# variant whose forward checks the staged columns against n_k, .whl/v/checked = the tree with mask_intervals<true>), then
# compute-sanitizer on the interval cases. Carry .whl (meson-python, pyproject-metadata wheels) with .whl/basetree =
# git archive of main (host: rm -rf .whl/basetree && mkdir -p .whl/basetree && git archive main meson.build
# pyproject.toml setup.cfg python maskprep gpu README.md | tar -x -C .whl/basetree).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
(cd scripts && timeout 330 python3 kernel_ab.py ../.whl/basetree/gpu ../.whl/v/checked/gpu --rounds 3 --backward --only "fwd swa,fwd doc_causal,fwd shared_question,fwd causal 16k D=128,bwd swa,bwd doc_causal,bwd shared_question" > $OUT/ab.md 2> $OUT/ab.log)
echo "ab rc $?"; cat $OUT/ab.md
for tool in memcheck racecheck synccheck; do
  timeout 75 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "intervals" > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(grep -c 'ran' $OUT/$tool.log) runs; $(grep 'ERROR SUMMARY' $OUT/$tool.log)"
done
