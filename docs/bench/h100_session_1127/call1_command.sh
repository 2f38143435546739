# Not yet run: the next GPU calls after the length bands (performance.md, "runs in length bands").
# On the host, from the project root, first:
#   rm -rf .whl/p2 && mkdir -p .whl/p2 && git archive fwd-two-p-buffers gpu | tar -x -C .whl/p2
# Call 1 (this script, carrying .whl): branch fwd-two-p-buffers (fwd_sm90.cu: P in two register buffers, O rescaled
# before the next P V, so the softmax of block i runs under P V of block i - 1; scripts/sass.py shows it) through
# main's forward tests and the sanitizers with its kernel sources, then timed against main's forward on every case.
# Keep it if it is correct and faster on dense tiles at D = 64 (192-row tile: one buffer, so ~1.0 expected there),
# 128, 192, 256 and loses nowhere.
# Call 2 (carrying .whl and .peers/a): FA4's first half (`mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/`), and branch
# device-runs-groups (plans built on the device carry runs for any number of mask groups: key-padding masks) through
# its own GPU tests, after `rm -rf .whl/drg && mkdir -p .whl/drg && git archive device-runs-groups meson.build
# pyproject.toml setup.cfg python maskprep gpu tests README.md | tar -x -C .whl/drg` on the host:
#   python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/site_drg .whl/drg
#   (cd .whl/drg && PYTHONPATH=/tmp/site_drg:/tmp/site python3 -m pytest -q tests/gpu/test_dense_plan.py tests/gpu/test_sdpa_gpu.py)
# Call 3 (carrying .whl and .peers/b; `source .peers/b/install.sh`): FA4 for D = 64 at 8k beside maskattn in one
# process (issues 14 and 15 ask >= 0.95x / 0.9x FA4's dense throughput there), and `bench --sdpa` (issue 16: the
# plans built on the device now carry the runs), e.g.
#   python3 -m maskattn bench --n 8192 --heads 32 --head-dim 64 --backward --workloads full causal --peers fa4 cudnn
#   python3 -m maskattn bench --sdpa --n 16384 --heads 16 --head-dim 128 --backward
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export P2=$PWD/.whl/p2/gpu
MASKATTN_KERNEL_SOURCES=$P2 timeout 200 python3 -m pytest -q -x tests/gpu/test_forward.py > $OUT/pytest_p2.log 2>&1
echo "forward tests rc $? $(date +%T)"; tail -n 3 $OUT/pytest_p2.log
for tool in racecheck synccheck; do
  MASKATTN_KERNEL_SOURCES=$P2 timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 python3 scripts/sanitize.py none \
    > $OUT/$tool.log 2>&1; echo "$tool rc $? $(date +%T)"; tail -n 1 $OUT/$tool.log
done
# the table's "tree / ../.whl/p2/gpu" is main over the branch: above 1, the branch is faster
(cd scripts && timeout 340 python3 kernel_ab.py ../.whl/p2/gpu --rounds 2 > $OUT/ab_p2.md 2> $OUT/ab_p2.log)
echo "ab rc $? $(date +%T)"; cat $OUT/ab_p2.md
