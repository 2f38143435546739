# (n) call 4 (nvidia-h200; carry .peers/a and the two wheels): FA4's first half to /tmp/fa4; then D = 128 at
# forward-only tiles of 192 rows (three consumers; 80 or 64 keys, the widths at 160 registers without spills):
# its forward-only tests at 192 x 80, then 128 x 128 against 192 x 80 and 192 x 64 in turns at 16k.
set -uo pipefail
mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/
source scripts/gpu_install.sh || exit 1
timeout 120 python3 -m pytest -q tests/gpu/test_forward.py -k "forward_only and 128" > $OUT/tests_fwd.log 2>&1
echo "forward tests rc $? $(date +%T)"; tail -2 $OUT/tests_fwd.log
timeout 200 python3 scripts/tiles_ab.py --head-dim 128 --tiles 128x128 192x80 192x64 --n 16384 \
    --workloads full causal doc_causal swa > $OUT/tiles_ab.log 2>&1
echo "tiles A/B rc $? $(date +%T)"; tail -6 $OUT/tiles_ab.log
