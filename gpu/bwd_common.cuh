// Helpers the backward kernels need beside common.cuh and mask.cuh: 16-bit unpacking, fp32 reductions into global
// memory, and masking of transposed score fragments.
//
// The dK/dV kernel computes S^T = K Q^T, so its m16n8 fragments hold keys in rows and queries in columns: a thread
// holds keys (key, key + 8) and queries (8 j + 2 t, 8 j + 2 t + 1) for j < NB, t = lane % 4. The *_t helpers below
// mask such fragments with the same rules as mask.cuh applies to query-major ones (whose mask_bits also takes the
// column offset the dQ kernel needs when it steps through a key block in parts).
#pragma once

#include "common.cuh"
#include "mask.cuh"

// The parameter lists of the dK/dV and dQ passes, shared by the mma.sync kernels (bwd.cu) and their wgmma twins
// (bwd_sm90.cu): maskattn._cuda_backward fills both from one argument tuple. Strides are in elements of the
// logical (B, H, n, D) views, whose last dimension is contiguous; mask group g = b * group_sb + h * group_sh (0
// strides broadcast the plan over batch or heads). T is the kernel's element type.
#define MASKATTN_BWD_INPUTS \
  const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ d_o
#define MASKATTN_BWD_INPUT_STRIDES                                                                                \
  long long q_sb, long long q_sh, long long q_sn, long long k_sb, long long k_sh, long long k_sn, long long v_sb, \
      long long v_sh, long long v_sn, long long do_sb, long long do_sh, long long do_sn
#define MASKATTN_BWD_PAYLOAD_AND_SCALES                                                                        \
  const unsigned* __restrict__ bit_pool, const int* __restrict__ intervals,                                  \
      const int* __restrict__ interval_minmax, const int* __restrict__ perm, float scale_log2, float scale

// dK/dV: the backward CSR (query blocks per key block)
#define MASKATTN_BWD_DKDV_PARAMS                                                                                     \
  MASKATTN_BWD_INPUTS, T* __restrict__ dk, T* __restrict__ dv, float* __restrict__ dq_accum,                         \
      const float* __restrict__ lse_log2, const float* __restrict__ delta,                                           \
      const signed char* __restrict__ dq_exp, MASKATTN_BWD_INPUT_STRIDES, long long dk_sb, long long dk_sh,          \
      long long dk_sn, long long dv_sb, long long dv_sh, long long dv_sn, int heads, int heads_per_kv, int kv_heads, \
      int n_q, int n_k, int n_q_pad, int group_sb, int group_sh, int n_mblocks, int n_nblocks,                       \
      const long long* __restrict__ col_ptr, const int* __restrict__ row_idx,                                        \
      const unsigned char* __restrict__ bwd_kind, const int* __restrict__ n_order,                                   \
      const int2* __restrict__ n_levels, const int* __restrict__ bwd_payload_idx, MASKATTN_BWD_PAYLOAD_AND_SCALES

// dQ: the forward CSR (key blocks per query block)
#define MASKATTN_BWD_DQ_PARAMS                                                                                     \
  MASKATTN_BWD_INPUTS, T* __restrict__ dq, const float* __restrict__ lse_log2, const float* __restrict__ delta,  \
      MASKATTN_BWD_INPUT_STRIDES, long long dq_sb, long long dq_sh, long long dq_sn, int heads, int heads_per_kv, \
      int n_q, int n_k, int n_q_pad, int group_sb, int group_sh, int n_mblocks, int n_nblocks,                    \
      const long long* __restrict__ row_ptr, const int* __restrict__ col_idx, const unsigned char* __restrict__ kind, \
      const int* __restrict__ m_order, const int2* __restrict__ m_levels, const int* __restrict__ payload_idx,     \
      MASKATTN_BWD_PAYLOAD_AND_SCALES

namespace maskattn {

constexpr float LOG2E = 1.4426950408889634f;

// threads of a CTA of the dQ conversions (bwd_dq_convert_kernel, bwd_dq_convert_sm90_kernel): CONVERT_THREADS in
// backends/cuda/bwd.py
constexpr int CONVERT_THREADS = 256;

__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

// The deterministic one pass (bwd_sm90.cu, FIXED) adds each step's dQ into 32-bit integers, whose sum is exact and
// so does not depend on the order of the additions. Row i's values are scaled by 2^e_i before they are rounded,
// with e_i such that no partial sum over its keys reaches 2^30: for any set J of keys,
//   |sum_{j in J} dS_ij K_jd| <= sum_j P_ij |dP_ij - delta_i| max|K| <= max|K| (||dO_i|| max_j ||V_j|| + |delta_i|),
// since sum_j P_ij <= 1 and |dP_ij| <= ||dO_i|| ||V_j||. e_i = 29 - the binary exponent of that bound keeps twice
// the bound (room for the roundings of P, dS and the float32 products) below 2^30. The step resolves 2^-29 of the
// bound. k_max and v_norm_max are bwd_kv_bound_kernel's, over the row's batch and KV head; e_i is kept in a byte.
__device__ __forceinline__ signed char dq_fixed_exponent(float k_max, float v_norm_max, float do_norm, float delta) {
  int e;
  frexpf(k_max * fmaf(do_norm, v_norm_max, fabsf(delta)), &e);
  return (signed char)min(max(29 - e, -120), 120);  // inf and NaN give any e: clamped
}
// 2^e, exactly (|e| <= 120)
__device__ __forceinline__ float exp2_int(int e) { return __int_as_float((e + 127) << 23); }

template <typename T>
struct Unpack;

template <>
struct Unpack<half_t> {
  // the low 16 bits are the first element
  static __device__ __forceinline__ void to_float2(unsigned x, float& lo, float& hi) {
    asm("{ .reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
        : "=f"(lo), "=f"(hi)
        : "r"(x));
  }
};

template <>
struct Unpack<bf16_t> {
  static __device__ __forceinline__ void to_float2(unsigned x, float& lo, float& hi) {
    lo = __uint_as_float(x << 16);
    hi = __uint_as_float(x & 0xffff0000u);
  }
};

// *p += (a, b) without returning the old values; p is 8-byte aligned.
__device__ __forceinline__ void red_add_f32x2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(p), "f"(a) : "memory");
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(p + 1), "f"(b) : "memory");
#endif
}

// True when rows [row_lo, row_lo + rows) are masked in every column of the key block: they lie inside every
// column's lower interval, or inside every column's upper one (block_minmax as for interval_reach).
__device__ __forceinline__ bool interval_covers(const int* __restrict__ block_minmax, int row_lo, int rows) {
  const int4 lo = *reinterpret_cast<const int4*>(block_minmax);      // min LTS, max LTS, min LTE, max LTE
  const int4 up = *reinterpret_cast<const int4*>(block_minmax + 4);  // min UTS, max UTS, min UTE, max UTE
  return (lo.y <= row_lo && lo.z >= row_lo + rows) || (up.y <= row_lo && up.z >= row_lo + rows);
}

// Keys >= n_k lie past the sequence. key: the thread's first key (global index).
template <int NB>
__device__ __forceinline__ void mask_keys_t(float (&s)[NB][4], int key, int n_k) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (key + 8 * half >= n_k) {
#pragma unroll
      for (int j = 0; j < NB; ++j) s[j][2 * half] = s[j][2 * half + 1] = neg_inf();
    }
  }
}

// Masks queries start <= i < end of each of the thread's keys, (start, end) = bounds[2 * key]: the intervals array
// as int2 pairs, offset by 0 for the lower interval (LTS, LTE) and by 1 for the upper one (UTS, UTE), as
// mask_interval takes them. row: the thread's first query (global index, the fragment's column 2 t). Keys >= n_k
// are not read (mask_keys_t covers them).
template <int NB>
__device__ __forceinline__ void mask_interval_t(float (&s)[NB][4], const int2* __restrict__ bounds, int key, int n_k,
                                                int row) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int k = key + 8 * half;
    if (k < n_k) {
      const int2 iv = bounds[2 * k];
#pragma unroll
      for (int j = 0; j < NB; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = row + 8 * j + e;
          if (iv.x <= i && i < iv.y) s[j][2 * half + e] = neg_inf();
        }
      }
    }
  }
}

// tile_bits: the entry's TILE_M x TILE_N bit tile (layout as in mask.cuh), or its rows from a step's first (row 0
// then being that step's first). local_key: the thread's first key inside the tile. The thread's two keys, local_key
// and local_key + 8, share one word (local_key % 16 < 8): bits 0 and 8 of (*this)(row) say whether query row `row`
// sees them. Bits past n_q and n_k are 0.
template <int TILE_N>
struct KeyBits {
  const unsigned* column;
  int shift;
  __device__ __forceinline__ KeyBits(const unsigned* tile_bits, int local_key)
      : column(tile_bits + local_key / 32), shift(local_key % 32) {}
  __device__ __forceinline__ unsigned operator()(int row) const { return column[row * (TILE_N / 32)] >> shift; }
};

// local_row: the thread's first query inside the tile.
template <int NB, int TILE_N>
__device__ __forceinline__ void mask_bits_t(float (&s)[NB][4], const unsigned* __restrict__ tile_bits, int local_row,
                                            int local_key) {
  const KeyBits<TILE_N> bits(tile_bits, local_key);
#pragma unroll
  for (int j = 0; j < NB; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const unsigned w = bits(local_row + 8 * j + e);
      if (!(w & 1u)) s[j][e] = neg_inf();
      if (!(w & 0x100u)) s[j][2 + e] = neg_inf();
    }
  }
}

// mask_bits_t on 16-bit A operands packed from such fragments (pack_a_operand: a[kk][2 jj + half] holds queries
// 16 kk + 8 jj + 2 t (low half) and + 1 (high half) of key local_key + 8 half): masked elements become +0 in p and ds
// whatever they held (exp2 of a masked score may have overflowed). The Hopper dK/dV kernel masks bit tiles here: at
// 128-row steps the float S^T and dP^T (64 + 64 registers) and 32 bit words do not fit beside dK and dV, the packed
// operands (32 + 32) do.
template <int TILE_N, int KS>
__device__ __forceinline__ void mask_bits_packed_t(unsigned (&p)[KS][4], unsigned (&ds)[KS][4],
                                                   const unsigned* __restrict__ tile_bits, int local_row,
                                                   int local_key) {
  const KeyBits<TILE_N> bits(tile_bits, local_key);
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int row = local_row + 16 * kk + 8 * jj;
      const unsigned w0 = bits(row), w1 = bits(row + 1);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const unsigned keep =
            ((w0 >> (8 * half)) & 1u ? 0x0000ffffu : 0u) | ((w1 >> (8 * half)) & 1u ? 0xffff0000u : 0u);
        p[kk][2 * jj + half] &= keep;
        ds[kk][2 * jj + half] &= keep;
      }
    }
  }
}

// Probabilities and score gradients from the forward's statistics, in place on the score fragments. Query-major
// fragments (the dQ kernels) take the values of their two rows; transposed ones (*_t, the dK/dV kernels) a float2 per
// pair of query columns (ColumnValues below).

// P = exp2(S scale log2(e) - LSE log2(e)); masked scores and rows that see no key (LSE +inf) give 0
template <int N>
__device__ __forceinline__ void probabilities(float (&s)[N][4], const float (&lse)[2], float scale_log2) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    s[j][0] = exp2_approx(fmaf(s[j][0], scale_log2, -lse[0]));
    s[j][1] = exp2_approx(fmaf(s[j][1], scale_log2, -lse[0]));
    s[j][2] = exp2_approx(fmaf(s[j][2], scale_log2, -lse[1]));
    s[j][3] = exp2_approx(fmaf(s[j][3], scale_log2, -lse[1]));
  }
}

// The values of a thread's query columns, (8 j + 2 t, + 1) for j < N: ColumnValues{cols}(j) from shared memory
// (cols pointing at column 2 t), or, loaded ahead into registers by load_cols_t, values[j].
struct ColumnValues {
  const float* cols;
  __device__ __forceinline__ float2 operator()(int j) const { return *reinterpret_cast<const float2*>(cols + 8 * j); }
};

template <int N>
__device__ __forceinline__ void load_cols_t(float2 (&values)[N], ColumnValues cols) {
#pragma unroll
  for (int j = 0; j < N; ++j) values[j] = cols(j);
}

// lse (and delta below): ColumnValues, or a lambda over registers
template <int N, typename Values>
__device__ __forceinline__ void probabilities_t(float (&s)[N][4], Values lse, float scale_log2) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const float2 l = lse(j);
    s[j][0] = exp2_approx(fmaf(s[j][0], scale_log2, -l.x));
    s[j][1] = exp2_approx(fmaf(s[j][1], scale_log2, -l.y));
    s[j][2] = exp2_approx(fmaf(s[j][2], scale_log2, -l.x));
    s[j][3] = exp2_approx(fmaf(s[j][3], scale_log2, -l.y));
  }
}

// dS = P (dP - delta), over dP
template <int N>
__device__ __forceinline__ void score_grads(float (&dp)[N][4], const float (&p)[N][4], const float (&delta)[2]) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    dp[j][0] = p[j][0] * (dp[j][0] - delta[0]);
    dp[j][1] = p[j][1] * (dp[j][1] - delta[0]);
    dp[j][2] = p[j][2] * (dp[j][2] - delta[1]);
    dp[j][3] = p[j][3] * (dp[j][3] - delta[1]);
  }
}

template <int N, typename Values>
__device__ __forceinline__ void score_grads_t(float (&dp)[N][4], const float (&p)[N][4], Values delta) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const float2 d = delta(j);
    dp[j][0] = p[j][0] * (dp[j][0] - d.x);
    dp[j][1] = p[j][1] * (dp[j][1] - d.y);
    dp[j][2] = p[j][2] * (dp[j][2] - d.x);
    dp[j][3] = p[j][3] * (dp[j][3] - d.y);
  }
}

}  // namespace maskattn
