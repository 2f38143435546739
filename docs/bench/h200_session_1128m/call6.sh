# (m) call 6 (nvidia-h200, warm after call 5): synccheck on the head-dim-192 cases and the forward-only runs, which
# now take the 128 x 112 tile at D = 192 (run as one command line)
source scripts/gpu_install.sh || exit 1; timeout 60 compute-sanitizer --tool synccheck --error-exitcode 1 python3 scripts/sanitize.py "head dim 192" > $OUT/synccheck.log 2>&1; echo "synccheck rc $? $(date +%T)"; grep "(128, 112)" $OUT/synccheck.log | tr '\n' ';'; echo; tail -1 $OUT/synccheck.log
