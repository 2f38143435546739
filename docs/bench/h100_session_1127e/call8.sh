# call 8: the bench beside Flex Triton on the node-order workloads (FA4 / Flex FLASH not carried this session)
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
timeout 330 python3 -m maskattn bench --n 16384 --heads 16 --head-dim 128 --backward --workloads graph_rcm lf_dilated bigbird --peers flex --out $OUT/bench > $OUT/bench.log 2>&1
echo "bench rc $?"; cat $OUT/bench/bench.md 2>/dev/null || tail -20 $OUT/bench.log
