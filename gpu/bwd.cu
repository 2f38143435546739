// Block-sparse flash-attention backward: dQ, dK, dV over the tiles a BlockMask lists, probabilities recomputed from
// the forward's LSE.
//
// Five kernels, launched in this order by maskattn.backends.cuda.bwd; the first two also run before bwd_sm90.cu's one
// pass, and the first only there:
//   bwd_kv_bound_kernel    for bwd_sm90.cu's fixed-point dQ: max |K| and max ||V_j|| per batch and KV head.
//   bwd_preprocess_kernel  delta = rowsum(dO * O) and the LSE in log2 units (+inf on rows that see no key, so their
//                          probabilities come out 0), both float32 over rows padded to whole query blocks; for
//                          bwd_sm90.cu's fixed-point dQ also each row's exponent, from the bound of K and V.
//   bwd_dkdv_kernel        FlashMask's column-parallel pass: one CTA per (key block, KV head, batch) walks the
//                          plan's backward CSR for every query head of its GQA group, so dK and dV are summed in
//                          registers without atomics. Warp w owns the 16 keys 16 (w % (TILE_N / 16)) of the block and
//                          computes S^T = K Q^T, so P^T and dS^T come straight out of the accumulators as the A
//                          operands of dV += P^T dO and dK += dS^T Q. Query blocks are visited BM rows at a time,
//                          Q, dO, LSE and delta double-buffered with cp.async. Head dims over 128 split dK and dV by
//                          columns over DSPLIT warps per 16 keys (each recomputes S^T and dP^T). With ATOMIC_DQ the
//                          CTA also stages dS^T in shared memory and adds dS K into a float32 dQ accumulator.
//   bwd_dq_kernel          the deterministic dQ: one CTA per (query block, head, batch) over the forward CSR, as the
//                          forward kernel, recomputing S and dP; each warp owns 16 query rows; key blocks are visited
//                          BN keys at a time.
//   bwd_dq_convert_kernel  dQ = scale * accumulator, in the input dtype (ATOMIC_DQ only).
//
// Template knobs (the Python side names them in name_expressions): T, D, TILE_M, TILE_N (the plan's tile), MASK,
// BM (query rows per dK/dV step), DSPLIT, BN (keys per dQ step), ATOMIC_DQ; maskattn._cuda_backward.bwd_config
// chooses them, and the defaults below mirror it. The #ifndef defaults configure the
// instantiations nvcc builds when this file is compiled alone with -DMASKATTN_INSTANTIATE.
#include "bwd_common.cuh"
#include "common.cuh"
#include "mask.cuh"

#ifndef MASKATTN_DTYPE
#define MASKATTN_DTYPE half_t
#endif
#ifndef MASKATTN_HEAD_DIM
#define MASKATTN_HEAD_DIM 128
#endif
#ifndef MASKATTN_TILE_M
#define MASKATTN_TILE_M 128
#endif
#ifndef MASKATTN_TILE_N
#define MASKATTN_TILE_N 128
#endif
#ifndef MASKATTN_MASK
#define MASKATTN_MASK MASK_NONE
#endif
#ifndef MASKATTN_PERM
#define MASKATTN_PERM false
#endif
#ifndef MASKATTN_BWD_BM
#define MASKATTN_BWD_BM 64
#endif
#ifndef MASKATTN_BWD_BM_ATOMIC
#define MASKATTN_BWD_BM_ATOMIC (MASKATTN_HEAD_DIM >= 128 ? 32 : MASKATTN_BWD_BM)
#endif
#ifndef MASKATTN_BWD_DSPLIT
#define MASKATTN_BWD_DSPLIT (MASKATTN_HEAD_DIM > 128 ? 2 : 1)
#endif
#ifndef MASKATTN_BWD_BN
#define MASKATTN_BWD_BN (MASKATTN_HEAD_DIM > 192 ? 32 : 64)
#endif

namespace maskattn {

constexpr int PRE_THREADS = 256;
constexpr int PRE_ROWS = PRE_THREADS / 4;  // four threads per row

// f(x0, x1, y0, y1) over this thread's part (of four) of two D-element rows, in pairs: the thread reads 16 bytes of
// each row at chunks part, part + 4, ... of 8 elements.
template <typename T, int D, typename F>
__device__ __forceinline__ void for_row_pairs(const T* x_row, const T* y_row, int part, F&& f) {
  static_assert(D % 32 == 0, "four threads of 16-byte chunks per row");
#pragma unroll
  for (int i = 0; i < D / 32; ++i) {
    const int c = (part + 4 * i) * 8;
    const uint4 x = *reinterpret_cast<const uint4*>(x_row + c);
    const uint4 y = *reinterpret_cast<const uint4*>(y_row + c);
    const unsigned xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      float x0, x1, y0, y1;
      Unpack<T>::to_float2(xs[w], x0, x1);
      Unpack<T>::to_float2(ys[w], y0, y1);
      f(x0, x1, y0, y1);
    }
  }
}

// grid (ceil(n_k / PRE_ROWS), B * kv_heads): kv_bound[2 (b * kv_heads + h)] = max |K[b, h, j, d]| and [+ 1] = max
// ||V[b, h, j]||, over the head's keys, as float bits (the fixed-point dQ's bound, dq_fixed_exponent). kv_bound is
// zeroed before: atomicMax on the bits of non-negative floats orders them as floats.
template <typename T, int D>
__global__ void __launch_bounds__(PRE_THREADS) bwd_kv_bound_kernel(
    const T* __restrict__ k, const T* __restrict__ v, int* __restrict__ kv_bound, long long k_sb, long long k_sh,
    long long k_sn, long long v_sb, long long v_sh, long long v_sn, int kv_heads, int n_k) {
  const int bh = blockIdx.y, b = bh / kv_heads, h = bh % kv_heads;
  const int row = blockIdx.x * PRE_ROWS + threadIdx.x / 4, part = threadIdx.x % 4;
  float k_max = 0.f, v_sq = 0.f;
  if (row < n_k) {
    for_row_pairs<T, D>(k + b * k_sb + h * k_sh + row * k_sn, v + b * v_sb + h * v_sh + row * v_sn, part,
                        [&](float x0, float x1, float y0, float y1) {
                          k_max = fmaxf(k_max, fmaxf(fabsf(x0), fabsf(x1)));
                          v_sq = fmaf(y0, y0, fmaf(y1, y1, v_sq));
                        });
  }
  v_sq += __shfl_xor_sync(0xffffffffu, v_sq, 1);
  v_sq += __shfl_xor_sync(0xffffffffu, v_sq, 2);
  float v_norm = sqrtf(v_sq);
#pragma unroll
  for (int lanes = 16; lanes >= 1; lanes /= 2) {
    k_max = fmaxf(k_max, __shfl_xor_sync(0xffffffffu, k_max, lanes));
    v_norm = fmaxf(v_norm, __shfl_xor_sync(0xffffffffu, v_norm, lanes));
  }
  if (threadIdx.x % 32 == 0) {
    atomicMax(kv_bound + 2 * bh, __float_as_int(k_max));
    atomicMax(kv_bound + 2 * bh + 1, __float_as_int(v_norm));
  }
}

// grid (ceil(n_q_pad / PRE_ROWS), B * H). lse_log2 and delta are (B * H, n_q_pad); rows >= n_q get +inf and 0. With
// kv_bound (bwd_kv_bound_kernel's), also dq_exp (B * H, n_q_pad): the fixed-point dQ's exponent of each row
// (dq_fixed_exponent), 0 for rows >= n_q.
template <typename T, int D>
__global__ void __launch_bounds__(PRE_THREADS) bwd_preprocess_kernel(
    const T* __restrict__ d_o, const T* __restrict__ o, const float* __restrict__ lse, float* __restrict__ lse_log2,
    float* __restrict__ delta, const float* __restrict__ kv_bound, signed char* __restrict__ dq_exp, long long do_sb,
    long long do_sh, long long do_sn, long long o_sb, long long o_sh, long long o_sn, long long lse_sb,
    long long lse_sh, long long lse_sn, int heads, int heads_per_kv, int n_q, int n_q_pad,
    const int* __restrict__ perm) {
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const int row = blockIdx.x * PRE_ROWS + threadIdx.x / 4, part = threadIdx.x % 4;
  // lse_log2 and delta are in the plan's row order; do, o and lse in the caller's
  const long long token = row < n_q ? caller_token(perm, row) : 0;
  float sum = 0.f, sq = 0.f;  // dO . O and ||dO||^2
  if (row < n_q) {
    for_row_pairs<T, D>(d_o + b * do_sb + h * do_sh + token * do_sn, o + b * o_sb + h * o_sh + token * o_sn, part,
                        [&](float x0, float x1, float y0, float y1) {
                          sum = fmaf(x0, y0, fmaf(x1, y1, sum));
                          sq = fmaf(x0, x0, fmaf(x1, x1, sq));
                        });
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  sq += __shfl_xor_sync(0xffffffffu, sq, 1);
  sq += __shfl_xor_sync(0xffffffffu, sq, 2);
  if (part == 0 && row < n_q_pad) {
    const long long at = (long long)bh * n_q_pad + row;
    float l = pos_inf();
    if (row < n_q) {
      const float natural = lse[b * lse_sb + h * lse_sh + token * lse_sn];
      l = natural == neg_inf() ? pos_inf() : natural * LOG2E;
    }
    lse_log2[at] = l;
    delta[at] = row < n_q ? sum : 0.f;
    if (kv_bound) {
      const float* bound = kv_bound + 2 * (b * (heads / heads_per_kv) + h / heads_per_kv);
      dq_exp[at] = row < n_q ? dq_fixed_exponent(bound[0], bound[1], sqrtf(sq), sum) : 0;
    }
  }
}

// Which query rows a dK/dV CTA visits next: the (head of the KV group, backward CSR entry, BM-row step) sequence.
// Every thread walks it alike; advance() returns false past the end.
struct ColumnWalk {
  int head;           // index inside the KV group, -1 before the start
  int group;          // mask group of that head
  long long e, e_end; // backward CSR entry of the current query block, and the head's end
  int m_block, step, steps;
};

template <typename T, int D, int TILE_M, int TILE_N, int MASK, int BM, int DSPLIT, bool ATOMIC_DQ, bool PERM>
__global__ void __launch_bounds__(TILE_N / 16 * DSPLIT * 32, 1) bwd_dkdv_kernel(MASKATTN_BWD_DKDV_PARAMS) {
  if constexpr (!PERM) perm = nullptr;  // no node order: the row lookups compile away (common.cuh)
  static_assert(TILE_M % BM == 0 && BM % 16 == 0 && TILE_N % 16 == 0, "steps of 16-row fragments");
  static_assert(D % (16 * DSPLIT) == 0 && D % 32 == 0, "head dim splits into 16-column fragments");
  using Ops = Dtype<T>;
  constexpr int KGROUPS = TILE_N / 16;  // warps along the keys
  constexpr int THREADS = KGROUPS * DSPLIT * 32;
  constexpr int STRIDE = SMEM_STRIDE<D>;
  constexpr int DW = D / DSPLIT;  // dK, dV columns of one warp
  constexpr int NQ = BM / 8;      // n8 fragments of S^T (query columns)
  constexpr int STEPS = TILE_M / BM;
  constexpr int DS_STRIDE = BM + 8;

  // dynamic shared memory: K, V (TILE_N rows each), two stages of Q and dO (BM rows each), two stages of the BM
  // LSE and delta values, then (ATOMIC_DQ) dS^T as TILE_N rows of DS_STRIDE elements
  extern __shared__ __align__(16) unsigned char smem[];
  T* sK = reinterpret_cast<T*>(smem);
  T* sV = sK + TILE_N * STRIDE;
  T* sQ = sV + TILE_N * STRIDE;     // [2][BM][STRIDE]
  T* sdO = sQ + 2 * BM * STRIDE;    // [2][BM][STRIDE]
  float* sLse = reinterpret_cast<float*>(sdO + 2 * BM * STRIDE);  // [2][BM]
  float* sDelta = sLse + 2 * BM;                                  // [2][BM]
  T* sdS = reinterpret_cast<T*>(sDelta + 2 * BM);                 // [TILE_N][DS_STRIDE]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g_lane = lane / 4, t_lane = lane % 4;
  const int kgroup = warp % KGROUPS, dpart = warp / KGROUPS;
  const PlanCta cta_of = backward_cta(n_levels);
  const int b = cta_of.head_group / kv_heads, kv_head = cta_of.head_group % kv_heads;
  const int h_first = kv_head * heads_per_kv;
  const int n_block = n_order[(long long)(b * group_sb + h_first * group_sh) * n_nblocks + cta_of.rank];
  const int key0 = n_block * TILE_N;
  const int key = key0 + kgroup * 16 + g_lane;  // this thread's keys: key, key + 8
  const bool past_keys = key0 + TILE_N > n_k;

  load_rows_async<TILE_N, D, THREADS>(sK, k + b * k_sb + kv_head * k_sh, TokenRows{perm, k_sn, key0}, n_k - key0, tid);
  load_rows_async<TILE_N, D, THREADS>(sV, v + b * v_sb + kv_head * v_sh, TokenRows{perm, v_sn, key0}, n_k - key0, tid);
  cp_async_commit();

  auto advance = [&](ColumnWalk& w) -> bool {
    if (++w.step < w.steps) return true;
    w.step = 0;
    while (++w.e >= w.e_end) {
      if (++w.head >= heads_per_kv) return false;
      w.group = b * group_sb + (h_first + w.head) * group_sh;
      const long long* ptr = col_ptr + (long long)w.group * (n_nblocks + 1) + n_block;
      w.e = ptr[0] - 1;
      w.e_end = ptr[1];
    }
    w.m_block = row_idx[w.e];
    const int rows_left = n_q - w.m_block * TILE_M;
    w.steps = min(STEPS, (rows_left + BM - 1) / BM);
    return true;
  };

  auto load_step = [&](const ColumnWalk& w, int stage) {
    const int h = h_first + w.head;
    const int row0 = w.m_block * TILE_M + w.step * BM;
    load_rows_async<BM, D, THREADS>(sQ + stage * BM * STRIDE, q + b * q_sb + h * q_sh, TokenRows{perm, q_sn, row0},
                                    n_q - row0, tid);
    load_rows_async<BM, D, THREADS>(sdO + stage * BM * STRIDE, d_o + b * do_sb + h * do_sh,
                                    TokenRows{perm, do_sn, row0}, n_q - row0, tid);
    // rows are padded to whole query blocks (+inf, 0), so the BM values need no bound
    const long long at = (long long)(b * heads + h) * n_q_pad + row0;
    if (tid < BM / 4) {
      cp_async_16(smem_addr(sLse + stage * BM) + tid * 16, lse_log2 + at + tid * 4, true);
    } else if (tid < BM / 2) {
      cp_async_16(smem_addr(sDelta + stage * BM) + (tid - BM / 4) * 16, delta + at + (tid - BM / 4) * 4, true);
    }
  };

  // per-lane ldmatrix offsets (elements): A from the warp's 16 rows of K or V; B from rows of Q or dO (for S^T and
  // dP^T); B from Q or dO transposed (for dK and dV)
  const int a_lane = (kgroup * 16 + (lane & 15)) * STRIDE + (lane >> 4) * 8;
  const int b_lane = ((lane & 7) + (lane >> 4) * 8) * STRIDE + ((lane >> 3) & 1) * 8;
  const int bt_lane = ((lane & 7) + ((lane >> 3) & 1) * 8) * STRIDE + (lane >> 4) * 8;
  const unsigned sK_a = smem_addr(sK) + a_lane * 2, sV_a = smem_addr(sV) + a_lane * 2;

  float acc_dk[DW / 8][4], acc_dv[DW / 8][4];
#pragma unroll
  for (int j = 0; j < DW / 8; ++j) {
#pragma unroll
    for (int c = 0; c < 4; ++c) acc_dk[j][c] = acc_dv[j][c] = 0.f;
  }

  // The walk lives in shared memory between steps (two slots, by stage) so that only the current step's row, entry
  // and head stay in registers through the arithmetic; thread 0 writes each slot.
  __shared__ ColumnWalk walks[2];
  ColumnWalk w{-1, 0, 0, 0, 0, 0, 0};
  bool have = advance(w);
  if (have) load_step(w, 0);
  cp_async_commit();
  if (tid == 0) walks[0] = w;
  __syncthreads();
  int stage = 0;

  while (have) {
    w = walks[stage];
    const int row0 = w.m_block * TILE_M + w.step * BM;
    const int row_step = w.step * BM, group = w.group;
    const long long e = w.e;
    const bool have_next = advance(w);
    if (have_next) load_step(w, stage ^ 1);
    cp_async_commit();
    if (tid == 0) walks[stage ^ 1] = w;
    cp_async_wait<1>();
    __syncthreads();

    const bool partial = MASK != MASK_NONE && bwd_kind[e] == KIND_PARTIAL;
    const int* block_minmax = interval_minmax + ((long long)group * n_nblocks + n_block) * 8;
    // interval tiles can hold BM-row steps that no key of the block sees
    const bool skip = MASK == MASK_INTERVALS && partial && interval_covers(block_minmax, row0, BM);
    if (!skip) {
      const unsigned sQ_s = smem_addr(sQ + stage * BM * STRIDE), sdO_s = smem_addr(sdO + stage * BM * STRIDE);
      const float* lse_s = sLse + stage * BM;
      const float* delta_s = sDelta + stage * BM;

      // S^T = K Q^T
      float s[NQ][4];
#pragma unroll
      for (int j = 0; j < NQ; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        unsigned a[4];
        ldmatrix_x4(a, sK_a + kk * 32);
#pragma unroll
        for (int nb = 0; nb < BM / 16; ++nb) {
          unsigned b_frag[4];
          ldmatrix_x4(b_frag, sQ_s + (b_lane + nb * 16 * STRIDE + kk * 16) * 2);
          Ops::mma(s[2 * nb], a, b_frag[0], b_frag[1]);
          Ops::mma(s[2 * nb + 1], a, b_frag[2], b_frag[3]);
        }
      }

      if constexpr (MASK == MASK_INTERVALS) {
        if (partial) {
          const IntervalReach reach = interval_reach(block_minmax, row0, BM);
          const int2* bounds = reinterpret_cast<const int2*>(intervals) + (long long)group * n_k * 2;
          if (reach.lower) mask_interval_t(s, bounds, key, n_k, row0 + 2 * t_lane);
          if (reach.upper) mask_interval_t(s, bounds + 1, key, n_k, row0 + 2 * t_lane);
        }
      } else if constexpr (MASK == MASK_BITS) {
        if (partial) {
          mask_bits_t<NQ, TILE_N>(s, bit_pool + (long long)bwd_payload_idx[e] * (TILE_M * TILE_N / 32),
                                  row_step + 2 * t_lane, kgroup * 16 + g_lane);
        }
      }
      if (past_keys) mask_keys_t(s, key, n_k);

      probabilities_t(s, ColumnValues{lse_s + 2 * t_lane}, scale_log2);  // P^T

      // dV += P^T dO
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        const unsigned p[4] = {Ops::pack(s[2 * kk][0], s[2 * kk][1]), Ops::pack(s[2 * kk][2], s[2 * kk][3]),
                               Ops::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               Ops::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int db = 0; db < DW / 16; ++db) {
          unsigned b_frag[4];
          ldmatrix_x4_trans(b_frag, sdO_s + (bt_lane + kk * 16 * STRIDE + dpart * DW + db * 16) * 2);
          Ops::mma(acc_dv[2 * db], p, b_frag[0], b_frag[1]);
          Ops::mma(acc_dv[2 * db + 1], p, b_frag[2], b_frag[3]);
        }
      }

      // dP^T = V dO^T
      float ds[NQ][4];
#pragma unroll
      for (int j = 0; j < NQ; ++j) ds[j][0] = ds[j][1] = ds[j][2] = ds[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        unsigned a[4];
        ldmatrix_x4(a, sV_a + kk * 32);
#pragma unroll
        for (int nb = 0; nb < BM / 16; ++nb) {
          unsigned b_frag[4];
          ldmatrix_x4(b_frag, sdO_s + (b_lane + nb * 16 * STRIDE + kk * 16) * 2);
          Ops::mma(ds[2 * nb], a, b_frag[0], b_frag[1]);
          Ops::mma(ds[2 * nb + 1], a, b_frag[2], b_frag[3]);
        }
      }

      score_grads_t(ds, s, ColumnValues{delta_s + 2 * t_lane});  // dS^T = P^T (dP^T - delta)

      // dK += dS^T Q (scaled in the epilogue)
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        const unsigned a[4] = {Ops::pack(ds[2 * kk][0], ds[2 * kk][1]), Ops::pack(ds[2 * kk][2], ds[2 * kk][3]),
                               Ops::pack(ds[2 * kk + 1][0], ds[2 * kk + 1][1]),
                               Ops::pack(ds[2 * kk + 1][2], ds[2 * kk + 1][3])};
#pragma unroll
        for (int db = 0; db < DW / 16; ++db) {
          unsigned b_frag[4];
          ldmatrix_x4_trans(b_frag, sQ_s + (bt_lane + kk * 16 * STRIDE + dpart * DW + db * 16) * 2);
          Ops::mma(acc_dk[2 * db], a, b_frag[0], b_frag[1]);
          Ops::mma(acc_dk[2 * db + 1], a, b_frag[2], b_frag[3]);
        }
      }

      if constexpr (ATOMIC_DQ) {
        // dQ (BM x D) += dS K: dS^T goes to shared memory, then the warps split the product in 16 x 32 pieces
        if (dpart == 0) {
#pragma unroll
          for (int j = 0; j < NQ; ++j) {
            T* top = sdS + (kgroup * 16 + g_lane) * DS_STRIDE + 8 * j + 2 * t_lane;
            *reinterpret_cast<unsigned*>(top) = Ops::pack(ds[j][0], ds[j][1]);
            *reinterpret_cast<unsigned*>(top + 8 * DS_STRIDE) = Ops::pack(ds[j][2], ds[j][3]);
          }
        }
        __syncthreads();
        constexpr int PIECES = BM / 16 * (D / 32);
        const unsigned sdS_a = smem_addr(sdS) + (((lane & 7) + ((lane >> 4) & 1) * 8) * DS_STRIDE +
                                                 ((lane >> 3) & 1) * 8) * 2;
        const unsigned sK_bt = smem_addr(sK) + bt_lane * 2;
        // the head and rows come back from the walk's slot: registers are scarcest here
        const ColumnWalk& here = walks[stage];
        const int h = h_first + here.head;
        const int q_row0 = here.m_block * TILE_M + here.step * BM;
#pragma unroll 1
        for (int piece = warp; piece < PIECES; piece += THREADS / 32) {
          const int mb = piece % (BM / 16), dc = piece / (BM / 16);
          float acc[4][4];
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll
          for (int kk = 0; kk < TILE_N / 16; ++kk) {
            unsigned a[4];
            ldmatrix_x4_trans(a, sdS_a + (kk * 16 * DS_STRIDE + mb * 16) * 2);
#pragma unroll
            for (int db = 0; db < 2; ++db) {
              unsigned b_frag[4];
              ldmatrix_x4_trans(b_frag, sK_bt + (kk * 16 * STRIDE + dc * 32 + db * 16) * 2);
              Ops::mma(acc[2 * db], a, b_frag[0], b_frag[1]);
              Ops::mma(acc[2 * db + 1], a, b_frag[2], b_frag[3]);
            }
          }
          float* dst = dq_accum + ((long long)(b * heads + h) * n_q_pad + q_row0 + mb * 16 + g_lane) * D + dc * 32 +
                       2 * t_lane;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            red_add_f32x2(dst + 8 * j, acc[j][0], acc[j][1]);
            red_add_f32x2(dst + 8 * D + 8 * j, acc[j][2], acc[j][3]);
          }
        }
      }
    }
    __syncthreads();  // this stage (and dS^T) is rewritten by the next iteration
    have = have_next;
    stage ^= 1;
  }

  // Epilogue: dK = scale * acc_dk and dV through the warp's own rows of sK and sV, then 16-byte stores.
  cp_async_wait<0>();
  __syncthreads();
  T* sdK = sK + kgroup * 16 * STRIDE + dpart * DW;
  T* sdV = sV + kgroup * 16 * STRIDE + dpart * DW;
#pragma unroll
  for (int j = 0; j < DW / 8; ++j) {
    const int at = g_lane * STRIDE + 8 * j + 2 * t_lane;
    *reinterpret_cast<unsigned*>(sdK + at) = Ops::pack(acc_dk[j][0] * scale, acc_dk[j][1] * scale);
    *reinterpret_cast<unsigned*>(sdK + at + 8 * STRIDE) = Ops::pack(acc_dk[j][2] * scale, acc_dk[j][3] * scale);
    *reinterpret_cast<unsigned*>(sdV + at) = Ops::pack(acc_dv[j][0], acc_dv[j][1]);
    *reinterpret_cast<unsigned*>(sdV + at + 8 * STRIDE) = Ops::pack(acc_dv[j][2], acc_dv[j][3]);
  }
  __syncwarp();
  T* gdK = dk + b * dk_sb + kv_head * dk_sh + dpart * DW;
  T* gdV = dv + b * dv_sb + kv_head * dv_sh + dpart * DW;
  constexpr int CHUNKS = DW / 8;
#pragma unroll
  for (int i = 0; i < 16 * CHUNKS / 32; ++i) {
    const int idx = lane + 32 * i;
    const int r = idx / CHUNKS, c = idx % CHUNKS;
    const int key_r = key0 + kgroup * 16 + r;
    if (key_r < n_k) {
      const long long token = caller_token(perm, key_r);
      *reinterpret_cast<uint4*>(gdK + token * dk_sn + c * 8) =
          *reinterpret_cast<const uint4*>(sdK + r * STRIDE + c * 8);
      *reinterpret_cast<uint4*>(gdV + token * dv_sn + c * 8) =
          *reinterpret_cast<const uint4*>(sdV + r * STRIDE + c * 8);
    }
  }
}

template <typename T, int D, int TILE_M, int TILE_N, int MASK, int BN, bool PERM>
__global__ void __launch_bounds__(TILE_M * 2, 1) bwd_dq_kernel(MASKATTN_BWD_DQ_PARAMS) {
  if constexpr (!PERM) perm = nullptr;  // no node order: the row lookups compile away (common.cuh)
  static_assert(TILE_N % BN == 0 && BN % 32 == 0 && D % 16 == 0, "key steps of whole bit words");
  using Ops = Dtype<T>;
  constexpr int THREADS = TILE_M * 2;  // one warp per 16 query rows
  constexpr int STRIDE = SMEM_STRIDE<D>;
  constexpr int NB = BN / 8;  // n8 fragments of S per warp
  constexpr int DB = D / 8;   // n8 fragments of dQ per warp
  constexpr int KSTEPS = TILE_N / BN;
  constexpr int KV_ELEMS = BN * STRIDE;

  // dynamic shared memory: Q, dO (TILE_M rows each), then two stages of K and V (BN rows each)
  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sdO = sQ + TILE_M * STRIDE;
  T* sK = sdO + TILE_M * STRIDE;  // [2][BN][STRIDE]
  T* sV = sK + 2 * KV_ELEMS;      // [2][BN][STRIDE]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g_lane = lane / 4, t_lane = lane % 4;
  const PlanCta cta_of = backward_cta(m_levels);
  const int b = cta_of.head_group / heads, h = cta_of.head_group % heads;
  const int group = b * group_sb + h * group_sh;
  const int m_block = m_order[(long long)group * n_mblocks + cta_of.rank];
  const int row0 = m_block * TILE_M;
  const int warp_row0 = row0 + warp * 16;
  const bool warp_active = warp_row0 < n_q;

  const int kv_head = h / heads_per_kv;
  const T* gK = k + b * k_sb + kv_head * k_sh;
  const T* gV = v + b * v_sb + kv_head * v_sh;
  const long long e_begin = row_ptr[(long long)group * (n_mblocks + 1) + m_block];
  const long long e_end = row_ptr[(long long)group * (n_mblocks + 1) + m_block + 1];

  load_rows_async<TILE_M, D, THREADS>(sQ, q + b * q_sb + h * q_sh, TokenRows{perm, q_sn, row0}, n_q - row0, tid);
  load_rows_async<TILE_M, D, THREADS>(sdO, d_o + b * do_sb + h * do_sh, TokenRows{perm, do_sn, row0}, n_q - row0,
                                      tid);
  cp_async_commit();

  // the thread's rows warp_row0 + g_lane (+ 8); rows are padded to whole query blocks
  const long long row_at = (long long)cta_of.head_group * n_q_pad + warp_row0 + g_lane;
  const float lse_row[2] = {lse_log2[row_at], lse_log2[row_at + 8]};
  const float delta_row[2] = {delta[row_at], delta[row_at + 8]};

  // the walk over (forward CSR entry, BN-key step)
  long long e = e_begin;
  int n_block = e < e_end ? col_idx[e] : 0;
  int kstep = 0;
  auto ksteps = [&](int nb) { return min(KSTEPS, (n_k - nb * TILE_N + BN - 1) / BN); };
  auto load_kv = [&](int nb, int ks, int stage) {
    const int key_lo = nb * TILE_N + ks * BN;
    load_rows_async<BN, D, THREADS>(sK + stage * KV_ELEMS, gK, TokenRows{perm, k_sn, key_lo}, n_k - key_lo, tid);
    load_rows_async<BN, D, THREADS>(sV + stage * KV_ELEMS, gV, TokenRows{perm, v_sn, key_lo}, n_k - key_lo, tid);
  };
  if (e < e_end) load_kv(n_block, 0, 0);
  cp_async_commit();

  const int q_lane = (warp * 16 + (lane & 15)) * STRIDE + (lane >> 4) * 8;
  const int k_lane = ((lane & 7) + (lane >> 4) * 8) * STRIDE + ((lane >> 3) & 1) * 8;
  const int v_lane = ((lane & 7) + ((lane >> 3) & 1) * 8) * STRIDE + (lane >> 4) * 8;
  const unsigned sQ_a = smem_addr(sQ) + q_lane * 2, sdO_a = smem_addr(sdO) + q_lane * 2;

  float acc_dq[DB][4];
#pragma unroll
  for (int j = 0; j < DB; ++j) acc_dq[j][0] = acc_dq[j][1] = acc_dq[j][2] = acc_dq[j][3] = 0.f;

  int stage = 0;
  while (e < e_end) {
    // the next step: the next BN keys of this block, or the first of the next entry
    long long e_next = e;
    int nb_next = n_block, ks_next = kstep + 1;
    if (ks_next >= ksteps(n_block)) {
      ++e_next;
      ks_next = 0;
      nb_next = e_next < e_end ? col_idx[e_next] : 0;
    }
    if (e_next < e_end) load_kv(nb_next, ks_next, stage ^ 1);
    cp_async_commit();
    const bool partial = MASK != MASK_NONE && kind[e] == KIND_PARTIAL;
    cp_async_wait<1>();
    __syncthreads();

    if (warp_active) {
      const unsigned sK_s = smem_addr(sK + stage * KV_ELEMS), sV_s = smem_addr(sV + stage * KV_ELEMS);
      const int key_lo = n_block * TILE_N + kstep * BN;

      // S = Q K^T
      float s[NB][4];
#pragma unroll
      for (int j = 0; j < NB; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        unsigned a[4];
        ldmatrix_x4(a, sQ_a + kk * 32);
#pragma unroll
        for (int nb = 0; nb < BN / 16; ++nb) {
          unsigned b_frag[4];
          ldmatrix_x4(b_frag, sK_s + (k_lane + nb * 16 * STRIDE + kk * 16) * 2);
          Ops::mma(s[2 * nb], a, b_frag[0], b_frag[1]);
          Ops::mma(s[2 * nb + 1], a, b_frag[2], b_frag[3]);
        }
      }

      const int col0 = key_lo + 2 * t_lane;
      const bool past_keys = key_lo + BN > n_k;
      if constexpr (MASK == MASK_INTERVALS) {
        if (partial) {
          const IntervalReach reach =
              interval_reach(interval_minmax + ((long long)group * n_nblocks + n_block) * 8, warp_row0, 16);
          const int2* bounds = reinterpret_cast<const int2*>(intervals) + (long long)group * n_k * 2;
          if (reach.lower) mask_interval(s, bounds, col0, n_k, warp_row0 + g_lane);
          if (reach.upper) mask_interval(s, bounds + 1, col0, n_k, warp_row0 + g_lane);
        }
      } else if constexpr (MASK == MASK_BITS) {
        if (partial) {
          mask_bits<NB, TILE_N>(s, bit_pool + (long long)payload_idx[e] * (TILE_M * TILE_N / 32),
                                warp * 16 + g_lane, t_lane, kstep * BN);
        }
      }
      if (past_keys) mask_key_bound(s, col0, n_k);

      probabilities(s, lse_row, scale_log2);

      // dP = dO V^T, then dS = P (dP - delta) in place
      float ds[NB][4];
#pragma unroll
      for (int j = 0; j < NB; ++j) ds[j][0] = ds[j][1] = ds[j][2] = ds[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        unsigned a[4];
        ldmatrix_x4(a, sdO_a + kk * 32);
#pragma unroll
        for (int nb = 0; nb < BN / 16; ++nb) {
          unsigned b_frag[4];
          ldmatrix_x4(b_frag, sV_s + (k_lane + nb * 16 * STRIDE + kk * 16) * 2);
          Ops::mma(ds[2 * nb], a, b_frag[0], b_frag[1]);
          Ops::mma(ds[2 * nb + 1], a, b_frag[2], b_frag[3]);
        }
      }
      score_grads(ds, s, delta_row);

      // dQ += dS K (scaled in the epilogue)
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        const unsigned a[4] = {Ops::pack(ds[2 * kk][0], ds[2 * kk][1]), Ops::pack(ds[2 * kk][2], ds[2 * kk][3]),
                               Ops::pack(ds[2 * kk + 1][0], ds[2 * kk + 1][1]),
                               Ops::pack(ds[2 * kk + 1][2], ds[2 * kk + 1][3])};
#pragma unroll
        for (int db = 0; db < D / 16; ++db) {
          unsigned b_frag[4];
          ldmatrix_x4_trans(b_frag, sK_s + (v_lane + kk * 16 * STRIDE + db * 16) * 2);
          Ops::mma(acc_dq[2 * db], a, b_frag[0], b_frag[1]);
          Ops::mma(acc_dq[2 * db + 1], a, b_frag[2], b_frag[3]);
        }
      }
    }
    __syncthreads();  // this stage is reloaded by the next iteration's prefetch
    e = e_next;
    n_block = nb_next;
    kstep = ks_next;
    stage ^= 1;
  }

  // Epilogue: dQ = scale * acc_dq through this warp's own rows of sQ, then 16-byte stores.
  cp_async_wait<0>();
  __syncthreads();
  if (!warp_active) return;
  T* sdQ = sQ + warp * 16 * STRIDE;
#pragma unroll
  for (int j = 0; j < DB; ++j) {
    const int at = g_lane * STRIDE + 8 * j + 2 * t_lane;
    *reinterpret_cast<unsigned*>(sdQ + at) = Ops::pack(acc_dq[j][0] * scale, acc_dq[j][1] * scale);
    *reinterpret_cast<unsigned*>(sdQ + at + 8 * STRIDE) = Ops::pack(acc_dq[j][2] * scale, acc_dq[j][3] * scale);
  }
  __syncwarp();
  T* gdQ = dq + b * dq_sb + h * dq_sh;
  constexpr int CHUNKS = D / 8;
#pragma unroll
  for (int i = 0; i < 16 * CHUNKS / 32; ++i) {
    const int idx = lane + 32 * i;
    const int r = idx / CHUNKS, c = idx % CHUNKS;
    if (warp_row0 + r < n_q) {
      *reinterpret_cast<uint4*>(gdQ + caller_token(perm, warp_row0 + r) * dq_sn + c * 8) =
          *reinterpret_cast<const uint4*>(sdQ + r * STRIDE + c * 8);
    }
  }
}


// grid (ceil(n_q * D / 8 / CONVERT_THREADS), B * H): dq = scale * dq_accum (B * H, n_q_pad, D) for rows < n_q.
template <typename T, int D>
__global__ void __launch_bounds__(CONVERT_THREADS) bwd_dq_convert_kernel(
    const float* __restrict__ dq_accum, T* __restrict__ dq, long long dq_sb, long long dq_sh, long long dq_sn,
    int heads, int n_q, int n_q_pad, float scale, const int* __restrict__ perm) {
  using Ops = Dtype<T>;
  constexpr int CHUNKS = D / 8;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const long long idx = (long long)blockIdx.x * CONVERT_THREADS + threadIdx.x;
  const int row = idx / CHUNKS, c = idx % CHUNKS;
  if (row >= n_q) return;
  const float4* src = reinterpret_cast<const float4*>(dq_accum + ((long long)bh * n_q_pad + row) * D + c * 8);
  const float4 x = src[0], y = src[1];
  uint4 packed;
  packed.x = Ops::pack(x.x * scale, x.y * scale);
  packed.y = Ops::pack(x.z * scale, x.w * scale);
  packed.z = Ops::pack(y.x * scale, y.y * scale);
  packed.w = Ops::pack(y.z * scale, y.w * scale);
  *reinterpret_cast<uint4*>(dq + b * dq_sb + h * dq_sh + caller_token(perm, row) * dq_sn + c * 8) = packed;
}

}  // namespace maskattn

#ifdef MASKATTN_INSTANTIATE
// Compiled alone (nvcc -c -DMASKATTN_INSTANTIATE): every backward kernel of the configuration the knobs above name.
namespace maskattn {
using InstT = MASKATTN_DTYPE;
constexpr int INST_D = MASKATTN_HEAD_DIM, INST_M = MASKATTN_TILE_M, INST_N = MASKATTN_TILE_N;
constexpr int INST_BN = (MASKATTN_BWD_BN) < INST_N ? (MASKATTN_BWD_BN) : INST_N;
}  // namespace maskattn
void* maskattn_bwd_instances[] = {
    reinterpret_cast<void*>(&maskattn::bwd_preprocess_kernel<maskattn::InstT, maskattn::INST_D>),
    reinterpret_cast<void*>(&maskattn::bwd_kv_bound_kernel<maskattn::InstT, maskattn::INST_D>),
    reinterpret_cast<void*>(&maskattn::bwd_dkdv_kernel<maskattn::InstT, maskattn::INST_D, maskattn::INST_M,
                                                       maskattn::INST_N, maskattn::MASKATTN_MASK, MASKATTN_BWD_BM,
                                                       MASKATTN_BWD_DSPLIT, false, MASKATTN_PERM>),
    reinterpret_cast<void*>(&maskattn::bwd_dkdv_kernel<maskattn::InstT, maskattn::INST_D, maskattn::INST_M,
                                                       maskattn::INST_N, maskattn::MASKATTN_MASK,
                                                       MASKATTN_BWD_BM_ATOMIC, MASKATTN_BWD_DSPLIT, true,
                                                       MASKATTN_PERM>),
    reinterpret_cast<void*>(&maskattn::bwd_dq_kernel<maskattn::InstT, maskattn::INST_D, maskattn::INST_M,
                                                     maskattn::INST_N, maskattn::MASKATTN_MASK, maskattn::INST_BN,
                                                     MASKATTN_PERM>),
    reinterpret_cast<void*>(&maskattn::bwd_dq_convert_kernel<maskattn::InstT, maskattn::INST_D>),
};
#endif
