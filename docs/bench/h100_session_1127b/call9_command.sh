set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
source .peers/b/install.sh; export PYTHONPATH=$PYTHONPATH:/tmp/site
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 1000 > $OUT/clocks.csv &
sampler=$!
cp docs/bench/h100_session_1127b/probe_window.py /tmp/ && cd /tmp && timeout 480 python3 probe_window.py > $OUT/probe_window.md 2> $OUT/probe_window.log
echo "probe rc $? $(date +%T)"
kill $sampler
cat $OUT/probe_window.md; tail -3 $OUT/probe_window.log
python3 - <<'PY'
import csv, os
rows = list(csv.reader(open(os.environ["OUT"] + "/clocks.csv")))[1:]
sm = [int(r[1].split()[0]) for r in rows if len(r) > 2]
pw = [float(r[2].split()[0]) for r in rows if len(r) > 2]
print(f"SM clock MHz: min {min(sm)} median {sorted(sm)[len(sm)//2]} max {max(sm)}; power W: median {sorted(pw)[len(pw)//2]:.0f} max {max(pw):.0f}; samples {len(sm)}")
PY
