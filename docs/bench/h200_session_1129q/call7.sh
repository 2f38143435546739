# D = 128's forward-only 128 x 176 tile for plans without partial tiles: its tests, the sanitizers, and its time in
# turns against 128 x 128 on full (16k and 4k).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
timeout 240 python3 -m pytest -q -rf --tb=short tests/gpu/test_forward.py -k "forward_only or whole_tiles" \
    > $OUT/tests.txt 2>&1
echo "tests rc $? $(date +%T)"; grep -E "^FAILED|^E  " $OUT/tests.txt | cut -c1-300 | head -20; tail -1 $OUT/tests.txt
for tool in memcheck racecheck synccheck; do
  timeout 80 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py "no attention case" \
      > $OUT/$tool.txt 2>&1
  echo "$tool rc $? $(date +%T)"; grep "(128, 176) tile" $OUT/$tool.txt; tail -1 $OUT/$tool.txt
done
timeout 100 python3 scripts/tiles_ab.py --head-dim 128 --tiles 128x128 128x176 --n 16384 --workloads full \
    --rounds 5 2>&1 | tee $OUT/ab_16k.txt
timeout 60 python3 scripts/tiles_ab.py --head-dim 128 --tiles 128x128 128x176 --n 4096 --workloads full \
    --rounds 5 2>&1 | tee $OUT/ab_4k.txt
