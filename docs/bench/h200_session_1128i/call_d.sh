# Call D: carry .whl (with .whl/basetree = main 005a133's package). The 80-row backward steps (RUNS): its GPU tests,
# then an A/B against main's package in turns (kernel_ab.py --site).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
(python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/base_site .whl/basetree > $OUT/base_build.log 2>&1) &
timeout 200 python3 -m pytest -q -x tests/gpu/test_backward.py -k "runs_of_full_blocks or atomic_dq" -p no:cacheprovider 2>&1 | tail -15 | tee $OUT/tests.log
wait
(cd scripts && timeout 300 python3 kernel_ab.py ../.whl/basetree/gpu --site ../.whl/basetree/gpu /tmp/base_site --backward --rounds 2 --only "bwd full") 2>&1 | tail -12 | tee $OUT/ab.log
