// Block-sparse flash-attention forward: O and LSE over the key blocks a BlockMask lists for each query block.
//
// One CTA per (query block, head, batch[, split]) on a one-dimensional grid; common.cuh's split_cta gives its query
// block's rank in the plan's m_order (heaviest rows first), its head group b * H / pack + h / pack (longest first
// across heads) and its split.
//
// GQA packing (decode): with pack > 1 a CTA serves `pack` query heads of one KV head, and its rows are (token, head)
// pairs, token-major: row p is token p / pack of head (head group % (H / pack)) * pack + p % pack. The plan is then
// compiled over the packed rows (each mask row repeated pack times), so masking needs no change.
// Split-KV: a split CTA (split_cta: every CTA, or the tail of the CTA order from split_from) takes the s-th of
// num_splits even slices of the query block's key block list and writes its normalised O and LSE in float32 to
// o_part / lse_part ([piece][row of the tile]); a split with no key blocks writes 0 and -inf. combine_kernel below
// merges the splits exactly.
// Each warp owns 16 * MT query rows (MT = TILE_M / (16 * WARPS) m16 tiles, which share every K and V fragment
// read from shared memory). Where the tile has fewer 16-row tiles than warps (decode: TILE_M = 16), KEY_WARPS
// warps share each row tile and split every key block between them, each with its own online softmax over its
// keys; at the end they merge through shared memory as splits merge, so that every warp computes. Per listed key
// block: S = Q K^T (mma.sync m16n8k16, fp32 accumulate), the mask of PARTIAL tiles (intervals or bits) and of keys
// past n_k, online softmax in exp2, and O += P V with P taken from the S accumulators as the A operand. K and V
// tiles go through a ring of STAGES buffers filled with cp.async: blocks e + 1 .. e + STAGES - 1 load while block e
// computes (two stages for the training tiles; three for the single-token decode tile, which has one CTA per SM
// and nothing to compute but the stream).
//
//
// Template knobs (the Python side names them in name_expressions): T (half_t | bf16_t), D (head dim), TILE_M,
// TILE_N, WARPS, STAGES, MASK (MASK_NONE: FULL-only plans, MASK_INTERVALS, MASK_BITS). The #ifndef defaults below
// configure the one instantiation nvcc builds when this file is compiled alone with -DMASKATTN_INSTANTIATE.
#include "common.cuh"
#include "mask.cuh"
#include "softmax.cuh"

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
#ifndef MASKATTN_WARPS
#define MASKATTN_WARPS 8
#endif
#ifndef MASKATTN_STAGES
#define MASKATTN_STAGES 2
#endif
#ifndef MASKATTN_MASK
#define MASKATTN_MASK MASK_NONE
#endif
#ifndef MASKATTN_PERM
#define MASKATTN_PERM false
#endif

namespace maskattn {

// Q stays in registers while its fragments fit beside the O and S accumulators (MT * D <= 128); otherwise each
// key block re-reads it from shared memory.
template <int D, int MT>
constexpr bool Q_IN_REGISTERS = MT == 1 && D <= 128;

template <typename T, int D, int TILE_M, int TILE_N, int WARPS, int STAGES, int MASK, bool PERM>
__global__ void __launch_bounds__(WARPS * 32) fwd_kernel(
    MASKATTN_FWD_ARRAYS, MASKATTN_FWD_SHAPES_AND_PLAN) {
  if constexpr (!PERM) perm = nullptr;  // no node order: the row lookups compile away (common.cuh)
  static_assert(TILE_N % 16 == 0 && D % 16 == 0, "tile_n and the head dim are multiples of 16");
  static_assert(STAGES >= 2, "a ring of at least two K/V stages");
  using Ops = Dtype<T>;
  constexpr int THREADS = WARPS * 32;
  constexpr int ROW_WARPS = TILE_M / 16 < WARPS ? TILE_M / 16 : WARPS;  // warps stacked over the rows
  constexpr int KEY_WARPS = WARPS / ROW_WARPS;                          // warps side by side over a block's keys
  static_assert(TILE_M % (16 * ROW_WARPS) == 0 && WARPS % ROW_WARPS == 0,
                "each warp owns a whole number of 16-row mma tiles, or shares one with KEY_WARPS - 1 others");
  constexpr int MT = TILE_M / (16 * ROW_WARPS);  // m16 row tiles per warp: they share every K and V fragment
  constexpr int WARP_ROWS = 16 * MT;
  constexpr int WARP_KEYS = TILE_N / KEY_WARPS;  // a warp's keys of each block
  static_assert(WARP_KEYS % 16 == 0 && (WARP_KEYS % 32 == 0 || 32 % WARP_KEYS == 0),
                "a warp takes whole k16 steps of P V, and its keys of a bit tile lie inside one word or fill words");
  constexpr bool Q_REGS = Q_IN_REGISTERS<D, MT>;
  constexpr int STRIDE = SMEM_STRIDE<D>;
  constexpr int NB = WARP_KEYS / 8;  // n8 fragments of S per row tile
  constexpr int DB = D / 8;       // n8 fragments of O per row tile
  constexpr int TILE_ELEMS = TILE_N * STRIDE;

  // dynamic shared memory: (TILE_M + 2 * STAGES * TILE_N) * STRIDE elements (Q, then the stages of K and V)
  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + TILE_M * STRIDE;       // [STAGES][TILE_N][STRIDE]
  T* sV = sK + STAGES * TILE_ELEMS;   // [STAGES][TILE_N][STRIDE]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int warp_m = warp / KEY_WARPS, warp_key0 = warp % KEY_WARPS * WARP_KEYS;  // row tile; first key in a block
  const int g_lane = lane / 4, t_lane = lane % 4;  // mma fragment row and column pair
  const int head_groups = heads / pack;
  const SplitCta cta_of = split_cta(m_levels, batch * head_groups, n_mblocks, split_from, num_splits);
  const int b = cta_of.head_group / head_groups, h = cta_of.head_group % head_groups * pack;  // h: first query head
  const int rows = n_q * pack;
  const int keys = key_lens == nullptr ? n_k : min(n_k, key_lens[b]);
  const int group = b * group_sb + h * group_sh;
  // one query block (decode): its order is known, and the key loads wait on one dependent read fewer
  const int m_block = n_mblocks == 1 ? 0 : m_order[(long long)group * n_mblocks + cta_of.rank];
  const int row0 = m_block * TILE_M;
  const int warp_row0 = row0 + warp_m * WARP_ROWS;
  const bool warp_active = warp_row0 < rows;  // warps wholly past the rows only help load and synchronise

  const T* gQ = q + b * q_sb + h * q_sh;
  const int kv_head = h / heads_per_kv;
  const T* gK = k + b * k_sb + kv_head * k_sh;
  const T* gV = v + b * v_sb + kv_head * v_sh;
  const long long row_begin = row_ptr[(long long)group * (n_mblocks + 1) + m_block];
  long long row_len = row_ptr[(long long)group * (n_mblocks + 1) + m_block + 1] - row_begin;
  if (key_lens != nullptr) row_len = bounded_row_len(col_idx, row_begin, row_len, keys, TILE_N);
  const long long e_begin = row_begin + row_len * cta_of.split / cta_of.splits;
  const long long e_end = row_begin + row_len * (cta_of.split + 1) / cta_of.splits;

  auto load_kv = [&](int n_block, int stage) {
    const int key0 = n_block * TILE_N;
    load_rows_async<TILE_N, D, THREADS>(sK + stage * TILE_ELEMS, gK, TokenRows{perm, k_sn, key0}, keys - key0, tid);
    load_rows_async<TILE_N, D, THREADS>(sV + stage * TILE_ELEMS, gV, TokenRows{perm, v_sn, key0}, keys - key0, tid);
  };

  const PackedRows q_rows{pack, q_sh, q_sn, perm};
  load_rows_async<TILE_M, D, THREADS>(sQ, gQ, [&](int r) { return q_rows(row0 + r); }, rows - row0, tid);
  // Key block e is loaded only if it holds keys below the bound (blocks ascend along a row, so the first that does
  // not ends the row). The first STAGES - 1 go in one commit group each (empty past the row's end or the keys):
  // group i holds block e_begin + i.
  auto block_to_load = [&](long long e) {
    const int n_block = e < e_end ? col_idx[e] : -1;
    return n_block >= 0 && n_block * TILE_N < keys ? n_block : -1;
  };
#pragma unroll
  for (int i = 0; i < STAGES - 1; ++i) {
    const int n_block = block_to_load(e_begin + i);
    if (n_block >= 0) load_kv(n_block, i);
    cp_async_commit();
  }

  // per-lane ldmatrix offsets (elements): A of Q, B of K (two n8 blocks), B of V transposed (two n8 blocks)
  const int q_lane = (warp_m * WARP_ROWS + (lane & 15)) * STRIDE + (lane >> 4) * 8;
  const int k_lane = (warp_key0 + (lane & 7) + (lane >> 4) * 8) * STRIDE + ((lane >> 3) & 1) * 8;
  const int v_lane = (warp_key0 + (lane & 7) + ((lane >> 3) & 1) * 8) * STRIDE + (lane >> 4) * 8;
  const unsigned sQ_addr = smem_addr(sQ) + q_lane * 2;

  unsigned q_frag[Q_REGS ? MT : 1][Q_REGS ? D / 16 : 1][4];

  float acc_o[MT][DB][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int j = 0; j < DB; ++j) acc_o[mt][j][0] = acc_o[mt][j][1] = acc_o[mt][j][2] = acc_o[mt][j][3] = 0.f;
  }
  OnlineSoftmax softmax[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) softmax[mt].init();

  // One barrier per key block: after it, block e has landed for every thread (at most STAGES - 2 later groups are
  // pending) and every warp is done with block e - 1, so block e + STAGES - 1 can go into that block's stage while
  // block e computes.
  int stage = 0;
  for (long long e = e_begin; e < e_end; ++e, stage = stage + 1 == STAGES ? 0 : stage + 1) {
    const int n_block = col_idx[e];
    if (n_block * TILE_N >= keys) break;  // this block and the rest of the row lie past the keys
    const int ahead = block_to_load(e + STAGES - 1);
    const bool partial = MASK != MASK_NONE && kind[e] == KIND_PARTIAL;
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (ahead >= 0) load_kv(ahead, stage == 0 ? STAGES - 1 : stage - 1);
    cp_async_commit();  // every iteration, empty or not, so that group counts follow key blocks
    if constexpr (Q_REGS) {
      if (e == e_begin) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(q_frag[mt][kk], sQ_addr + (mt * 16 * STRIDE + kk * 16) * 2);
        }
      }
    }

    if (warp_active) {
      const unsigned sK_addr = smem_addr(sK + stage * TILE_ELEMS) + k_lane * 2;
      const unsigned sV_addr = smem_addr(sV + stage * TILE_ELEMS) + v_lane * 2;

      float s[MT][NB][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int j = 0; j < NB; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
      }
      // with Q in shared memory the k loop stays rolled: unrolled, its hoisted K fragments crowd out registers
#pragma unroll Q_REGS ? D / 16 : 1
      for (int kk = 0; kk < D / 16; ++kk) {
        unsigned a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (Q_REGS) {
#pragma unroll
            for (int r = 0; r < 4; ++r) a[mt][r] = q_frag[mt][kk][r];
          } else {
            ldmatrix_x4(a[mt], sQ_addr + (mt * 16 * STRIDE + kk * 16) * 2);
          }
        }
#pragma unroll
        for (int nb = 0; nb < WARP_KEYS / 16; ++nb) {
          unsigned b_frag[4];
          ldmatrix_x4(b_frag, sK_addr + (nb * 16 * STRIDE + kk * 16) * 2);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            Ops::mma(s[mt][2 * nb], a[mt], b_frag[0], b_frag[1]);
            Ops::mma(s[mt][2 * nb + 1], a[mt], b_frag[2], b_frag[3]);
          }
        }
      }

      const int col0 = n_block * TILE_N + warp_key0 + 2 * t_lane;
      const bool past_keys = (n_block + 1) * TILE_N > keys;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int tile_row0 = warp_row0 + mt * 16;  // first global row of this m16 tile
        if constexpr (MASK == MASK_INTERVALS) {
          if (partial) {
            const IntervalReach reach = interval_reach(
                interval_minmax + ((long long)group * n_nblocks + n_block) * 8, tile_row0, 16);
            const int2* bounds = reinterpret_cast<const int2*>(intervals) + (long long)group * n_k * 2;
            if (reach.lower) mask_interval(s[mt], bounds, col0, n_k, tile_row0 + g_lane);
            if (reach.upper) mask_interval(s[mt], bounds + 1, col0, n_k, tile_row0 + g_lane);
          }
        } else if constexpr (MASK == MASK_BITS) {
          if (partial) {
            mask_bits<NB, TILE_N>(s[mt], bit_pool + (long long)payload_idx[e] * (TILE_M * TILE_N / 32),
                                  tile_row0 - row0 + g_lane, t_lane, warp_key0);
          }
        }
        if (past_keys) mask_key_bound(s[mt], col0, keys);

        float rescale[2];
        softmax[mt].update(s[mt], scale_log2, rescale);
#pragma unroll
        for (int j = 0; j < DB; ++j) {
          acc_o[mt][j][0] *= rescale[0];
          acc_o[mt][j][1] *= rescale[0];
          acc_o[mt][j][2] *= rescale[1];
          acc_o[mt][j][3] *= rescale[1];
        }
      }

      // P in 16 bits, packed before the P V product so that the fp32 scores die first: the S accumulators of key
      // columns [16 kk, 16 kk + 16) are exactly the A fragment of P for step kk
      unsigned p[MT][WARP_KEYS / 16][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int kk = 0; kk < WARP_KEYS / 16; ++kk) {
          p[mt][kk][0] = Ops::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          p[mt][kk][1] = Ops::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          p[mt][kk][2] = Ops::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          p[mt][kk][3] = Ops::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
      }
#pragma unroll
      for (int kk = 0; kk < WARP_KEYS / 16; ++kk) {
#pragma unroll
        for (int db = 0; db < D / 16; ++db) {
          unsigned b_frag[4];
          ldmatrix_x4_trans(b_frag, sV_addr + (kk * 16 * STRIDE + db * 16) * 2);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            Ops::mma(acc_o[mt][2 * db], p[mt][kk], b_frag[0], b_frag[1]);
            Ops::mma(acc_o[mt][2 * db + 1], p[mt][kk], b_frag[2], b_frag[3]);
          }
        }
      }
    }
  }

  // Epilogue: normalise; splits store float32 partials straight from registers, the whole row list stages this
  // warp's rows through its own slice of sQ and stores 16-byte vectors.
  cp_async_wait<0>();
  __syncthreads();
  // partials: [piece][row of the tile]
  const int piece = split_piece(split_from);
  float* const tile_part = o_part + (long long)max(piece, 0) * TILE_M * D;
  float* const tile_lse_part = lse_part + (long long)max(piece, 0) * TILE_M;
  T* gO = o + b * o_sb + h * o_sh;
  const PackedRows o_rows{pack, o_sh, o_sn, perm}, lse_rows{pack, n_q, 1, perm};
  float* g_lse = lse + ((long long)b * heads + h) * n_q;
  if constexpr (KEY_WARPS > 1) {
    // Each key warp writes its rows' O (normalised over its keys) and LSE in float32 to shared memory (Q, K and V
    // are done with), [key warp][row in tile][D] and [key warp][row in tile]; then each thread merges four columns
    // of a row as combine_kernel merges splits, into O and LSE or into this split's partials.
    static_assert(MT == 1 && KEY_WARPS * TILE_M * (D + 1) * 4 <= (TILE_M + 2 * STAGES * TILE_N) * STRIDE * 2,
                  "one row tile per warp; the key warps' float32 rows fit in the shared memory of Q, K and V");
    float* s_lse = reinterpret_cast<float*>(smem);  // [KEY_WARPS][TILE_M]
    float* s_part = s_lse + KEY_WARPS * TILE_M;     // [KEY_WARPS][TILE_M][D], 16-byte aligned
    const int key_warp = warp % KEY_WARPS;
    if (warp_active) {
      float inv_sum[2], row_lse[2];
      softmax[0].finish(scale_log2, inv_sum, row_lse);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = key_warp * TILE_M + warp_m * WARP_ROWS + g_lane + 8 * half;
#pragma unroll
        for (int j = 0; j < DB; ++j) {
          *reinterpret_cast<float2*>(s_part + r * D + 8 * j + 2 * t_lane) =
              make_float2(acc_o[0][j][2 * half] * inv_sum[half], acc_o[0][j][2 * half + 1] * inv_sum[half]);
        }
        if (t_lane == 0) s_lse[r] = row_lse[half];
      }
    }
    __syncthreads();
    for (int i = tid; i < min(TILE_M, rows - row0) * (D / 4); i += THREADS) {
      const int r = i / (D / 4), c = i % (D / 4) * 4;
      float mx = neg_inf();
#pragma unroll
      for (int w = 0; w < KEY_WARPS; ++w) mx = fmaxf(mx, s_lse[w * TILE_M + r]);
      float sum = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
      if (mx != neg_inf()) {
#pragma unroll
        for (int w = 0; w < KEY_WARPS; ++w) {
          const float weight = exp2_approx((s_lse[w * TILE_M + r] - mx) * (1.f / LN2));
          const float4 x = *reinterpret_cast<const float4*>(s_part + (w * TILE_M + r) * D + c);
          sum += weight;
          acc[0] = fmaf(weight, x.x, acc[0]);
          acc[1] = fmaf(weight, x.y, acc[1]);
          acc[2] = fmaf(weight, x.z, acc[2]);
          acc[3] = fmaf(weight, x.w, acc[3]);
        }
      }
      const float inv = sum > 0.f ? 1.f / sum : 0.f, row_lse = sum > 0.f ? mx + logf(sum) : neg_inf();
      const int row = row0 + r;
      if (piece >= 0) {
        *reinterpret_cast<float4*>(tile_part + r * D + c) =
            make_float4(acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv);
        if (c == 0) tile_lse_part[r] = row_lse;
      } else {
        uint2 packed;
        packed.x = Ops::pack(acc[0] * inv, acc[1] * inv);
        packed.y = Ops::pack(acc[2] * inv, acc[3] * inv);
        *reinterpret_cast<uint2*>(gO + o_rows(row) + c) = packed;
        if (c == 0) g_lse[lse_rows(row)] = row_lse;
      }
    }
    return;
  }
  if (!warp_active) return;
  T* sO = sQ + warp * WARP_ROWS * STRIDE;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv_sum[2], row_lse[2];
    softmax[mt].finish(scale_log2, inv_sum, row_lse);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = warp_row0 + mt * 16 + g_lane + 8 * half;
      if (r >= rows) continue;
      if (piece >= 0) {
        float* part = tile_part + (r - row0) * D + 2 * t_lane;
#pragma unroll
        for (int j = 0; j < DB; ++j) {
          *reinterpret_cast<float2*>(part + 8 * j) =
              make_float2(acc_o[mt][j][2 * half] * inv_sum[half], acc_o[mt][j][2 * half + 1] * inv_sum[half]);
        }
        if (t_lane == 0) tile_lse_part[r - row0] = row_lse[half];
      } else if (t_lane == 0) {
        g_lse[lse_rows(r)] = row_lse[half];
      }
    }
    if (piece >= 0) continue;
#pragma unroll
    for (int j = 0; j < DB; ++j) {
      T* top = sO + (mt * 16 + g_lane) * STRIDE + 8 * j + 2 * t_lane;
      *reinterpret_cast<unsigned*>(top) = Ops::pack(acc_o[mt][j][0] * inv_sum[0], acc_o[mt][j][1] * inv_sum[0]);
      *reinterpret_cast<unsigned*>(top + 8 * STRIDE) =
          Ops::pack(acc_o[mt][j][2] * inv_sum[1], acc_o[mt][j][3] * inv_sum[1]);
    }
  }
  if (piece >= 0) return;
  __syncwarp();
  constexpr int CHUNKS = D / 8;
#pragma unroll
  for (int i = 0; i < WARP_ROWS * CHUNKS / 32; ++i) {
    const int idx = lane + 32 * i;
    const int r = idx / CHUNKS, c = idx % CHUNKS;
    if (warp_row0 + r < rows) {
      *reinterpret_cast<uint4*>(gO + o_rows(warp_row0 + r) + c * 8) =
          *reinterpret_cast<const uint4*>(sO + r * STRIDE + c * 8);
    }
  }
}

// Merges the num_splits float32 partials of each row of the split CTAs (fwd_kernel's o_part / lse_part: [piece][row
// of the tile], piece s * tail + t for split s of the tail's t-th CTA, split_cta) into O (T, packed rows as in
// fwd_kernel) and LSE: weights exp(lse_s - lse), lse = log sum_s exp(lse_s). One warp per row of the tail's tiles
// (tail * tile_m of them), four columns per lane; splits that saw no key (lse_s = -inf) weigh 0, and a row no split saw
// gives 0 and -inf. The plan's arrays (m_order, m_levels, group strides) place a tile's rows as the forward did.
constexpr int COMBINE_WARPS = 4;
constexpr int MAX_SPLITS = 32;  // one split per lane

template <typename T, int D>
__global__ void __launch_bounds__(COMBINE_WARPS * 32) combine_kernel(
    const float* __restrict__ o_part, const float* __restrict__ lse_part, T* __restrict__ o, float* __restrict__ lse,
    long long o_sb, long long o_sh, long long o_sn, int heads, int pack, int num_splits, int split_from, int tail,
    int tile_m, int n_q, int group_sb, int group_sh, int n_mblocks, const int* __restrict__ m_order,
    const int2* __restrict__ m_levels, const int* __restrict__ perm) {
  static_assert(MAX_SPLITS == 32, "each lane of the row's warp reads one split's LSE");
  using Ops = Dtype<T>;
  const int lane = threadIdx.x % 32;
  const long long row = (long long)blockIdx.x * COMBINE_WARPS + threadIdx.x / 32;  // of the tail's tiles
  if (row >= (long long)tail * tile_m) return;
  const int head_groups = heads / pack;
  const PlanCta cta = plan_cta(split_from + (int)(row / tile_m), (split_from + tail) / n_mblocks, m_levels);
  const int b = cta.head_group / head_groups, h = cta.head_group % head_groups * pack;
  const int group = b * group_sb + h * group_sh;
  const int r = m_order[(long long)group * n_mblocks + cta.rank] * tile_m + (int)(row % tile_m);
  if (r >= n_q * pack) return;
  const long long split_stride = (long long)tail * tile_m;  // elements of lse_part between splits

  const float mine = lane < num_splits ? lse_part[lane * split_stride + row] : neg_inf();
  float mx = mine;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  float w = mx == neg_inf() ? 0.f : exp2_approx((mine - mx) * (1.f / LN2));
  float sum = w;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  w = sum > 0.f ? w / sum : 0.f;
  if (lane == 0) {
    lse[((long long)b * heads + h) * n_q + PackedRows{pack, n_q, 1, perm}(r)] = sum > 0.f ? mx + logf(sum) : neg_inf();
  }

  T* out = o + b * o_sb + h * o_sh + PackedRows{pack, o_sh, o_sn, perm}(r);
  // every lane runs every step (the shuffles read all 32 lanes' weights); lanes past D only skip loads and stores
#pragma unroll
  for (int c0 = 0; c0 < D; c0 += 128) {
    const int c = c0 + 4 * lane;
    const bool active = c < D;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < num_splits; ++s) {
      const float ws = __shfl_sync(0xffffffffu, w, s);
      if (ws == 0.f || !active) continue;  // ws == 0 (uniform across the warp): splits that saw no key
      const float4 x = *reinterpret_cast<const float4*>(o_part + (s * split_stride + row) * D + c);
      acc[0] = fmaf(ws, x.x, acc[0]);
      acc[1] = fmaf(ws, x.y, acc[1]);
      acc[2] = fmaf(ws, x.z, acc[2]);
      acc[3] = fmaf(ws, x.w, acc[3]);
    }
    if (active) {
      uint2 packed;
      packed.x = Ops::pack(acc[0], acc[1]);
      packed.y = Ops::pack(acc[2], acc[3]);
      *reinterpret_cast<uint2*>(out + c) = packed;
    }
  }
}

}  // namespace maskattn

#ifdef MASKATTN_INSTANTIATE
// Compiled alone (nvcc -c -DMASKATTN_INSTANTIATE): one configuration from the knobs above, for resource reports.
void* maskattn_fwd_instance = reinterpret_cast<void*>(
    &maskattn::fwd_kernel<maskattn::MASKATTN_DTYPE, MASKATTN_HEAD_DIM, MASKATTN_TILE_M, MASKATTN_TILE_N,
                          MASKATTN_WARPS, MASKATTN_STAGES, maskattn::MASKATTN_MASK, MASKATTN_PERM>);
void* maskattn_combine_instance =
    reinterpret_cast<void*>(&maskattn::combine_kernel<maskattn::MASKATTN_DTYPE, MASKATTN_HEAD_DIM>);
#endif
