# Call 6 (H200): dS^T by stmatrix (writer_stmatrix_ds.diff beside this, applied to the working tree) on top of main
# (the dQ writer on mbarriers), in turns against main; then the backward GPU tests on it. Carry .whl (basetree = main).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
CASES="bwd full 16k D=128,bwd causal 16k D=128,bwd causal 8k D=64,bwd full 8k D=64,bwd doc_causal 16k D=64"
(cd scripts && timeout 140 python3 kernel_ab.py ../.whl/basetree/gpu --rounds 3 --backward --only "$CASES" \
    > $OUT/ab.md 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"; cat $OUT/ab.md
timeout 230 python3 -m pytest -q -x tests/gpu/test_backward.py > $OUT/pytest.log 2>&1
echo "backward tests rc $? $(date +%T): $(tail -n 1 $OUT/pytest.log)"
