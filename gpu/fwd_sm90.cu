// Hopper (sm_90a) block-sparse flash-attention forward: fwd_kernel's plan traversal, masks and outputs, on wgmma.
//
// Same parameters (key_lens included), grid and outputs as fwd_kernel (fwd.cu) with TILE_M x TILE_N tiles,
// split-KV partials and GQA row packing included: the CTA's query block rank in m_order and its head group
// b * H / pack + h / pack and its split from common.cuh's split_cta (longest first across heads). TILE_M
// is 128, or 192 at D <= 96; TILE_N is sm90::TILE_N<D> (128 up to D = 128, 64 at 192 and 256), or 112 at D = 96
// and 192, 176 at 128, 80 at 256 (sm90::VALID_TILE lists the pairs). The training tiles are 128 x TILE_N<D>; the
// others are for forward-only plans (the backward's kernels take the training tiles). One producer warpgroup and
// TILE_M / 64 consumers:
// - warpgroup 0 produces: Q's tile (once), then each listed key block's K and V tiles (two stages each) into
//   128-byte-swizzled shared memory, announced on mbarriers: by the copy engine from one thread through the tensor
//   maps q_map, k_map and v_map (tma.cuh; Q by cp.async of the warpgroup where GQA packing interleaves heads in its
//   rows), or, for plans with a node order, all by cp.async gathers of the warpgroup (wgmma.cuh's
//   produce_kv_stages). Q's copy and the first K's are in flight together. A partial entry's payload (its intervals
//   or bit tile, wgmma.cuh's PayloadStages) travels with its K tile into a stage of its own, so the masks read shared
//   memory. A stage is refilled after its "empty" mbarrier says every consumer is done with it.
// - warpgroups 1 to TILE_M / 64 consume, 64 query rows each: S = Q K^T (wgmma m64nTILE_Nk16, both operands in shared
//   memory), the masks and online softmax of fwd_kernel per warp (a warp's part of the wgmma accumulator is the
//   m16n8 fragment repeated over the columns, so mask.cuh and softmax.cuh serve as they are), and O += P V with P
//   in registers (the S accumulator packed to 16 bits is the register A operand) and V N-major in shared memory.
//   The P V product of key block j - 1 is issued right after S of block j, to run under the softmax of j (at
//   D = 256; at the other head dims ptxas hoists the wait for it above the softmax, see the key loop); and the
//   consumers take turns issuing (FlashAttention-3's ping-pong, round robin with three), so one's softmax runs under
//   the others' products (about 5% faster at D = 128, unchanged within noise at D = 64, measured while the kernel
//   was built).
// - the epilogue: each consumer writes its rows of O, normalised, into Q's tile (swizzled), then stores them: by the
//   copy engine (o_map, 64-row boxes; one thread, which waits only until shared memory has been read) where Q's rows
//   are a head's tokens, else by 16-byte stores through the row map (GQA packing, node orders). The LSE goes first;
//   split-KV partials go from registers to their float32 arrays instead.
//
// Head dims 32 and 96 take the shared layout of 64 and 128 (wgmma.cuh's SW128_COLUMNS: whole 64-column blocks,
// the last one half used); the products stop at column D.
//
// Dynamic shared memory: SM90_SMEM_BYTES<D, TILE_M, TILE_N> = 1024 (alignment slack, sm90::ALIGN_SLACK) + Q (TILE_M x
// DS elements, DS = SW128_COLUMNS<D>) + two stages each of K and V (TILE_N x DS) + two stages of partial-tile payloads
// (wgmma.cuh's PayloadStages: 32 + max(16, TILE_M / 8) TILE_N bytes each) + 128 (mbarriers). Template knobs: T
// (half_t | bf16_t), D (32, 64, 96, 128, 192, 256), TILE_M, TILE_N, MASK, PERM; the #ifndef defaults configure the
// instantiation of a standalone nvcc -DMASKATTN_INSTANTIATE build.
#include "common.cuh"
#include "mask.cuh"
#include "softmax.cuh"
#include "tma.cuh"

#ifndef MASKATTN_DTYPE
#define MASKATTN_DTYPE bf16_t
#endif
#ifndef MASKATTN_HEAD_DIM
#define MASKATTN_HEAD_DIM 128
#endif
#ifndef MASKATTN_MASK
#define MASKATTN_MASK MASK_NONE
#endif
#ifndef MASKATTN_PERM
#define MASKATTN_PERM false
#endif
#ifndef MASKATTN_TILE_M
#define MASKATTN_TILE_M 128
#endif
#ifndef MASKATTN_TILE_N
#define MASKATTN_TILE_N (MASKATTN_HEAD_DIM <= 128 ? 128 : 64)
#endif

namespace maskattn {

namespace sm90 {

// Query rows per tile: 128 (two consumer warpgroups) or, forward-only at D <= 96, 192 (three, as FlashAttention-3
// and -4 at those head dims); a warpgroup per 64 rows, plus the producer's.
template <int TILE_M>
constexpr int CONSUMERS = TILE_M / 64;
template <int TILE_M>
constexpr int THREADS = 128 * (CONSUMERS<TILE_M> + 1);
// Register budgets per thread (producer + consumers = the launch bound's 65536 / THREADS per warpgroup, else
// setmaxnreg.inc waits forever): the producer needs only addressing; a consumer holds the O and S accumulators
// (64 + 64 floats at D = 128, 128 + 32 at D = 256, 32 + 64 at D = 64), P (32 or 16) and the softmax state. At
// D = 256 the interval masks spilled 32 bytes at 232; FlashAttention-3's 24 / 240 leaves none. Three consumers take
// FlashAttention-3's 32 / 160: at D = 96 (48 floats of O) S fits 112 keys there (128 spilled 144 bytes).
template <int D, int TILE_M>
constexpr int PRODUCER_REGS = TILE_M == 192 ? 32 : D <= 128 ? 40 : 24;
template <int D, int TILE_M>
constexpr int CONSUMER_REGS = TILE_M == 192 ? 160 : D <= 128 ? 232 : 240;
constexpr int ALIGN = 1024;         // the 128-byte swizzle repeats every 8 rows of 128 bytes

// Key rows per block of the training tiles: 128 up to D = 128; 64 at D = 192 and 256, where Q and two stages of K
// and V of 128 rows would not fit in shared memory (the plans' tiles there are 128 x 64, as for fwd.cu and the
// backward's). VALID_TILE adds the forward-only tiles (H200, in turns in one process, docs/performance.md):
// - 192 x 128 up to D = 64;
// - 192 x 112 at D = 96: 0.91-0.92x the time of 128 x 128 on full, causal, documents and shared_question at 16k
//   (2026-11-29 (n)), where 128 x 160 took 1.01-1.05x;
// - 128 x 112 at D = 192 (FlashAttention-3's there): 0.86x the time of 64 keys on full and causal masks at 8k, where
//   96 keys took 0.88-0.89x ((m));
// - 128 x 80 at D = 256 (FlashAttention-3's there), which fits only without the alignment slack (ALIGN_SLACK) and
//   without a node order's row tables; with bit tiles ptxas spills 32 bytes there. Plans with either keep 64 keys
//   (kernels.sm90_forward_tile_takes).
// - 128 x 176 at D = 128 (FlashAttention-3's non-causal tile), for plans without partial tiles or a node order
//   (kernels.SM90_FORWARD_TAKES): 0.975x the time of 128 x 128 on full at 16k ((q)); with partial tiles 0.99-1.17x
//   on causal, documents and windows ((o)), and with a node order and intervals ptxas spills 40 bytes.
// Not kept: 192 x 80 and 192 x 64 at D = 128 (1.01-1.10x on full and causal, (n)); 128 x 160 at D = 128 (0.97-1.09x,
// (o)).
template <int D>
constexpr int TILE_N = D <= 128 ? 128 : 64;
template <int D, int TILE_M, int N>
constexpr bool VALID_TILE = TILE_M == 128 ? N == TILE_N<D> || (D == 128 && N == 176) || (D == 192 && N == 112)
                                                || (D == 256 && N == 80)
                                          : TILE_M == 192 && (D <= 64 ? N == 128 : D == 96 && N == 112);
// Bytes reserved to align the tiles to ALIGN: none at D = 256's 128 x 80, whose tiles fill all but 320 bytes of what
// a block may opt into. The dynamic shared memory's base is 1024-byte aligned where a kernel has no static shared
// memory (CUTLASS's and FlashAttention-3's Hopper kernels rely on it); that kernel checks it and traps otherwise.
template <int D, int TILE_M, int TILE_N>
constexpr int ALIGN_SLACK = D == 256 && TILE_N == 80 ? 0 : ALIGN;

template <int ROWS, int D>
constexpr int TILE_BYTES = ROWS * SW128_COLUMNS<D> * 2;

static_assert(PRODUCER_REGS<256, 128> + 2 * CONSUMER_REGS<256, 128> == 3 * 168 &&
                  PRODUCER_REGS<128, 128> + 2 * CONSUMER_REGS<128, 128> == 3 * 168 &&
                  PRODUCER_REGS<64, 192> + 3 * CONSUMER_REGS<64, 192> == 4 * 128,
              "the budgets share the launch bound's registers");
// Named barriers: the consumers' epilogues 1 to 3 (EPILOGUE_BARRIER + consumer), their turns 6 to 8, wgmma.cuh's
// PRODUCER_BARRIER 5 between.
constexpr int EPILOGUE_BARRIER = 1;
constexpr int TURN_BARRIER = 6;
static_assert(EPILOGUE_BARRIER + 3 <= PRODUCER_BARRIER && TURN_BARRIER > PRODUCER_BARRIER, "barriers apart");
static_assert(kv_stages::BARRIERS * 8 <= 128, "the mbarriers fit the 128 bytes after the tiles");

}  // namespace sm90

// sm90_smem_bytes in backends/cuda/kernels.py
template <int D, int TILE_M, int TILE_N>
constexpr int SM90_SMEM_BYTES =
    sm90::ALIGN_SLACK<D, TILE_M, TILE_N> + sm90::TILE_BYTES<TILE_M, D> + 4 * sm90::TILE_BYTES<TILE_N, D> +
    2 * PayloadStages<MASK_NONE, TILE_M, TILE_N>::STAGE_BYTES + 128;

template <typename T, int D, int TILE_M, int TILE_N, int MASK, bool PERM>
__global__ void __launch_bounds__(sm90::THREADS<TILE_M>, 1)
    fwd_sm90_kernel(MASKATTN_FWD_ARRAYS, MASKATTN_FWD_SHAPES_AND_PLAN, const __grid_constant__ TensorMap k_map,
                    const __grid_constant__ TensorMap v_map, const __grid_constant__ TensorMap q_map,
                    const __grid_constant__ TensorMap o_map) {
  if constexpr (!PERM) perm = nullptr;  // no node order: the row lookups compile away (common.cuh)
  using namespace sm90;
  using namespace kv_stages;
  static_assert(D == 32 || D == 64 || D == 96 || D == 128 || D == 192 || D == 256, "head dims 32 to 256");
  constexpr int CONSUMERS = sm90::CONSUMERS<TILE_M>;
  static_assert(VALID_TILE<D, TILE_M, TILE_N>, "the training tile, 192 x 128 up to D = 64, 192 x 112 at 96, 128 x 176 "
                                              "at 128, 128 x 112 at 192, 128 x 80 at 256");
  static_assert(!PERM || SM90_SMEM_BYTES<D, TILE_M, TILE_N> + ROW_TABLE_BYTES <= 232448,
                "a node order's row tables fit beside the tiles (not at D = 256's 128 x 80)");
  constexpr int NB = TILE_N / 8;  // n8 fragments of S per warp
  constexpr int DB = D / 8;       // n8 fragments of O per warp
  constexpr int KS = TILE_N / 16;  // k16 steps of P V
  constexpr int TILE = TILE_BYTES<TILE_N, D>;  // a stage of K or V
  constexpr bool TWO_BODIES = MASK != MASK_NONE && !PERM && !(D <= 64 && TILE_M == 128);

  extern __shared__ __align__(1024) unsigned char smem[];
  const unsigned smem_raw = smem_addr(smem);
  if constexpr (ALIGN_SLACK<D, TILE_M, TILE_N> == 0) {
    if (smem_raw % ALIGN != 0) __trap();  // no slack was reserved (ALIGN_SLACK)
  }
  const unsigned sQ = (smem_raw + ALIGN - 1) & ~(ALIGN - 1u);
  const unsigned sK = sQ + TILE_BYTES<TILE_M, D>;  // [2] stages
  const unsigned sV = sK + 2 * TILE;  // [2] stages
  using Payload = PayloadStages<MASK, TILE_M, TILE_N>;
  const unsigned sP = sV + 2 * TILE;  // [2] stages of payloads
  const unsigned bars = sP + 2 * Payload::STAGE_BYTES;  // SM90_SMEM_BYTES<D, TILE_M, TILE_N> in all
  auto barrier = [&](int id) { return bars + 8u * id; };

  const int tid = threadIdx.x, warpgroup = tid / 128;
  const int head_groups = heads / pack;
  const SplitCta cta_of = split_cta(m_levels, batch * head_groups, n_mblocks, split_from, num_splits);
  const int b = cta_of.head_group / head_groups, h = cta_of.head_group % head_groups * pack;  // h: first query head
  const int rows = n_q * pack;
  const int group = b * group_sb + h * group_sh;
  const int m_block = m_order[(long long)group * n_mblocks + cta_of.rank];
  const int row0 = m_block * TILE_M;
  const int keys = key_lens == nullptr ? n_k : min(n_k, key_lens[b]);
  const long long row_begin = row_ptr[(long long)group * (n_mblocks + 1) + m_block];
  long long row_len = row_ptr[(long long)group * (n_mblocks + 1) + m_block + 1] - row_begin;
  if (key_lens != nullptr) row_len = bounded_row_len(col_idx, row_begin, row_len, keys, TILE_N);
  const long long e_begin = row_begin + row_len * cta_of.split / cta_of.splits;
  int n_entries = (int)(row_begin + row_len * (cta_of.split + 1) / cta_of.splits - e_begin);
  if (key_lens != nullptr) {  // the split's blocks below the bound: a prefix (blocks ascend), found by bisection
    int lo = 0;
    while (lo < n_entries) {
      const int mid = (lo + n_entries) / 2;
      if (col_idx[e_begin + mid] * TILE_N < keys) lo = mid + 1;
      else n_entries = mid;
    }
  }

  const TileMasks masks{bit_pool, intervals, interval_minmax, n_k, n_nblocks, keys};
  // with a node order: the producer's two slots of rows (producer_rows), then the epilogue's TILE_M rows
  int* const row_table = reinterpret_cast<int*>(smem + (bars + 128 - smem_raw));
  int* const o_table = row_table + 2 * 128;

  // Q_FULL with a node order: the 128 copying threads, then thread 0 once the epilogue's table is written
  if (tid == 0) kv_stages_init(bars, PERM ? 128 : 1, PERM ? 129 : 1, 4 * CONSUMERS, 128 * CONSUMERS);
  __syncthreads();

  if (warpgroup == 0) {
    setmaxnreg_dec<PRODUCER_REGS<D, TILE_M>>();
    const int kv_head = h / heads_per_kv;
    const Payload payload{masks, group, kind + e_begin, payload_idx + e_begin, sP};
    auto load_q_rows = [&]() {  // by the warpgroup's cp.async, rows through GQA packing and the node order
      const PackedRows q_rows{pack, q_sh, q_sn, perm};
      load_rows_sw128_async<TILE_M, D, 128>(sQ, q + b * q_sb + h * q_sh, [&](int r) { return q_rows(row0 + r); },
                                            rows - row0, tid);
      cp_async_commit();
    };
    if constexpr (PERM) {  // rows gathered through the node order: cp.async, announced by the copying threads
      // a head's tokens are looked up once, into the epilogue's table, which serves Q's copies, the LSE and O's
      // stores; thread 0's arrival after the table's barrier releases it to the consumers
      if (pack == 1) {
        producer_rows<TILE_M>(o_table, 0, perm, row0, rows - row0, tid);
        load_rows_sw128_async<TILE_M, D, 128>(sQ, q + b * q_sb + h * q_sh, TableRows{o_table, (int)q_sn},
                                              rows - row0, tid);
      } else {
        load_q_rows();
      }
      cp_async_arrive(barrier(Q_FULL));
      if (tid == 0) mbarrier_arrive(barrier(Q_FULL));
      produce_kv_stages<TILE_N, D>(bars, sK, sV, k + b * k_sb + kv_head * k_sh, v + b * v_sb + kv_head * v_sh,
                                   k_sn, v_sn, perm, row_table, col_idx + e_begin, n_entries, n_k, tid, payload);
    } else {  // tiles of consecutive rows: the copy engine, one thread, and Q_FULL's one arrival
      if (pack == 1) {  // Q's rows are a head's tokens: its tile by the copy engine too, in flight beside K's
        if (tid == 0) {
          mbarrier_arrive_expect_tx(barrier(Q_FULL), TILE_BYTES<TILE_M, D>);
          tma_load_tile<TILE_M, D>(sQ, &q_map, row0, h, b, barrier(Q_FULL));
        }
      } else {
        load_q_rows();
        cp_async_wait<0>();
        fence_proxy_async();
        named_barrier_sync(PRODUCER_BARRIER, 128);
        if (tid == 0) mbarrier_arrive(barrier(Q_FULL));
      }
      if (tid == 0) {
        produce_kv_stages_tma<TILE_N, D>(bars, sK, sV, &k_map, &v_map, kv_head, b, col_idx + e_begin, n_entries,
                                         payload);
      }
    }
    return;
  }

  setmaxnreg_inc<CONSUMER_REGS<D, TILE_M>>();
  // rows [64 consumer, 64 consumer + 64) of the tile. At the 192-row tile it is broadcast from lane 0, so that the
  // compilers know it is the same in every lane (CUTLASS's canonical_warp_group_idx, as bwd_sm90.cu): the wgmma
  // descriptors built from it then live in uniform registers. Measured on an H200 against the plain index
  // (scripts/kernel_ab.py, docs/performance.md 2026-11-28 (g)): 4% faster at the 192-row tile (D = 64, full and
  // causal), 1% slower at D = 128 and 4% slower on causal D = 64 at 128 rows, so only there.
  const int consumer = (TILE_M == 192 ? __shfl_sync(0xffffffffu, warpgroup, 0) : warpgroup) - 1;
  const int ctid = tid % 128, warp = ctid / 32, lane = tid % 32;
  const int g_lane = lane / 4, t_lane = lane % 4;
  const int tile_row = 64 * consumer + 16 * warp;  // the warp's first row inside the tile
  const int warp_row0 = row0 + tile_row;

  // descriptors at stage 0 and k step 0; a k step of Q K^T moves 32 bytes inside a 64-column block, then a block
  const unsigned long long q_desc = sw128_desc(sQ + 64 * consumer * SW128_BYTES, 16, 8 * SW128_BYTES);
  const unsigned long long k_desc = sw128_desc(sK, 16, 8 * SW128_BYTES);
  const unsigned long long v_desc = sw128_desc(sV, TILE_N * SW128_BYTES, 8 * SW128_BYTES);

  float acc_o[DB][4];
#pragma unroll
  for (int j = 0; j < DB; ++j) acc_o[j][0] = acc_o[j][1] = acc_o[j][2] = acc_o[j][3] = 0.f;
  float s[NB][4];
  unsigned p[KS][4];
  OnlineSoftmax softmax;
  softmax.init();

  auto issue_scores = [&](int stage) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const unsigned long long q_k = q_desc + sw128_k_step<TILE_M>(kk);
      const unsigned long long k_k = k_desc + ((stage * TILE) >> 4) + sw128_k_step<TILE_N>(kk);
      wgmma_ss<T, 0, 0, NB>(s, q_k, k_k, kk > 0 ? 1 : 0);
    }
    wgmma_commit();
  };
  auto issue_pv = [&](int stage) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      wgmma_rs_tnsp<T>(acc_o, p[kk], v_desc + ((stage * TILE + kk * 16 * SW128_BYTES) >> 4));
    }
    wgmma_commit();
  };
  auto release = [&](int bar) { warp_release(barrier(bar), lane); };
  // what the masks need of an entry, read before the waits so that its latency hides behind them
  struct Entry {
    int n_block;
    bool partial;
  };
  auto read_entry = [&](long long e) {
    return Entry{col_idx[e], MASK != MASK_NONE && kind[e] == KIND_PARTIAL};
  };
  // the masks of the entry in K stage `stage` (its payload staged beside it), then the stage's release, then the
  // online softmax: s becomes probabilities, rescale the factor for acc_o
  const unsigned char* payload_stages = smem + (sP - smem_raw);
  auto softmax_scores = [&](const Entry& entry, int stage, float (&rescale)[2]) {
    mask_tile_scores<MASK, TILE_M, TILE_N>(s, masks, Payload::staged(payload_stages, stage), entry.n_block,
                                           entry.partial, 0, warp_row0, tile_row, lane);
    // K_EMPTY counts one arrival per consumer thread: after a staged payload was read, one by each thread, so that
    // each thread's reads precede its own arrival (compute-sanitizer's racecheck does not credit __syncwarp with
    // ordering the lanes' reads before lane 0's: it reported the producer's next copy into the stage as a race);
    // else warp_release's 32 at once, as before (one arrival by each thread on every tile read 2-6% slower on dense
    // tiles in two H200 A/B runs, docs/performance.md)
    if (entry.partial) mbarrier_arrive(barrier(K_EMPTY + stage));
    else warp_release(barrier(K_EMPTY + stage), lane, 32);
    softmax.update(s, scale_log2, rescale);
  };
  // the S accumulators of key columns [16 kk, 16 kk + 16) are the A fragment of P for k step kk
  auto pack_probabilities = [&]() { pack_a_operand<T>(p, s); };

  // The consumers take turns issuing their products, round robin (named barriers TURN_BARRIER + consumer), so that
  // one's softmax runs while the others' products occupy the tensor cores; consumer 0 goes first, and takes the
  // last consumer's last turn back at the end.
  auto take_turn = [&]() { named_barrier_sync(TURN_BARRIER + consumer, 256); };
  auto pass_turn = [&]() { named_barrier_arrive(TURN_BARRIER + (consumer + 1) % CONSUMERS, 256); };

  // gathered tiles (a node order) are announced by cp_async_arrive, unfenced: fenced here for the products once
  // their waits (Q's included) have passed
  auto fence_gathered = [&]() {
    if constexpr (PERM) fence_proxy_async();
  };

  mbarrier_wait(barrier(Q_FULL), 0);
  if (n_entries > 0) {
    float rescale[2];
    Entry entry = read_entry(e_begin);
    if (consumer == CONSUMERS - 1) pass_turn();
    mbarrier_wait(barrier(K_FULL), 0);
    fence_gathered();
    take_turn();
    issue_scores(0);
    pass_turn();
    wgmma_wait<0>();
    pin_registers(s);
    softmax_scores(entry, 0, rescale);
    pack_probabilities();
    // Key block i. With TWO_BODIES the loop inlines this step twice, its mask test known at compile time: whole
    // tiles run a body without mask code (as the unmasked kernel's), partial ones their own. In turns against one
    // body on an H200 (scripts/kernel_ab.py, docs/performance.md (r)): 0.94x the time on causal at D = 256, 0.96 at
    // D = 192, 0.98 at 128, 0.99 on windows, documents, BigBird and shared_question (16k D = 128), 1.00 at D = 64's
    // 192-row tile; 1.015 on causal at D <= 64's 128-row (training) tile, which keeps one body, as plans with a node
    // order do (not timed; with bits at D = 192's 128 x 112 ptxas spilled 4 bytes).
    auto key_step = [&](int i, bool partial) {
      const int stage = i & 1, prev = stage ^ 1;
      // V of the block before is waited for only once S is issued, as FlashAttention-4's intra-warpgroup overlap
      // does: 2-8% faster up to D = 192 (dense D = 64 within 1%), 1% slower at 256 (H200, docs/performance.md,
      // 2026-11-28 (f))
      mbarrier_wait(barrier(K_FULL + stage), (i >> 1) & 1);
      fence_gathered();
      take_turn();
      issue_scores(stage);
      mbarrier_wait(barrier(V_FULL + prev), ((i - 1) >> 1) & 1);
      fence_gathered();
      issue_pv(prev);
      pass_turn();
      wgmma_wait<1>();
      pin_registers(s);
      softmax_scores(Entry{entry.n_block, partial}, stage, rescale);
      // At D = 256 a fence keeps the wait for P V below the softmax: without it ptxas hoists the wait to the top of
      // the softmax's basic block (to interleave the packing of P with the exponentials), and the softmax then runs
      // after P V instead of under it (read off the SASS). Measured on an H200 (scripts/kernel_ab.py, against the
      // kernel without it): 4.6% faster at D = 256; within noise at 192; 4-9% slower at D <= 128, where the fence
      // costs more than the overlap gains. A branch on the softmax's result would move the wait too, but the wait
      // must then be one instruction for the whole warpgroup (docs/performance.md).
      if constexpr (D == 256) __threadfence_block();
      wgmma_wait<0>();
      pin_registers(acc_o);
      pin_registers(p);
      release(V_EMPTY + prev);
#pragma unroll
      for (int j = 0; j < DB; ++j) {
        acc_o[j][0] *= rescale[0];
        acc_o[j][1] *= rescale[0];
        acc_o[j][2] *= rescale[1];
        acc_o[j][3] *= rescale[1];
      }
      pack_probabilities();
    };
#pragma unroll 1
    for (int i = 1; i < n_entries; ++i) {
      entry = read_entry(e_begin + i);
      if constexpr (TWO_BODIES) {
        if (entry.partial) key_step(i, true);
        else key_step(i, false);
      } else {
        key_step(i, entry.partial);
      }
    }
    const int last = (n_entries - 1) & 1;
    mbarrier_wait(barrier(V_FULL + last), ((n_entries - 1) >> 1) & 1);
    fence_gathered();
    take_turn();
    issue_pv(last);
    pass_turn();
    if (consumer == 0) take_turn();
    wgmma_wait<0>();
    pin_registers(acc_o);
    pin_registers(p);
    release(V_EMPTY + last);
  }

  // Epilogue: normalise; splits store float32 partials ([split][head group][row]) straight from registers; the whole
  // row list stages this warpgroup's rows through its own rows of sQ (swizzled as Q: conflict-free for the fragment
  // writes and the row reads; every wgmma reading them has completed) and stores 16-byte vectors.
  float inv_sum[2], row_lse[2];
  softmax.finish(scale_log2, inv_sum, row_lse);
  const int piece = split_piece(split_from);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = warp_row0 + g_lane + 8 * half;
    if (r >= rows) continue;
    if (piece >= 0) {
      const long long part_row = (long long)piece * TILE_M + tile_row + g_lane + 8 * half;
      float* part = o_part + part_row * D + 2 * t_lane;
#pragma unroll
      for (int j = 0; j < DB; ++j) {
        *reinterpret_cast<float2*>(part + 8 * j) =
            make_float2(acc_o[j][2 * half] * inv_sum[half], acc_o[j][2 * half + 1] * inv_sum[half]);
      }
      if (t_lane == 0) lse_part[part_row] = row_lse[half];
    } else if (t_lane == 0) {
      const long long token =
          PERM && pack == 1 ? o_table[tile_row + g_lane + 8 * half] : PackedRows{pack, n_q, 1, perm}(r);
      lse[((long long)b * heads + h) * n_q + token] = row_lse[half];
    }
  }
  if (piece >= 0) return;
  unsigned char* sO = smem + (sQ - smem_raw);
  store_fragments_sw128<TILE_M, T>(sO, acc_o, tile_row + g_lane, lane, inv_sum[0], inv_sum[1]);
  // row0 again, from warp_row0 through an asm the compilers cannot see through: keeping row0 itself live across the
  // key loop spilled it (8 bytes at D = 64 with interval masks)
  int o_row0;
  asm("sub.s32 %0, %1, %2;" : "=r"(o_row0) : "r"(warp_row0), "r"(tile_row));
  if (!PERM && pack == 1) {
    // a head's tokens: the warpgroup's 64 rows by the copy engine (o_map, 64-row boxes), so that the CTA does not
    // hold its SM while 256 threads issue 16-byte stores; one thread waits until the copy has read the tile
    fence_proxy_async();
    named_barrier_sync(EPILOGUE_BARRIER + consumer, 128);
    if (ctid == 0) {
      tma_store_tile<64, D>(&o_map, sQ + 64 * consumer * SW128_BYTES, TILE_M * SW128_BYTES, o_row0 + 64 * consumer,
                            h, b);
      bulk_commit();
      bulk_wait_read<0>();
    }
    return;
  }
  named_barrier_sync(EPILOGUE_BARRIER + consumer, 128);
  T* const o_head = o + b * o_sb + h * o_sh;
  if (PERM && pack == 1) {
    store_rows_sw128<TILE_M, D>(o_head, TableRows{o_table, (int)o_sn}, sO, 64 * consumer, rows - o_row0, ctid);
  } else {
    const PackedRows o_rows{pack, o_sh, o_sn, perm};
    store_rows_sw128<TILE_M, D>(o_head, [&](int r) { return o_rows(o_row0 + r); }, sO, 64 * consumer, rows - o_row0,
                                ctid);
  }
}

}  // namespace maskattn

#ifdef MASKATTN_INSTANTIATE
// Compiled alone (nvcc -c -DMASKATTN_INSTANTIATE): one configuration from the knobs above, for resource reports.
void* maskattn_fwd_sm90_instance = reinterpret_cast<void*>(
    &maskattn::fwd_sm90_kernel<maskattn::MASKATTN_DTYPE, MASKATTN_HEAD_DIM, MASKATTN_TILE_M, MASKATTN_TILE_N,
                               maskattn::MASKATTN_MASK, MASKATTN_PERM>);
#endif
