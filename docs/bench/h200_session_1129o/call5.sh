# (o) call 5 (nvidia-h200; carry .whl, with .whl/basetree = 345cf2f's sources): D = 96's dQ by 48 columns a consumer
# (HalfColumns<96>: pieces of 32 + 16, m64n16k16 added) where the 64-row steps computed 64 + 64 with the padding.
# The backward tests at 96, the three sanitizers on D = 96's one-pass cases, then kernel_ab against 345cf2f's package
# (its own process; D = 96's full backward (80-row runs) and D = 128's are the same code on both sides: controls).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/base_site .whl/basetree \
    > $OUT/base_build.log 2>&1 || { tail -20 $OUT/base_build.log; exit 1; }
timeout 200 python3 -m pytest -q tests/gpu/test_backward.py -k "96" > $OUT/tests_bwd.log 2>&1
echo "backward tests rc $? $(date +%T)"; tail -2 $OUT/tests_bwd.log
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "head dim 96" \
      > $OUT/$tool.log 2>&1
  echo "$tool rc $? $(date +%T)"; grep -c "backward ran" $OUT/$tool.log; tail -1 $OUT/$tool.log
done
(cd scripts && timeout 220 python3 kernel_ab.py ../.whl/basetree/gpu --site ../.whl/basetree/gpu /tmp/base_site \
    --backward --deterministic --rounds 3 \
    --only "bwd causal 16k D=96,bwd doc_causal 16k D=96,bwd full 16k D=96,bwd deterministic full 16k D=96,bwd causal 16k D=128") \
    > $OUT/kernel_ab.log 2> $OUT/kernel_ab.err
echo "kernel_ab rc $? $(date +%T)"; cat $OUT/kernel_ab.log
