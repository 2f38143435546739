// Which elements of a listed tile are masked: the key bound of the last key block, FlashMask intervals, bit tiles.
//
// Each helper works on one warp's score fragment: NB accumulators of an m16n8 mma, so a thread holds rows
// (row, row + 8) and columns (8 j + 2 t, 8 j + 2 t + 1) for j < NB, t = lane % 4. Masked scores become -inf.
#pragma once

#include "common.cuh"

namespace maskattn {

enum MaskMode { MASK_NONE = 0, MASK_INTERVALS = 1, MASK_BITS = 2 };
enum EntryKind { KIND_FULL = 1, KIND_PARTIAL = 2 };

// col0: this thread's first column (global key index); columns >= n_k lie past the keys.
template <int NB>
__device__ __forceinline__ void mask_key_bound(float (&s)[NB][4], int col0, int n_k) {
#pragma unroll
  for (int j = 0; j < NB; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (col0 + 8 * j + e >= n_k) s[j][e] = s[j][2 + e] = neg_inf();
    }
  }
}

// Rows [row_lo, row_lo + rows) can meet a lower (upper) interval of a key block only if some column's interval
// starts before the rows end and some column's interval ends after they start: one comparison each on
// FlashMask's per-block (min, max) of LTS, LTE, UTS, UTE.
struct IntervalReach {
  bool lower, upper;
};

__device__ __forceinline__ IntervalReach interval_reach(const int* __restrict__ block_minmax, int row_lo, int rows) {
  const int4 lo = *reinterpret_cast<const int4*>(block_minmax);      // min LTS, max LTS, min LTE, max LTE
  const int4 up = *reinterpret_cast<const int4*>(block_minmax + 4);  // min UTS, max UTS, min UTE, max UTE
  return {lo.x < row_lo + rows && lo.w > row_lo, up.x < row_lo + rows && up.w > row_lo};
}

// Masks rows start <= i < end of each column, (start, end) = bounds[2 * col]: pass the intervals array as int2
// pairs, offset by 0 for the lower interval (LTS, LTE) and by 1 for the upper one (UTS, UTE). One interval at a
// time halves the registers the hoisted loads take. row: the thread's first global query row; columns >= n_k are
// not read (mask_key_bound covers them).
template <int NB>
__device__ __forceinline__ void mask_interval(float (&s)[NB][4], const int2* __restrict__ bounds, int col0, int n_k,
                                              int row) {
  // the column tests against n_k - col0, so that the columns' offsets stay immediates: col0 + 8 j + e held in
  // registers across the key loop spilled at 160 registers (fwd_sm90.cu, 192-row tiles)
  const int cols = n_k - col0;
  bounds += 2 * col0;
#pragma unroll
  for (int j = 0; j < NB; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (8 * j + e < cols) {
        const int2 iv = bounds[2 * (8 * j + e)];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int i = row + 8 * half;
          if (iv.x <= i && i < iv.y) s[j][2 * half + e] = neg_inf();
        }
      }
    }
  }
}

// tile_bits: the entry's bit tile (TILE_M x TILE_N bits, row-major, bit (r * TILE_N + c) % 32 of word
// (r * TILE_N + c) / 32). local_row: the thread's first row inside the tile; t = lane % 4; col0: the fragment's
// first column inside the tile, for kernels that step through a key block in narrower parts: a multiple of 32, or
// of 8 * NB < 32 (the fragment's columns then lie inside one word). Bits past n_q and n_k are 0, so the key bound
// needs no extra test. TILE_N a multiple of 16: where it is not one of 32 (col0 0 there), every other row begins
// half way into a word, and its words are shifted into place first (the compilers fold that away elsewhere).
template <int NB, int TILE_N>
__device__ __forceinline__ void mask_bits(float (&s)[NB][4], const unsigned* __restrict__ tile_bits, int local_row,
                                          int t, int col0 = 0) {
  static_assert(TILE_N % 16 == 0, "rows begin at a word or half way into one");
  constexpr int USED = (NB + 3) / 4;  // words of a row the fragment covers
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row_bit = (local_row + 8 * half) * TILE_N;
    const unsigned* row_words = tile_bits + row_bit / 32 + col0 / 32;
    const int lead = row_bit % 32;  // 0, or 16 where TILE_N is an odd multiple of 16
    unsigned w[USED];
#pragma unroll
    for (int p = 0; p < USED; ++p) w[p] = row_words[p];
    if (lead != 0) {  // lead + 8 NB <= 32 USED: the row ends inside word USED - 1
#pragma unroll
      for (int p = 0; p < USED; ++p) w[p] = __funnelshift_r(w[p], p + 1 < USED ? w[p + 1] : 0u, lead);
    }
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      // columns 8 j + 2 t (+1) all lie in word j / 4, from bit col0 % 32 on
      const unsigned bits = w[j / 4] >> (col0 % 32 + 8 * (j % 4) + 2 * t);
      if (!(bits & 1u)) s[j][2 * half] = neg_inf();
      if (!(bits & 2u)) s[j][2 * half + 1] = neg_inf();
    }
  }
}

}  // namespace maskattn
