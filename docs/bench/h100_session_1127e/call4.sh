# call 4: Nsight Compute's per-instruction samples of graph_rcm's gathered forward (perm)
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
timeout 200 ncu --clock-control none --profile-from-start off --set full -k regex:fwd_sm90 -o $OUT/fwd_perm \
    python3 docs/bench/h100_session_1127e/ncu_perm.py perm > $OUT/ncu.log 2>&1
echo "ncu rc $?"
ncu -i $OUT/fwd_perm.ncu-rep --page source --csv --print-source sass > $OUT/fwd_perm.sass.csv 2> $OUT/sass_err.log
echo "sass rc $?"; wc -l $OUT/fwd_perm.sass.csv; head -2 $OUT/fwd_perm.sass.csv | cut -c1-600
