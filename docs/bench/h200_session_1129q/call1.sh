# The one-pass backward's last wave split (prepared in (p) on the host: docs/bench/next/bwd_tail.patch over 455e1cd;
# `git apply docs/bench/next/bwd_tail.patch`, then carry the two wheels). As the forward's tail split (455e1cd): on
# plans without partial tiles whose columns are all of one length, from D = 96 (bwd_sm90.cu's SPLITS), the key
# blocks from split_from on walk num_splits slices of their columns, their dK and dV go in float32 to pieces after
# the dQ accumulator, and bwd_dkdv_merge_sm90_kernel adds them up; forward_cta is split_cta, shared. nvcc: no spills
# (`CI=true pytest tests/test_nvcc.py -k bwd_sm90`), NVRTC builds it (tests/test_nvrtc.py), host suite 786 passed;
# never run on a GPU. Model (tail_splits_for, BWD_PIECE_BLOCKS): dense 16k D = 128 splits its last 68 key blocks 3
# ways, as the forward; expect 1-2% of the dense backward. One call: the new test and the backward's families, the
# sanitizers, then split against none in turns on the backward.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 300 python3 -m pytest -q -rf --tb=short tests/gpu/test_backward.py -k "last_wave or deterministic or runs or \
(family and not other and not layout)" > $OUT/tests.txt 2>&1
echo "backward tests rc $? $(date +%T)"; grep -E "^FAILED|^E  " $OUT/tests.txt | cut -c1-300 | head -20; tail -1 $OUT/tests.txt
for tool in memcheck racecheck synccheck; do
  timeout 70 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "no attention case" \
      > $OUT/$tool.txt 2>&1
  echo "$tool rc $? $(date +%T)"; grep -c "last wave split backward ran" $OUT/$tool.txt; tail -1 $OUT/$tool.txt
done
for D in 128 96; do
  timeout 90 python3 scripts/tiles_ab.py --head-dim $D --tiles 128x128 --n 16384 --unsplit --backward \
      --workloads full causal 2>&1 | tee $OUT/ab_bwd$D.txt
done
