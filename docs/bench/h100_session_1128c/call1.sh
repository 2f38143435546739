# Call 1 (branch fwd-q-first rebased on main cf4b011): the branch's forward against main's kernels, with a second
# copy of main's kernels as a control, all three in one process in turns (kernel_ab.py: bursts of 5
# calls a sample; call 2: the samples in turns). On the host:
#   rm -rf .whl/basetree .whl/v/aa && mkdir -p .whl/basetree .whl/v/aa
#   git archive main meson.build pyproject.toml setup.cfg python maskprep gpu README.md | tar -x -C .whl/basetree
#   git archive main gpu | tar -x -C .whl/v/aa
set -uo pipefail
source scripts/gpu_install.sh || exit 1
CASES="fwd swa,fwd doc_causal,fwd shared_question,fwd bigbird,fwd causal 16k D=128,fwd full 16k D=128,fwd full 8k D=64"
(cd scripts && timeout 400 python3 kernel_ab.py ../.whl/basetree/gpu ../.whl/v/aa/gpu --rounds 5 --only "$CASES" \
    > $OUT/ab.md 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"; tail -n 3 $OUT/ab.log; cat $OUT/ab.md
