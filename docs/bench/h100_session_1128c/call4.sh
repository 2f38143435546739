# Call 4 (main): two variants measured and dropped on 2026-11-28 with the old timer, again with samples in turns
# (kernel_ab.py since call 3): one-sided interval masks (os, h100_session_1128b/variants/one_sided_intervals.diff,
# the unchecked variant; its tests/ hunk dropped) and the consumer index by __shfl_sync (uc, uniform_consumer.diff);
# main's own sources (tree) against .whl/basetree (a copy of main) are the control. On the host:
#   rm -rf .whl/basetree .whl/v/{os,uc} && mkdir -p .whl/basetree .whl/v/{os,uc}
#   git archive main meson.build pyproject.toml setup.cfg python maskprep gpu README.md | tar -x -C .whl/basetree
#   for v in os uc; do git archive main gpu | tar -x -C .whl/v/$v; done
#   (cd .whl/v/os && patch -p1 < ../../../docs/bench/h100_session_1128b/variants/one_sided_intervals.diff)  # skip tests
#   (cd .whl/v/uc && patch -p1 < ../../../docs/bench/h100_session_1128b/variants/uniform_consumer.diff)
set -uo pipefail
source scripts/gpu_install.sh || exit 1
CASES="fwd swa,fwd doc_causal,fwd shared_question,fwd causal 16k D=128,fwd full 16k D=128,fwd full 8k D=64,bwd swa"
CASES="$CASES,bwd doc_causal 16k D=128,bwd shared_question,bwd full 16k D=128,bwd causal 8k D=64"
(cd scripts && timeout 480 python3 kernel_ab.py ../.whl/basetree/gpu ../.whl/v/os/gpu ../.whl/v/uc/gpu --rounds 3 \
    --backward --only "$CASES" > $OUT/ab.md 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"; cat $OUT/ab.md
