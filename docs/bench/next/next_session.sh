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
# Then on nvidia-h200: (n) benched D = 192 at 112 keys (full level with Flex FLASH, 1.01x FA4) and moved D = 96's
# forward-only tile to 192 x 112 (full 1.02x Flex FLASH, causal 1.04x FA4); 128 x 160 at D = 96 and 192 x 80 / 64 at
# D = 128 measured slower and dropped. Leads ((n)): D = 96's remaining 2.4% on full: FlashAttention-3 takes 192 x 144
# there with P through shared memory (its MmaPV_is_RS false), which frees P's registers for S (ours holds P in
# registers: 192 x 128 spills 144 bytes at 160 registers and ran 1.65-1.85x slower, as D = 64's spilling 192 x 144
# and 192 x 160 did, 1.47-1.74x, (n) call 7). P in shared memory does not fit beside D = 96's padded 128-column
# tiles at 192 x 144 (Q 48 KB + K/V 144 KB + P 54 KB > 227 KB): it needs 96-column (64-byte swizzle) tiles too.
# D = 256 at 80 keys misses shared memory by 704 bytes, of which the 1 KB alignment slack is one (the extern array
# is declared __align__(1024): measure whether the dynamic base is aligned already; even then a node order's row
# tables do not fit, 232,128 + 1,152 > 232,448 bytes, so such plans would keep 64 keys); the vote on O's rescale is dead
# (2-8% slower, (m)).
# (o): D = 96's backward takes the 80-row runs on plans without partial tiles (full fwd+bwd 1.08x FA4, was 1.15x);
# measured and dropped: 80 rows on D = 96's interval plans (1.02-1.03x), D = 96's dQ split 48 + 48 (no gain but
# deterministic 0.98x), D = 128 forward at 128 x 176 / 128 x 160 (0.98-1.17x, no direction). Left at D = 192: the
# backward is 1.2x FA4's (FA4: 64 x 96 steps, one dO and one P/dS stage; ours 64-key blocks, as the 128 x 64 training
# tile; 96-key blocks do not fit our two-stage shared layout, 264 KB).
# (p): D = 256's forward-only 128 x 80 tile merged (full 0.93x, causal 0.91x the 128 x 64 time; 0.970x FA4's dense
# throughput); dense forwards split the last wave's CTAs (tail_splits_for: D = 96 full 0.96x, D = 128 0.985x, D = 64
# 0.97x the unsplit time; D = 96 full now 0.99x Flex FLASH). (q): the backward's last wave split merged (dense
# backward 1.7% faster at D = 128 and 96); every GPU test of the forward and backward passed on that tree. Then D = 128's
# forward at 128 x 176 on plans without partial tiles (full 0.975x the 128 x 128 time; 0.969x FA4's throughput): its
# forward-only tests passed. (r): every GPU test passed on (q)'s tree; causal's gap at D = 64 (probe_causal.py): 3.6%
# the interval kernel itself, 3.4% the partial tiles' masks, 5% per tile the shorter rows. Merged: one key-loop body
# for whole tiles and one for partial ones in the forward (causal 0.94-0.98x at D = 128-256; not at D = 64). First on
# nvidia-h200 next: docs/bench/next/owed_tests.sh (its remaining tests and sanitizers). The 3.6% at D = 64's 192-row
# tile is not the consumers' loop body (two bodies read 0.996): look at the producer's per-entry payload reads next.
# Prepared: docs/bench/next/entry_ahead.sh (each entry's kind read a step ahead for the two bodies' branch).
# Leads ((l)): the dense plan's classify runs at 3.56 TB/s of 4.12, the fill kernel 0.011 ms beside it (scripts/probe_dense_plan.py). Dropped, do not retry: the 8-tile classify (64 KB static shared memory),
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
