# The next GPU session's second call (performance.md, 2026-11-28 (i)), right after the first has copied FA4's first part
# (`mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/`, .peers/a carried); this one carries .peers/b and .whl (the
# meson-python and pyproject-metadata wheels):
#   bash docs/bench/next/next_session.sh
# First, branch `bwd-runs-intervals` (7e990d0): the 80-row steps on interval plans too (causal, sliding windows,
# documents, shared_question: a step is partial where one of its blocks is). Compiles with no C7512 and no spill at
# fp16 and bf16; never run on a GPU. On a checkout of the branch, with .whl/basetree = main's package (`git archive
# main meson.build pyproject.toml setup.cfg python maskprep gpu README.md | tar -x -C .whl/basetree`), one call:
#   source scripts/gpu_install.sh || exit 1
#   python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/base_site .whl/basetree
#   python3 -m pytest -q -x tests/gpu/test_backward.py -k "runs_of_query_blocks or atomic_dq"
#   (cd scripts && python3 kernel_ab.py ../.whl/basetree/gpu --site ../.whl/basetree/gpu /tmp/base_site --backward
#       --rounds 2 --only "bwd causal 16k D=128,bwd swa,bwd doc_causal 16k D=128,bwd shared_question")
# FA3 and FA4 keep 64 rows for causal at D = 128 (their measurement, on their kernels): if causal loses, choose on the
# host (e.g. by the plan's share of FULL tiles) rather than drop the rest. Then sanitizers on "80-row runs" and the
# whole backward suite before merging.
# The bench in turns at D = 128, 16k, on the workloads whose leads README still gives from the one-after-another
# timer (shared_question, bigbird, graph_rcm, lf_dilated; doc_causal was re-measured in (i)), with the backward.
# Leads ((i)): our backward at the 80-row steps is 1.063x FA4's on dense D = 128 (1.024x FA4's at 64 rows): the rest of
# the gap is (d)'s tensor-pipe occupancy (64% against 76%). Causal D = 128 and every masked plan keep 64-row steps:
# runs of FULL blocks inside a plan with partial tiles could take 80 if the smem allowed the bit stages (it does not at
# two stages of 80-row Q and dO). LSE loaded ahead at 80 rows (NQ = 10): `variants/lse_ahead_runs.diff` compiles with
# no C7512 (wgmma serialised for want of registers) and no spill at bf16, untimed. To time it (kernels only, same host
# code): `rm -rf .whl/basetree .whl/v && mkdir -p .whl/basetree .whl/v/lse && git archive HEAD gpu | tar -x -C
# .whl/basetree && git archive HEAD gpu | tar -x -C .whl/v/lse && patch -d .whl/v/lse -p1 <
# docs/bench/next/variants/lse_ahead_runs.diff`, then on the GPU `(cd scripts && python3 kernel_ab.py
# ../.whl/basetree/gpu ../.whl/v/lse/gpu --control --rounds 3 --backward --only "bwd full 16k D=128")`. Dropped, do not retry: one-test interval masks
# ((h)); the fence before the P V wait at 192 rows or every D, no ping-pong turns at 192 rows, the backward's dO wait
# after S^T ((g)); two copies of the forward's key loop, the softmax's reductions in four chains ((f)); dS^T by stmatrix
# at 64 rows ((e)); masks after the exponentials, the forward's K release after the softmax, sleeping producer waits
# ((d)).
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
timeout 500 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 128 --backward --peers flex flex_flash \
    --workloads shared_question bigbird graph_rcm lf_dilated --out $OUT/d128_sparse > $OUT/d128_sparse.log 2>&1
echo "bench rc $? $(date +%T)"
rm -f $OUT/*/bench.png  # only 8 files come back
grep -A8 "against every peer" $OUT/d128_sparse/bench.md
