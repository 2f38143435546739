# call 2: one pass with dQ issued before dK and staged under it (FA4's order) against 9a2d3cc's kernels; ncu of the dK/dV kernel at D=128; one-pass tests
set -uo pipefail
export OUT PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/maskattn-cupy-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/meson*.whl .whl/pyproject*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install --no-build-isolation --no-deps --no-index -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(date +%T)"
timeout 150 python3 -m pytest -q -x tests/gpu/test_backward.py -k "atomic or (other and 64) or layout" -p no:cacheprovider > $OUT/pytest.log 2>&1; echo "pytest rc $? $(date +%T)"
tail -3 $OUT/pytest.log
timeout 240 python3 scripts/kernel_ab.py .whl/base/gpu --backward --only bwd --rounds 3 > $OUT/ab.md 2> $OUT/ab.err; echo "ab rc $? $(date +%T)"
cat $OUT/ab.md; tail -2 $OUT/ab.err
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
cd scripts && timeout $((580 - SECONDS)) $NCU --clock-control none --profile-from-start off --set full -k regex:bwd_dkdv -o $OUT/bwd128 python3 ncu_forward.py ours_bwd 128 8192 16 full > $OUT/ncu.log 2>&1; echo "ncu rc $? $(date +%T)"; cd ..
tail -3 $OUT/ncu.log
$NCU -i $OUT/bwd128.ncu-rep --page details --csv > $OUT/bwd128_details.csv 2>&1
$NCU -i $OUT/bwd128.ncu-rep --page source --csv --print-source sass > $OUT/bwd128_sass.csv 2>&1
rm -f $OUT/bwd128.ncu-rep; ls -la $OUT
