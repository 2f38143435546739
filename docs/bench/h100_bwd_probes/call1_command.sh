# call 1: where the one-pass backward's step time goes (probe variants, each with one piece left out) + bigbird recheck against 9a2d3cc
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ONLY="bwd full 16k D=128,bwd causal 16k D=128,bwd full 8k D=64,bwd causal 8k D=64,bwd bigbird"
V=".whl/probe/noexp .whl/probe/nostage .whl/probe/nodsready .whl/probe/nodq .whl/probe/nodsstore .whl/probe/nosync .whl/probe/pre_order"
cd scripts
for f in ../.whl/base/gpu $(for v in $V; do echo ../$v; done); do
  MASKATTN_KERNEL_SOURCES=$(realpath $f) timeout 200 python3 kernel_ab.py ../.whl/base/gpu --worker --backward --only "$ONLY" > /dev/null 2>$OUT/warm_$(basename $f).log &
done
wait; echo "warm $(date +%T)"
python3 kernel_ab.py ../.whl/base/gpu $(for v in $V; do echo ../$v; done) --backward --only "$ONLY" --rounds 3 > $OUT/probe.md 2> $OUT/probe.log
echo "ab rc $? $(date +%T)"
cat $OUT/probe.md
