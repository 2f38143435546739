# Call 1 (2026-11-27 10:15 UTC, H100): the bisect of the dense D = 128 forward's regression (performance.md, "the dense forward's regression found"; written as next_forward_bisect.sh the session before).
# On the host, from the project root, first:
#   for c in 8678ef7 2f9e4b4 6c81316 614f262 a020d6b e5ffb47; do mkdir -p .whl/bisect/$c && git archive $c meson.build \
#     pyproject.toml setup.cfg python maskprep gpu README.md | tar -x -C .whl/bisect/$c; done
#   mkdir -p .whl/krel && git archive fwd-k-release gpu | tar -x -C .whl/krel    # the candidate fix (branch), main's host side
# then one device call (carry .whl): each commit installed in its own site, and the candidate, timed in turns against
# the tree. The candidate: since 614f262 a FULL entry's K stage is released after the softmax's row maxima (SASS:
# ~130 instructions after S's wait at D = 128, where 2f9e4b4 released it right after); branch fwd-k-release moves it
# back (test_nvcc's fwd_sm90 configurations pass; GPU tests and racecheck not yet run).
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
COMMITS="8678ef7 2f9e4b4 6c81316 614f262 a020d6b e5ffb47"
for c in $COMMITS; do
  python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/site_$c .whl/bisect/$c > $OUT/build_$c.log 2>&1 &
done
wait; echo "built $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd scripts
FOLDERS=""; SITES=""
for c in $COMMITS; do FOLDERS="$FOLDERS ../.whl/bisect/$c/gpu"; SITES="$SITES --site ../.whl/bisect/$c/gpu /tmp/site_$c"; done
FOLDERS="$FOLDERS ../.whl/krel/gpu"  # the baseline is 8678ef7 (the first folder)
timeout 480 python3 kernel_ab.py $FOLDERS $SITES --only "fwd full 16k D=128,fwd causal 16k D=128" \
  --rounds 3 > $OUT/bisect.md 2> $OUT/bisect.log
echo "ab rc $? $(date +%T)"; cat $OUT/bisect.md
# Also ready (not yet run): next_red_v4_untested.diff, the one pass adding dQ from registers with red.global.add.v4.f32
# (no staging, no barrier, no bulk groups below D = 256); a variant folder for kernel_ab.py:
#   mkdir -p .whl/red && git archive HEAD gpu | tar -x -C .whl/red && patch -d .whl/red -p1 < docs/bench/h100_bwd_probes/next_red_v4_untested.diff
#   python3 scripts/kernel_ab.py .whl/base/gpu .whl/red/gpu --backward --only "bwd full 16k D=128,bwd causal 16k D=128,bwd full 8k D=64,bwd bigbird"
