# The next GPU session's first call (carry .whl with the meson-python and pyproject-metadata wheels):
#   bash docs/bench/next/next_session.sh
# 1. Where the causal forward's extra 10-13% per tile comes from (performance.md, "The causal forward's cost per
#    tile"): block-causal rows (all FULL) through the unmasked and the interval kernels, against full and causal.
#    If "block causal" costs causal's per tile, the schedule is the cause (rows of 1-128 tiles, length bands, L2);
#    if it costs full's and "block causal + 1 partial" causal's, the interval kernel is; if both cost full's, the
#    diagonal's PARTIAL tiles are.
# 2. The GPU tests of the forward and backward on main (routine: the kernels did not change on 2026-11-27 afternoon).
# A second call: `python3 -m maskattn bench --sdpa --n 16384 --heads 16 --head-dim 128 --backward` (its new column,
# the wrapper's host time per fwd+bwd step, not yet run on a GPU) and `python3 -m pytest -q tests/gpu/test_torch_gpu.py
# tests/gpu/test_sdpa_gpu.py` (the eager route's once_differentiable, 847236f, ran on the CPU only).
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 docs/bench/next/probe_causal.py --backward > $OUT/probe_causal.md 2> $OUT/probe_causal.log
echo "probe rc $? $(date +%T)"
timeout 330 python3 -m pytest -q -x tests/gpu/test_forward.py tests/gpu/test_backward.py > $OUT/pytest.log 2>&1
echo "tests rc $? $(date +%T)"; tail -n 2 $OUT/pytest.log
cat $OUT/probe_causal.md
