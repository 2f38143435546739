# Call 7: which part of the tree's stmatrix change moves what (call 5 read the backward 2-3% faster, call 6 the
# dense forward 5% slower). Sides in turns in one process: main (.whl/basetree), a copy of the tree (A/A),
# .whl/v/noasm (the tree without the asm that keeps store_packed_sw128's row opaque: addresses hoisted, as in call 5),
# .whl/v/bwdonly (the tree with main's forward epilogue: 32-bit stores), the tree.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
CASES="fwd full 16k D=128,fwd causal 16k D=128,fwd full 8k D=64"
CASES="$CASES,bwd full 16k D=128,bwd causal 16k D=128,bwd full 8k D=64,bwd causal 8k D=64"
(cd scripts && timeout 400 python3 kernel_ab.py ../.whl/basetree/gpu ../.whl/v/copy/gpu ../.whl/v/noasm/gpu \
    ../.whl/v/bwdonly/gpu --rounds 3 --backward --only "$CASES" > $OUT/ab.md 2> $OUT/ab.log)
echo "ab rc $? $(date +%T)"; cat $OUT/ab.md; tail -2 $OUT/ab.log
