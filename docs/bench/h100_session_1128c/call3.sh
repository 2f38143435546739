# Call 3 (branch fwd-q-first on main 4688946; the forward launches now cached per kernel-source folder): sides in
# one process, samples in turns: main (.whl/basetree), a copy of main (aa, the control), main with a 1 us
# __nanosleep at each CTA's start (slow: proves the sides run their own kernels), main with
# h100_session_1128b/variants/early_barriers.diff (eb), and the branch (tree). On the host:
#   rm -rf .whl/basetree .whl/v/{aa,slow,eb} && mkdir -p .whl/basetree .whl/v/{aa,slow,eb}
#   git archive main meson.build pyproject.toml setup.cfg python maskprep gpu README.md | tar -x -C .whl/basetree
#   for v in aa slow eb; do git archive main gpu | tar -x -C .whl/v/$v; done
#   sed -i '110a\  __nanosleep(1000);' .whl/v/slow/gpu/fwd_sm90.cu
#   (cd .whl/v/eb && patch -p1 < ../../../docs/bench/h100_session_1128b/variants/early_barriers.diff)
set -uo pipefail
source scripts/gpu_install.sh || exit 1
CASES="fwd swa,fwd doc_causal,fwd shared_question,fwd bigbird,fwd causal 16k D=128,fwd full 16k D=128,fwd full 8k D=64"
(cd scripts && timeout 400 python3 kernel_ab.py ../.whl/basetree/gpu ../.whl/v/aa/gpu ../.whl/v/slow/gpu \
    ../.whl/v/eb/gpu --rounds 5 --only "$CASES" > $OUT/ab.md 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"; cat $OUT/ab.md
