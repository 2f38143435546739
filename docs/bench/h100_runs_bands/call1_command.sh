# Call 1 of 2026-11-27 12:30 (ran as written; outputs call1_*): the first GPU call after the CTA runs (performance.md, "the dense forward's regression found").
# On the host, from the project root, first:
#   rm -rf .whl/base .whl/loadonly .whl/dpr && mkdir -p .whl/base .whl/loadonly .whl/dpr
#   git archive HEAD gpu | tar -x -C .whl/base && git archive HEAD gpu | tar -x -C .whl/loadonly
#   patch -d .whl/loadonly -p1 < docs/bench/h100_cta_runs/next_probe_run_load_only.diff
#   git archive device-plan-runs meson.build pyproject.toml setup.cfg python maskprep gpu tests README.md | tar -x -C .whl/dpr
#   rm -rf .whl/params && mkdir -p .whl/params && git archive cta-runs-params meson.build pyproject.toml setup.cfg python \
#     maskprep gpu README.md | tar -x -C .whl/params
#   rm -rf .whl/band .whl/band50 && mkdir -p .whl/band && git archive banded-runs meson.build pyproject.toml setup.cfg \
#     python maskprep gpu README.md | tar -x -C .whl/band && mkdir -p .whl/band50 && cp -r .whl/band/gpu .whl/band50/
# then one device call carrying .whl (this script), and a second (the commands at the end):
# 1. sliding window's forward lost 3.5% to the runs: the run's dependent load at every CTA's start, or the order? The
#    probe loads the run and ignores it (rank by rank): if it reads ~1.035 on swa, the load is the cost (next: the
#    runs as kernel parameters); if ~1.0, the order is (next: runs only where they are long enough to share L2).
#    Branch cta-runs-params passes the runs by value (constant bank, no load): timed beside main in the same call
#    (its own site), it answers the same question and is the fix if it wins on swa and holds elsewhere.
# 2. branch device-plan-runs (plans of dense GPU masks carry their runs): its GPU tests, then merge. Unlike a host
#    plan's upload, the device cannot leave out runs of one rank without a read-back: a causal GPU mask's kernels then
#    load runs of one rank (time `bench --sdpa` causal before merging).
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/site_dpr .whl/dpr > $OUT/build_dpr.log 2>&1 || { tail -30 $OUT/build_dpr.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/site_params .whl/params > $OUT/build_params.log 2>&1 || { tail -30 $OUT/build_params.log; exit 1; }
(cd scripts && timeout 300 python3 kernel_ab.py ../.whl/base/gpu ../.whl/loadonly/gpu ../.whl/params/gpu \
  --site ../.whl/params/gpu /tmp/site_params \
  --only "fwd swa,fwd full 16k D=128,fwd bigbird,fwd doc_causal" --rounds 3 > $OUT/ab_loadonly.md 2> $OUT/ab_loadonly.log)
echo "ab rc $? $(date +%T)"; cat $OUT/ab_loadonly.md
(cd .whl/dpr && PYTHONPATH=/tmp/site_dpr:/tmp/site timeout 240 python3 -m pytest -q tests/gpu/test_dense_plan.py \
  tests/gpu/test_sdpa_gpu.py > $OUT/pytest_dpr.log 2>&1); echo "dpr rc $? $(date +%T)"; tail -n 3 $OUT/pytest_dpr.log
# Call 2: runs of rows about one length (branch banded-runs: rank_levels' slack 0.25, and 0.5 through --env) against
# main's exact runs (the tree): causal has no exact run longer than a rank, so its CTAs still stream 16 heads at once.
#   (install as above, then)
#   python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/site_band .whl/band
#   cd scripts && timeout 500 python3 kernel_ab.py ../.whl/band/gpu ../.whl/band50/gpu --backward \
#     --site ../.whl/band/gpu /tmp/site_band --site ../.whl/band50/gpu /tmp/site_band \
#     --env ../.whl/band50/gpu MASKATTN_RUN_SLACK=0.5 \
#     --only "fwd causal 16k D=128,fwd doc_causal,fwd shared_question,bwd causal 16k D=128,bwd causal 8k D=64,bwd doc_causal" \
#     --rounds 3
