# The next GPU session (performance.md, 2026-11-28 (k)). First call: carry .whl/basetree (main at 827aee6: `git archive
# 827aee6 meson.build pyproject.toml setup.cfg python maskprep gpu README.md | tar -x -C .whl/basetree`) and the two
# meson-python wheels, then this script: an A/B in turns of the dense backward against 827aee6 (full fwd+bwd read
# 1.105x FA4 in (k)'s bench against 1.06x in (i)'s; the kernel's only change on that path is one predicated store).
# Carry only what the call needs: the tree plus .peers/b and all of .whl went over the 64 MiB a call carries in (k).
# Then, where `status` lends the kinds:
# - nvidia-h200-x4: branch `cp-sliced-returns` (its docs/bench/h200_session_1128k/call8.sh): the returned partials
#   added as slices over runs of consecutive keys instead of index_add_'s atomics (6 ms of causal rank 0's 10.4 ms of
#   sums on 4 ranks), and the rows sent copied by the same runs in one pass (rank 0's gathers took 2.5 ms before the
#   all-to-all). Merge if the 4-rank tests pass and causal's step drops. Next lead there: the forward's all-to-all
#   itself is exposed (4.4 ms before any rank's forward starts on causal at 4 ranks); sending in chunks while the
#   first chunks' tiles run would hide part of it.
# - nvidia-h200-x8: issue 19's 8-GPU rows (`torchrun --nproc-per-node 8 -m maskattn -- bench --distributed --n 131072
#   524288 --workloads causal doc_causal shared_question`, the 8-rank tests with MASKATTN_TEST_RANKS=8) have never run.
# - The backward suite takes ~300 s on a cold machine: give it timeout 400 (it was cut at 163 of 165 in (k)).
# Leads ((i)): our backward at the 80-row steps is 1.063x FA4's on dense D = 128 (1.024x FA4's at 64 rows): the rest of
# the gap is (d)'s tensor-pipe occupancy (64% against 76%). Dropped, do not retry: the LSE loaded ahead at 80-row steps
# (NQ = 10) spills once interval plans take the steps ((j)); one-test interval masks ((h)); the fence before the P V
# wait at 192 rows or every D, no ping-pong turns at 192 rows, the backward's dO wait after S^T ((g)); two copies of the
# forward's key loop, the softmax's reductions in four chains ((f)); dS^T by stmatrix at 64 rows ((e)); masks after the
# exponentials, the forward's K release after the softmax, sleeping producer waits ((d)).
set -uo pipefail
source scripts/gpu_install.sh || exit 1
pip install --no-build-isolation --no-deps --no-index -q --target /tmp/base_site .whl/basetree || exit 1
(cd scripts && timeout 400 python3 kernel_ab.py ../.whl/basetree/gpu --site ../.whl/basetree/gpu /tmp/base_site \
    --backward --rounds 2 --only "bwd full 16k D=128,bwd causal 16k D=128") 2>&1 | tail -12 | tee $OUT/ab_full.log
