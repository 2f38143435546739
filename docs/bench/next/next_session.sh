# The next GPU session's second call (performance.md, 2026-11-28 (g)), right after the first has copied FA4's first part
# (`mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/`, .peers/a carried); this one carries .peers/b and .whl (the
# meson-python and pyproject-metadata wheels):
#   bash docs/bench/next/next_session.sh
# 1. Where the causal D = 64 forward loses to FlashAttention-4 at the same 192 x 128 tile: 0.92x its throughput in (g)
#    where the dense one is at 0.95-1.0x. Both under Nsight Compute (one call after warm-ups), their details and
#    per-instruction pages summarised by scripts/ncu_sass_summary.py: compare SM active cycles, the tensor and MUFU
#    pipes, instructions per key block, the stalls at the turns' barriers and the waits, and the first/last tiles.
# 2. The 6% between the bench's reading of our dense D = 64 forward (1.030 ms) and ncu_forward.py time's (1.090) in
#    the same call of (g): both again, in both orders, so that order (the card's heat at its 700 W limit) is told
#    apart from the path (maskattn.attention on torch tensors against cuda.forward on CuPy arrays).
# Other leads (performance.md (c) to (g)): the uniform consumer index at 128 rows read 0.958 on dense D = 64 and
# 0.983 on D = 96 but 1.044 on causal D = 64 ((g), one call); the backward's 10% to FA4 at D = 128 (same products,
# 16% more cycles, (d)); the D = 256 V-wait exception (1%, (f)). Dropped, do not retry: the fence before the P V wait
# at 192 rows or every D, no ping-pong turns at 192 rows, the backward's dO wait after S^T ((g)); two copies of the
# forward's key loop, the softmax's reductions in four chains ((f)); dS^T by stmatrix ((e)); masks after the
# exponentials, the forward's K release after the softmax, sleeping producer waits ((d)).
set -uo pipefail
source .peers/b/install.sh || exit 1
source scripts/gpu_install.sh || exit 1
for which in ours_192 fa4_default; do
  timeout 120 ncu --clock-control none --profile-from-start off --set full -o /tmp/$which \
      python3 scripts/ncu_forward.py $which 64 8192 32 causal >> $OUT/ncu.log 2>&1
  echo "ncu $which rc $? $(date +%T)"
  ncu -i /tmp/$which.ncu-rep --page details --csv > $OUT/${which}_details.csv 2>> $OUT/ncu.log
  ncu -i /tmp/$which.ncu-rep --page source --csv --print-source sass > /tmp/${which}_sass.csv 2>> $OUT/ncu.log
  python3 scripts/ncu_sass_summary.py /tmp/${which}_sass.csv > $OUT/${which}_sass_summary.txt 2>&1
done
# (only 8 files come back from $OUT: the bench's own output stays in /tmp, its row goes to paths.txt)
bench() {
  timeout 90 python3 -m maskattn bench --n 8192 --heads 32 --head-dim 64 --peers fa4 --workloads full \
      --out /tmp/bench_$1 > /tmp/bench_$1.log 2>&1
  echo "bench ($1): $(grep -A3 '^Forward, against every peer' /tmp/bench_$1/bench.md | tail -n 1)"
}
timed() { (cd scripts && timeout 60 python3 ncu_forward.py time 64 8192 32 full) 2>&1 | grep " ms"; }
{ bench first; timed; timed; bench last; } | tee $OUT/paths.txt
