# The next GPU session (performance.md, 2026-11-28 (l)). First call, on nvidia-h200-x2 if lent (else x4): the
# returned partials of keys sent once now add as slices over runs (19919b7, CPU-tested only: the kinds with two GPUs
# were not lent after it); this script runs the 2-rank GPU tests and the 2-rank bench on main, so that change is
# checked on NCCL and its time seen (causal's rank 0 spent 2 x 2.05 ms in index_add_ before it, (l) call 2).
# Carry the two meson-python wheels only.
# Then, where `status` lends the kinds:
# - nvidia-h200-x4: docs/bench/h200_session_1128k/call8.sh (the 4-rank tests, bench at 128K and causal's timeline):
#   the float32 sums by slices (causal's rank 0 of 4 spent 6 ms in index_add_'s atomics in (k)) were never timed.
# - nvidia-h200-x8: issue 19's 8-GPU rows (`torchrun --nproc-per-node 8 -m maskattn -- bench --distributed --n 131072
#   524288 --workloads causal doc_causal shared_question`, the 8-rank tests with MASKATTN_TEST_RANKS=8).
# Lead for the overlapped path ((j) dropped it as the default: a rank that joins the gradients' return early runs
# its own kernels beside NCCL's waiting kernel, +18% on causal): NCCL's CTAs can be capped (NCCL_MAX_CTAS, NCCL >=
# 2.17; NCCL_CTA_POLICY efficiency / zero-CTA in newer NCCL), so the last lines below time both paths' steps again with
# NCCL on at most 4 CTAs; if the overlapped step then beats the packed one, document the setting, and weigh it at 4
# ranks (where the forward's all-to-all is exposed: 8 ms a step of causal's 122 at 128K, (k)).
# Then on nvidia-h200 (FA4 by two calls, ../shared/peers/fa4-wheels.sh): the bench at D = 192 against the peers
# (`python -m maskattn bench --n 8192 --heads 16 --head-dim 192 --backward --peers flex flex_flash fa4`): (m) moved
# D = 192's forward-only tile to 128 x 112 after its last bench (at 96 keys: full 1.02x FA4, 1.015x Flex FLASH);
# in turns 112 keys took 0.98x 96's time, so full should sit level with FA4 and Flex FLASH. Confirm it.
# Prepared ((m), host-checked only): D = 96 at a forward-only 128 x 160 tile, docs/bench/next/d96_keys160.patch and
# its one-call script d96_keys160.sh (nvidia-h200; apply the patch first). Leads ((m)): D = 256 at 80 keys
# misses shared memory by 704 bytes, of which the 1 KB alignment slack is one (the extern array is declared
# __align__(1024): measure whether the dynamic base is aligned already); the vote on O's rescale is dead (2-8% slower).
# Leads ((l)): D = 96 trails FA4 / Flex FLASH by 12% dense (FA4: 192 x 144 tiles at 96; ours 128 x 128); the dense
# plan's classify runs at 3.56 TB/s of 4.12, the fill kernel 0.011 ms
# beside it (scripts/probe_dense_plan.py). Dropped, do not retry: the 8-tile classify (64 KB static shared memory),
# more loads a thread or more CTAs an SM in it ((l) call 10); see (k)'s file for the kernel ideas dropped before.
set -uo pipefail
source scripts/gpu_install.sh || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 150 python3 -m pytest -q tests/gpu/test_distributed_gpu.py > $OUT/tests2.log 2>&1
echo "2-rank tests rc $? $(date +%T)"; tail -2 $OUT/tests2.log
timeout 250 torchrun --nproc-per-node 2 -m maskattn -- bench --distributed --out $OUT/cp2 > $OUT/cp2.log 2>&1
echo "2-rank bench rc $? $(date +%T)"; rm -f $OUT/cp2/*.png; grep "ranks=" $OUT/cp2.log | cut -c1-330
timeout 120 torchrun --nproc-per-node 2 scripts/cp_profile.py --workloads causal --trace > $OUT/cp_profile2.log 2>&1
echo "profile rc $? $(date +%T)"; grep -A16 "^host step" $OUT/cp_profile2.log | cut -c1-130
python3 -c "import torch; print('NCCL', torch.cuda.nccl.version())"
for ctas in 4 2; do
  NCCL_MAX_CTAS=$ctas timeout 120 torchrun --nproc-per-node 2 scripts/cp_profile.py --workloads causal \
      > $OUT/cp_profile_ctas$ctas.log 2>&1
  echo "NCCL_MAX_CTAS=$ctas profile rc $? $(date +%T)"; grep "^| [01] \|^| rank" $OUT/cp_profile_ctas$ctas.log
done
