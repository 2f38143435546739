# call A: FA4's first half copied; slack 0.5 (tree) against exact runs (slack 0, main's) on the workloads it may cost
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/ || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd scripts && timeout 420 python3 kernel_ab.py ../.whl/s0/gpu --backward --env ../.whl/s0/gpu MASKATTN_RUN_SLACK=0 \
  --only "fwd swa,fwd bigbird,bwd bigbird,bwd graph_rcm,fwd causal 16k D=128,bwd causal 16k D=128,fwd shared_question" \
  --rounds 2 > $OUT/ab_slack.md 2> $OUT/ab_slack.log
echo "ab rc $? $(date +%T)"; cat $OUT/ab_slack.md
