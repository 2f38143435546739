// Hopper (sm_90a) block-sparse flash-attention backward, deterministic mode: bwd.cu's bwd_dkdv_kernel and
// bwd_dq_kernel (their parameters, grids, plan traversals, masks and outputs) on wgmma.
//
// bwd_dkdv_sm90_kernel:
// Same parameters, grid and outputs as bwd_dkdv_kernel (bwd.cu) with TILE_M = TILE_N = 128: blockIdx.x = b * kv_heads
// + kv_head, blockIdx.y the key block's rank in n_order; the CTA walks the backward CSR of every query head of its
// GQA group, BM = 64 query rows a step, and reads bwd_preprocess_kernel's LSE (log2 units) and delta. Three
// warpgroups (384 threads), FlashAttention-3's backward with the products transposed:
// - warpgroup 0 produces: cp.async copies of K and V (once) and, per step, of Q, dO, LSE and delta (two stages)
//   into 128-byte-swizzled shared memory, and the step's description (rows, mask group, payload; a negative row
//   ends the walk). Each step is one cp.async group; once it has landed (waited one group behind), the copying
//   threads fence it for the async proxy and arrive on the stage's "full" mbarrier. A stage is refilled after its
//   "empty" mbarrier says both consumers are done with it.
// - warpgroups 1 and 2 consume, 64 keys each: S^T = K Q^T and dP^T = V dO^T (wgmma m64n64k16, both operands in
//   shared memory, K-major), so a warp's part of each accumulator is the m16n8 fragment of bwd_common.cuh's *_t
//   mask helpers (keys in rows, queries in columns); P^T = exp2(S^T scale_log2 - LSE) and dS^T = P^T (dP^T - delta)
//   packed to 16 bits are the register A operands of dV += P^T dO and dK += dS^T Q, with dO and Q N-major (the
//   same tiles read transposed, as fwd_sm90.cu reads V). dV's product runs under the dS^T arithmetic.
//
// Dynamic shared memory: BWD_SM90_SMEM_BYTES<D> = 1024 (alignment slack) + K and V (128 x D each) + two stages of Q
// and dO (64 x D each) + two stages of the 64 LSE and delta values + 128 (step descriptions, mbarriers).
//
// bwd_dq_sm90_kernel: one CTA per (query block, head, batch) over the forward CSR, fwd_sm90.cu's structure (three
// warpgroups, 384 threads):
// - warpgroup 0 produces: Q and dO (once), then each listed key block's K and V (two stages), wgmma.cuh's
//   produce_kv_stages.
// - warpgroups 1 and 2 consume, 64 query rows each; each reads its rows' LSE and delta once, and takes a key block
//   as two 64-key halves (m64n64 products: S, dP and the dQ accumulator stay within the register budget): S = Q K^T
//   and dP = dO V^T (both operands in shared memory, K-major; V read as K), the forward's masks, P = exp2(S
//   scale_log2 - LSE), dS = P (dP - delta) packed to 16 bits as the register A operand of dQ += dS K, with K
//   N-major (read transposed, as the forward reads V). The first half's dQ product runs under the second half's S
//   and dP; V is released after the second half's dP, K after its dQ product.
// Dynamic shared memory: BWD_DQ_SM90_SMEM_BYTES<D> = 1024 + 6 tiles of 128 x D elements (Q, dO, two K, two V) +
// 128 (mbarriers).
//
// Template knobs: T (half_t | bf16_t), D (64 or 128), MASK; the #ifndef defaults configure the instantiations of a
// standalone nvcc -DMASKATTN_INSTANTIATE build.
#include "bwd_common.cuh"
#include "common.cuh"
#include "mask.cuh"
#include "wgmma.cuh"

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

namespace maskattn {

namespace sm90_bwd {

constexpr int TILE_M = 128;
constexpr int TILE_N = 128;
constexpr int BM = 64;  // query rows per step
constexpr int THREADS = 384;
constexpr int PRODUCER_REGS = 56;   // cp.async addressing and the CSR walk (40 spills)
constexpr int CONSUMER_REGS = 224;  // dK and dV accumulators (64 + 64 at D = 128), S^T and dP^T (32 + 32)
constexpr int DQ_PRODUCER_REGS = 40;   // cp.async addressing only
constexpr int DQ_CONSUMER_REGS = 232;  // dQ accumulator (64 at D = 128), S and dP of a half (32 + 32), dS (16)
constexpr int ALIGN = 1024;         // the 128-byte swizzle repeats every 8 rows of 128 bytes

template <int D>
constexpr int KV_BYTES = TILE_N * D * 2;
template <int D>
constexpr int STEP_BYTES = BM * D * 2;
constexpr int ROW_VALUES_BYTES = 2 * 2 * BM * 4;  // LSE and delta, two stages

// mbarriers: K and V landed; a stage's step landed; a stage released by both consumers
enum Barrier { KV_FULL = 0, FULL = 1, EMPTY = 3, BARRIERS = 5 };
static_assert(2 * 16 + BARRIERS * 8 <= 128, "the step descriptions and mbarriers fit the last 128 bytes");

}  // namespace sm90_bwd

// bwd_sm90_smem_bytes in _cuda_backward.py
template <int D>
constexpr int BWD_SM90_SMEM_BYTES = sm90_bwd::ALIGN + 2 * sm90_bwd::KV_BYTES<D> + 4 * sm90_bwd::STEP_BYTES<D> +
                                    sm90_bwd::ROW_VALUES_BYTES + 128;

// bwd_dq_sm90_smem_bytes in _cuda_backward.py
template <int D>
constexpr int BWD_DQ_SM90_SMEM_BYTES = sm90_bwd::ALIGN + 6 * sm90_bwd::KV_BYTES<D> + 128;
static_assert(kv_stages::BARRIERS * 8 <= 128, "the dQ kernel's mbarriers fit the 128 bytes after the tiles");

template <typename T, int D, int MASK, bool PERM>
__global__ void __launch_bounds__(sm90_bwd::THREADS, 1) bwd_dkdv_sm90_kernel(MASKATTN_BWD_DKDV_PARAMS) {
  if constexpr (!PERM) perm = nullptr;  // no node order: the row lookups compile away (common.cuh)
  using namespace sm90_bwd;
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  using Mma = Wgmma<T>;
  constexpr int NQ = BM / 8;   // n8 fragments of S^T and dP^T per warp (query columns)
  constexpr int DB = D / 8;    // n8 fragments of dK and dV per warp
  constexpr int KS = BM / 16;  // k16 steps of P^T dO and dS^T Q
  constexpr int KV = KV_BYTES<D>, STEP = STEP_BYTES<D>;

  extern __shared__ __align__(1024) unsigned char smem[];
  const unsigned smem_raw = smem_addr(smem);
  const unsigned sK = (smem_raw + ALIGN - 1) & ~(ALIGN - 1u);
  const unsigned sV = sK + KV;
  const unsigned sQ = sV + KV;            // [2] stages
  const unsigned sdO = sQ + 2 * STEP;     // [2] stages
  const unsigned sRows = sdO + 2 * STEP;  // [2] stages of BM LSE values, then [2] of BM delta values
  const unsigned sSteps = sRows + ROW_VALUES_BYTES;  // [2] int4 step descriptions
  const unsigned bars = sSteps + 32;                 // BWD_SM90_SMEM_BYTES<D> in all
  auto barrier = [&](int id) { return bars + 8u * id; };
  auto generic = [&](unsigned addr) { return smem + (addr - smem_raw); };
  int4* steps = reinterpret_cast<int4*>(generic(sSteps));

  const int tid = threadIdx.x, warpgroup = tid / 128;
  // the CTA's batch, KV head and key block; each warpgroup computes them after its register reallocation (live
  // across it, ptxas spills them)
  struct Where {
    int b, kv_head, h_first, n_block, key0;
  };
  auto where = [&]() {
    const int b = blockIdx.x / kv_heads, kv_head = blockIdx.x % kv_heads, h_first = kv_head * heads_per_kv;
    const int n_block = n_order[(long long)(b * group_sb + h_first * group_sh) * n_nblocks + blockIdx.y];
    return Where{b, kv_head, h_first, n_block, n_block * TILE_N};
  };

  if (tid == 0) {
    mbarrier_init(barrier(KV_FULL), 128);
    for (int s = 0; s < 2; ++s) {
      mbarrier_init(barrier(FULL + s), 128);
      // every consumer thread: each read the stage (LSE, delta, the step) with ordinary loads, which a release by
      // one lane per warp orders only through __syncwarp (compute-sanitizer's racecheck does not follow that)
      mbarrier_init(barrier(EMPTY + s), 256);
    }
  }
  __syncthreads();

  if (warpgroup == 0) {
    setmaxnreg_dec<PRODUCER_REGS>();
    const Where at = where();
    const int b = at.b, kv_head = at.kv_head, h_first = at.h_first, n_block = at.n_block, key0 = at.key0;
    load_rows_sw128_async<TILE_N, D, 128>(sK, k + b * k_sb + kv_head * k_sh, TokenRows{perm, k_sn, key0}, n_k - key0,
                                          tid);
    load_rows_sw128_async<TILE_N, D, 128>(sV, v + b * v_sb + kv_head * v_sh, TokenRows{perm, v_sn, key0}, n_k - key0,
                                          tid);
    cp_async_commit();
    // the walk over (query head of the group, backward CSR entry, BM-row step of the entry's query block)
    int head = -1, group = 0, m_block = 0, step = 0, n_steps = 0;
    long long e = 0, e_end = 0;
    auto advance = [&]() -> bool {
      if (++step < n_steps) return true;
      step = 0;
      while (++e >= e_end) {
        if (++head >= heads_per_kv) return false;
        group = b * group_sb + (h_first + head) * group_sh;
        const long long* ptr = col_ptr + (long long)group * (n_nblocks + 1) + n_block;
        e = ptr[0] - 1;
        e_end = ptr[1];
      }
      m_block = row_idx[e];
      n_steps = min(TILE_M / BM, (n_q - m_block * TILE_M + BM - 1) / BM);
      return true;
    };
    // the group committed last lands, is fenced for wgmma and announced while the next one is in flight
    auto announce_previous = [&](int bar) {
      cp_async_wait<1>();
      fence_proxy_async();
      mbarrier_arrive(barrier(bar));
    };
    int* row_table = reinterpret_cast<int*>(generic(bars + 96));  // producer_rows of the query steps (perm plans)
    int pending = KV_FULL;
#pragma unroll 1
    for (int i = 0;; ++i) {
      const int stage = i & 1;
      if (i >= 2) mbarrier_wait(barrier(EMPTY + stage), ((i >> 1) & 1) ^ 1);  // the release of step i - 2
      const bool have = advance();
      if (have) {
        const int h = h_first + head;
        const int row0 = m_block * TILE_M + step * BM;
        const int* rows = producer_rows<BM>(row_table, stage, perm, row0, n_q - row0, tid);
        load_rows_sw128_async<BM, D, 128>(sQ + stage * STEP, q + b * q_sb + h * q_sh, TableRows{rows, row0, q_sn},
                                          n_q - row0, tid);
        load_rows_sw128_async<BM, D, 128>(sdO + stage * STEP, d_o + b * do_sb + h * do_sh,
                                          TableRows{rows, row0, do_sn}, n_q - row0, tid);
        // rows are padded to whole query blocks (+inf, 0), so the BM values need no bound
        const long long values = (long long)(b * heads + h) * n_q_pad + row0;
        if (tid < BM / 4) {
          cp_async_16(sRows + (stage * BM + tid * 4) * 4, lse_log2 + values + tid * 4, true);
        } else if (tid < BM / 2) {
          const int c = tid - BM / 4;
          cp_async_16(sRows + ((2 + stage) * BM + c * 4) * 4, delta + values + c * 4, true);
        }
        if (tid == 0) {
          int payload = -1;  // FULL
          if (MASK != MASK_NONE && bwd_kind[e] == KIND_PARTIAL) payload = MASK == MASK_BITS ? bwd_payload_idx[e] : 0;
          steps[stage] = make_int4(row0, step * BM, group, payload);
        }
      } else if (tid == 0) {
        steps[stage] = make_int4(-1, 0, 0, 0);
      }
      cp_async_commit();
      announce_previous(pending);
      pending = FULL + stage;
      if (!have) break;
    }
    cp_async_wait<0>();
    fence_proxy_async();
    mbarrier_arrive(barrier(pending));
    return;
  }

  setmaxnreg_inc<CONSUMER_REGS>();
  const Where at = where();
  const int b = at.b, kv_head = at.kv_head, n_block = at.n_block, key0 = at.key0;
  const int consumer = warpgroup - 1;  // keys [64 consumer, 64 consumer + 64) of the block
  const int ctid = tid % 128, warp = ctid / 32, lane = tid % 32;
  const int g_lane = lane / 4, t_lane = lane % 4;
  const int tile_key = 64 * consumer + 16 * warp + g_lane;  // this thread's keys inside the block: tile_key (+ 8)
  const int key = key0 + tile_key;
  const bool past_keys = key0 + TILE_N > n_k;

  // descriptors at stage 0 and k step 0. K-major (S^T, dP^T): a k step moves 32 bytes inside a 64-column block,
  // then a block; N-major (dV, dK: Q and dO transposed): a k step moves 16 rows, 64-column blocks BM rows apart.
  const unsigned long long k_desc = sw128_desc(sK + 64 * consumer * SW128_BYTES, 16, 8 * SW128_BYTES);
  const unsigned long long v_desc = sw128_desc(sV + 64 * consumer * SW128_BYTES, 16, 8 * SW128_BYTES);
  const unsigned long long q_desc = sw128_desc(sQ, 16, 8 * SW128_BYTES);
  const unsigned long long do_desc = sw128_desc(sdO, 16, 8 * SW128_BYTES);
  const unsigned long long qt_desc = sw128_desc(sQ, BM * SW128_BYTES, 8 * SW128_BYTES);
  const unsigned long long dot_desc = sw128_desc(sdO, BM * SW128_BYTES, 8 * SW128_BYTES);
  auto kt_step = [](int stage, int kk) { return (unsigned)(stage * STEP + kk * 16 * SW128_BYTES) >> 4; };

  float acc_dk[DB][4], acc_dv[DB][4];
#pragma unroll
  for (int j = 0; j < DB; ++j) {
#pragma unroll
    for (int c = 0; c < 4; ++c) acc_dk[j][c] = acc_dv[j][c] = 0.f;
  }
  float s[NQ][4], dp[NQ][4];
  unsigned p[KS][4], ds[KS][4];
  const float* lse_s = reinterpret_cast<const float*>(generic(sRows));
  const float* delta_s = lse_s + 2 * BM;

  mbarrier_wait(barrier(KV_FULL), 0);
#pragma unroll 1
  for (int i = 0;; ++i) {
    const int stage = i & 1;
    mbarrier_wait(barrier(FULL + stage), (i >> 1) & 1);
    const int4 here = steps[stage];
    if (here.x < 0) break;
    const int row0 = here.x, row_step = here.y, group = here.z, payload = here.w;
    const bool partial = MASK != MASK_NONE && payload >= 0;
    const int* block_minmax = interval_minmax + ((long long)group * n_nblocks + n_block) * 8;
    // interval tiles can hold BM-row steps that no key of the block sees
    if (!(MASK == MASK_INTERVALS && partial && interval_covers(block_minmax, row0, BM))) {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        Mma::ss_n64(s, k_desc + sw128_k_step<TILE_N>(kk), q_desc + ((stage * STEP) >> 4) + sw128_k_step<BM>(kk),
                    kk > 0);
      }
      wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        Mma::ss_n64(dp, v_desc + sw128_k_step<TILE_N>(kk), do_desc + ((stage * STEP) >> 4) + sw128_k_step<BM>(kk),
                    kk > 0);
      }
      wgmma_commit();
      wgmma_wait<1>();
      pin_registers(s);

      if constexpr (MASK == MASK_INTERVALS) {
        if (partial) {
          const IntervalReach reach = interval_reach(block_minmax, row0, BM);
          const int2* bounds = reinterpret_cast<const int2*>(intervals) + (long long)group * n_k * 2;
          if (reach.lower) mask_interval_t(s, bounds, key, n_k, row0 + 2 * t_lane);
          if (reach.upper) mask_interval_t(s, bounds + 1, key, n_k, row0 + 2 * t_lane);
        }
      } else if constexpr (MASK == MASK_BITS) {
        if (partial) {
          mask_bits_t<NQ, TILE_N>(s, bit_pool + (long long)payload * (TILE_M * TILE_N / 32), row_step + 2 * t_lane,
                                  tile_key);
        }
      }
      if (past_keys) mask_keys_t(s, key, n_k);

      probabilities_t(s, lse_s + stage * BM + 2 * t_lane, scale_log2);  // P^T
      wgmma_wait<0>();
      pin_registers(dp);

      score_grads_t(dp, s, delta_s + stage * BM + 2 * t_lane);  // dS^T = P^T (dP^T - delta)

      // dV += P^T dO and dK += dS^T Q (scaled in the epilogue), both A operands packed from the accumulators: the
      // float ones are dead by then, so P^T, dS^T and the two accumulators are all that the products hold
      pack_a_operand<T>(p, s);
      pack_a_operand<T>(ds, dp);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        if constexpr (D == 128) {
          Mma::rs_n128_tnsp(acc_dv, p[kk], dot_desc + kt_step(stage, kk));
        } else {
          Mma::rs_n64_tnsp(acc_dv, p[kk], dot_desc + kt_step(stage, kk));
        }
      }
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        if constexpr (D == 128) {
          Mma::rs_n128_tnsp(acc_dk, ds[kk], qt_desc + kt_step(stage, kk));
        } else {
          Mma::rs_n64_tnsp(acc_dk, ds[kk], qt_desc + kt_step(stage, kk));
        }
      }
      wgmma_commit();
      wgmma_wait<0>();
      pin_registers(acc_dv);
      pin_registers(acc_dk);
      pin_registers(p);
      pin_registers(ds);
    }
    mbarrier_arrive(barrier(EMPTY + stage));
  }

  // Epilogue: dK = scale * acc_dk and dV through this warpgroup's own rows of sK and sV (swizzled: conflict-free
  // for the fragment writes and the row reads; every wgmma reading them has completed), then 16-byte stores.
  unsigned char* sdK = generic(sK);
  unsigned char* sdV = generic(sV);
  store_fragments_sw128<TILE_N, T>(sdK, acc_dk, tile_key, lane, scale, scale);
  store_fragments_sw128<TILE_N, T>(sdV, acc_dv, tile_key, lane, 1.f, 1.f);
  named_barrier_sync(1 + consumer, 128);
  store_rows_sw128<TILE_N, D>(dk + b * dk_sb + kv_head * dk_sh, TokenRows{perm, dk_sn, key0}, sdK, 64 * consumer,
                              n_k - key0, ctid);
  store_rows_sw128<TILE_N, D>(dv + b * dv_sb + kv_head * dv_sh, TokenRows{perm, dv_sn, key0}, sdV, 64 * consumer,
                              n_k - key0, ctid);
}

template <typename T, int D, int MASK, bool PERM>
__global__ void __launch_bounds__(sm90_bwd::THREADS, 1) bwd_dq_sm90_kernel(MASKATTN_BWD_DQ_PARAMS) {
  if constexpr (!PERM) perm = nullptr;  // no node order: the row lookups compile away (common.cuh)
  using namespace sm90_bwd;
  using namespace kv_stages;
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  using Mma = Wgmma<T>;
  constexpr int HALF = TILE_N / 2;  // keys per half of a key block
  constexpr int NK = HALF / 8;      // n8 fragments of a half's S and dP per warp
  constexpr int DB = D / 8;         // n8 fragments of dQ per warp
  constexpr int KS = HALF / 16;     // k16 steps of dS K per half
  constexpr int TILE = KV_BYTES<D>;

  extern __shared__ __align__(1024) unsigned char smem[];
  const unsigned smem_raw = smem_addr(smem);
  const unsigned sQ = (smem_raw + ALIGN - 1) & ~(ALIGN - 1u);
  const unsigned sdO = sQ + TILE;
  const unsigned sK = sdO + TILE;       // [2] stages
  const unsigned sV = sK + 2 * TILE;    // [2] stages
  const unsigned bars = sV + 2 * TILE;  // BWD_DQ_SM90_SMEM_BYTES<D> in all
  auto barrier = [&](int id) { return bars + 8u * id; };

  const int tid = threadIdx.x, warpgroup = tid / 128;
  const int b = blockIdx.x / heads, h = blockIdx.x % heads;
  const int group = b * group_sb + h * group_sh;
  const int m_block = m_order[(long long)group * n_mblocks + blockIdx.y];
  const int row0 = m_block * TILE_M;
  const long long e_begin = row_ptr[(long long)group * (n_mblocks + 1) + m_block];
  const int n_entries = (int)(row_ptr[(long long)group * (n_mblocks + 1) + m_block + 1] - e_begin);

  if (tid == 0) kv_stages_init(bars);
  __syncthreads();

  if (warpgroup == 0) {
    setmaxnreg_dec<DQ_PRODUCER_REGS>();
    const int kv_head = h / heads_per_kv;
    load_rows_sw128_async<TILE_M, D, 128>(sQ, q + b * q_sb + h * q_sh, TokenRows{perm, q_sn, row0}, n_q - row0, tid);
    load_rows_sw128_async<TILE_M, D, 128>(sdO, d_o + b * do_sb + h * do_sh, TokenRows{perm, do_sn, row0}, n_q - row0,
                                          tid);
    cp_async_commit();
    produce_kv_stages<TILE_N, D>(bars, sK, sV, k + b * k_sb + kv_head * k_sh, v + b * v_sb + kv_head * v_sh, k_sn,
                                 v_sn, perm, reinterpret_cast<int*>(smem + (bars + 128 - smem_raw)), col_idx + e_begin,
                                 n_entries, n_k, tid);
    return;
  }

  setmaxnreg_inc<DQ_CONSUMER_REGS>();
  const int consumer = warpgroup - 1;  // rows [64 consumer, 64 consumer + 64) of the tile
  const int ctid = tid % 128, warp = ctid / 32, lane = tid % 32;
  const int g_lane = lane / 4;
  const int tile_row = 64 * consumer + 16 * warp;  // the warp's first row inside the tile
  const int warp_row0 = row0 + tile_row;
  // the thread's rows warp_row0 + g_lane (+ 8); rows are padded to whole query blocks (+inf, 0)
  const long long row_at = (long long)blockIdx.x * n_q_pad + warp_row0 + g_lane;
  const float lse_row[2] = {lse_log2[row_at], lse_log2[row_at + 8]};
  const float delta_row[2] = {delta[row_at], delta[row_at + 8]};

  // descriptors at stage 0, key half 0 and k step 0: K-major for S and dP (Q and dO rows of this warpgroup, K and V
  // rows of the half), N-major for dQ (K transposed: a k step moves 16 keys, 64-column blocks TILE_N rows apart)
  const unsigned long long q_desc = sw128_desc(sQ + 64 * consumer * SW128_BYTES, 16, 8 * SW128_BYTES);
  const unsigned long long do_desc = sw128_desc(sdO + 64 * consumer * SW128_BYTES, 16, 8 * SW128_BYTES);
  const unsigned long long k_desc = sw128_desc(sK, 16, 8 * SW128_BYTES);
  const unsigned long long v_desc = sw128_desc(sV, 16, 8 * SW128_BYTES);
  const unsigned long long kt_desc = sw128_desc(sK, TILE_N * SW128_BYTES, 8 * SW128_BYTES);
  const TileMasks masks{bit_pool, intervals, interval_minmax, n_k, n_nblocks};
  auto release = [&](int bar) { warp_release(barrier(bar), lane); };

  float acc_dq[DB][4];
#pragma unroll
  for (int j = 0; j < DB; ++j) acc_dq[j][0] = acc_dq[j][1] = acc_dq[j][2] = acc_dq[j][3] = 0.f;
  float s[NK][4], dp[NK][4];
  unsigned ds[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) ds[kk][0] = ds[kk][1] = ds[kk][2] = ds[kk][3] = 0u;

  mbarrier_wait(barrier(Q_FULL), 0);
#pragma unroll 1
  for (int i = 0; i < n_entries; ++i) {
    const int stage = i & 1;
    const long long e = e_begin + i;
    const int n_block = col_idx[e];
    const bool partial = MASK != MASK_NONE && kind[e] == KIND_PARTIAL;
    const int payload = MASK == MASK_BITS && partial ? payload_idx[e] : 0;
    mbarrier_wait(barrier(K_FULL + stage), (i >> 1) & 1);
    mbarrier_wait(barrier(V_FULL + stage), (i >> 1) & 1);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const unsigned kv_half = (stage * TILE + half * HALF * SW128_BYTES) >> 4;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        Mma::ss_n64(s, q_desc + sw128_k_step<TILE_M>(kk), k_desc + kv_half + sw128_k_step<TILE_N>(kk), kk > 0);
      }
      wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        Mma::ss_n64(dp, do_desc + sw128_k_step<TILE_M>(kk), v_desc + kv_half + sw128_k_step<TILE_N>(kk), kk > 0);
      }
      wgmma_commit();
      // S and the previous half's dQ product (it read ds) have completed
      wgmma_wait<1>();
      pin_registers(s);
      pin_registers(ds);

      mask_tile_scores<MASK, TILE_M, TILE_N>(s, masks, group, n_block, partial, payload, half * HALF, warp_row0,
                                             tile_row, lane);
      probabilities(s, lse_row, scale_log2);
      wgmma_wait<0>();
      pin_registers(dp);
      if (half == 1) release(V_EMPTY + stage);

      // dS = P (dP - delta), then dQ += dS K (scaled in the epilogue)
      score_grads(dp, s, delta_row);
      pack_a_operand<T>(ds, dp);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        const unsigned long long desc = kt_desc + kv_half + ((kk * 16 * SW128_BYTES) >> 4);
        if constexpr (D == 128) {
          Mma::rs_n128_tnsp(acc_dq, ds[kk], desc);
        } else {
          Mma::rs_n64_tnsp(acc_dq, ds[kk], desc);
        }
      }
      wgmma_commit();
    }
    wgmma_wait<0>();
    pin_registers(acc_dq);
    pin_registers(ds);
    release(K_EMPTY + stage);
  }

  // Epilogue: dQ = scale * acc_dq through this warpgroup's own rows of sQ (every wgmma reading them has completed),
  // then 16-byte stores.
  unsigned char* sdQ = smem + (sQ - smem_raw);
  store_fragments_sw128<TILE_M, T>(sdQ, acc_dq, tile_row + g_lane, lane, scale, scale);
  named_barrier_sync(1 + consumer, 128);
  store_rows_sw128<TILE_M, D>(dq + b * dq_sb + h * dq_sh, TokenRows{perm, dq_sn, row0}, sdQ,
                              64 * consumer, n_q - row0, ctid);
}

}  // namespace maskattn

#ifdef MASKATTN_INSTANTIATE
// Compiled alone (nvcc -c -DMASKATTN_INSTANTIATE): both kernels of the configuration the knobs above name, for
// resource reports.
void* maskattn_bwd_sm90_instances[] = {
    reinterpret_cast<void*>(
        &maskattn::bwd_dkdv_sm90_kernel<maskattn::MASKATTN_DTYPE, MASKATTN_HEAD_DIM, maskattn::MASKATTN_MASK,
                                        MASKATTN_PERM>),
    reinterpret_cast<void*>(
        &maskattn::bwd_dq_sm90_kernel<maskattn::MASKATTN_DTYPE, MASKATTN_HEAD_DIM, maskattn::MASKATTN_MASK,
                                      MASKATTN_PERM>),
};
#endif
