# backward CTA order head-major (hm) and dQ from registers by red.global.add.v4.f32 (red), against HEAD
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd scripts
timeout 520 python3 kernel_ab.py ../.whl/base/gpu ../.whl/hm/gpu ../.whl/red/gpu --backward \
  --only "bwd full 16k D=128,bwd causal 16k D=128,bwd full 8k D=64,bwd bigbird" --rounds 3 > $OUT/ab.md 2> $OUT/ab.log
echo "ab rc $? $(date +%T)"; tail -5 $OUT/ab.log; cat $OUT/ab.md
