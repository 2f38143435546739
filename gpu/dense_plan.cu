// Plans of dense boolean masks that live on the GPU, built there end to end (backends/cuda/plans.py launches these
// two kernels; plan_reference() there is their NumPy twin, which the tests hold them to):
//
//   dense_plan_classify: one CTA per PLAN_SPAN adjacent tiles reads their mask bytes 16 at a time, packs them into
//     the plan's bit stream (element (r, c) is bit (r * tile_n + c) of a tile), counts them, writes each tile's kind
//     (0 skipped, 1 FULL, 2 PARTIAL) and, for a PARTIAL tile only, its bits into slot `tile` of the bit pool; listed
//     tiles are counted per query block, per key block and per group with atomics.
//   dense_plan_fill: one warp per query block (forward CSR) and per key block (backward CSR) turns the counts into
//     global offsets, the block's place in m_order / n_order, its place's run there (m_levels / n_levels: places
//     whose blocks lie in one length band in every group), and its entries.
//
// The bit pool has one slot per tile, so a PARTIAL entry's payload index is its tile index and neither direction
// waits for the other: nothing is compacted, deduplicated or copied to the host (docs/internals.md).

namespace maskattn {

constexpr int PLAN_THREADS = 256;
constexpr int PLAN_MAX_WORDS = 256 * 256 / 32;  // bit words of the largest tile
constexpr int PLAN_LOADS = 4;                   // 16-byte loads each thread has in flight
constexpr int PLAN_SPAN = 4;                    // adjacent tiles of a query block a classifying CTA takes

// Sixteen mask bytes to sixteen bits, byte i to bit i; any nonzero byte counts as true.
__device__ __forceinline__ unsigned bits16(uint4 v) {
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
  unsigned out = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned ones = __vcmpne4(words[i], 0u) & 0x01010101u;
    // byte b (0 or 1) lands on bit 24 + b and no two products overlap: the four bits in order
    out |= ((ones * 0x01020408u) >> 24) << (4 * i);
  }
  return out;
}

template <class T>
__device__ __forceinline__ T warp_sum(T x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ __forceinline__ int warp_max(int x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// maskprep's length_band (blocks.hpp): band b holds the lengths l with l * 2^(b+1) >= longest > l * 2^b; empty blocks
// share the last band
__device__ __forceinline__ int length_band(int length, int longest) {
  if (length == 0) return 0x7fffffff;
  int band = 0;
  while ((length << (band + 1)) < longest) ++band;
  return band;
}

// mask: element (b, h, i, j) at mask[b * stride_b + h * stride_h + i * stride_r + j * stride_c] (strides in bytes,
// any of them 0 for a broadcast dimension); group g = b * mask_heads + h. A CTA takes PLAN_SPAN adjacent tiles of
// a query block, (g, m, span) order, so that its warps read PLAN_SPAN * tile_n bytes of each mask row in one go
// (one tile a CTA read 16384^2 bytes at 2.3 TB/s on an H200, against 4.2 for a plain read: issue 16, (l)). Each
// thread keeps to one tile column of 16 bytes (a tile row's chunks padded to a power of two, `lanes`, so that the
// threads' count divides into whole rows of chunks), so its count belongs to one tile.
// row_len (groups * n_mblocks), col_len (groups * n_nblocks) and group_len (groups) must be zero.
extern "C" __global__ void __launch_bounds__(PLAN_THREADS)
    dense_plan_classify(const unsigned char* __restrict__ mask, unsigned char* __restrict__ tile_kind,
                        unsigned* __restrict__ bit_pool, int* __restrict__ row_len, int* __restrict__ col_len,
                        int* __restrict__ group_len, long long stride_b, long long stride_h, long long stride_r,
                        long long stride_c, int mask_heads, int n_q, int n_k, int tile_m, int tile_n, int n_mblocks,
                        int n_nblocks) {
  __shared__ __align__(16) unsigned s_bits[PLAN_SPAN][PLAN_MAX_WORDS];
  __shared__ int s_ones[PLAN_SPAN];
  __shared__ int s_kind[PLAN_SPAN];
  const int spans = (n_nblocks + PLAN_SPAN - 1) / PLAN_SPAN;
  const int n0 = static_cast<int>(blockIdx.x % spans) * PLAN_SPAN;
  const int m = static_cast<int>((blockIdx.x / spans) % n_mblocks);
  const int g = static_cast<int>(blockIdx.x / (static_cast<unsigned>(spans) * n_mblocks));
  const int span = min(PLAN_SPAN, n_nblocks - n0), rows = min(tile_m, n_q - m * tile_m);
  const unsigned char* base = mask + (g / mask_heads) * stride_b + (g % mask_heads) * stride_h +
                              static_cast<long long>(m) * tile_m * stride_r +
                              static_cast<long long>(n0) * tile_n * stride_c;
  // chunk (r, c) of tile t holds its columns [16 c, 16 c + 16) of row r: bits [16 (r per_row + c), + 16) of the
  // tile's stream, the low or high half of a word
  const int per_row = tile_n / 16;
  int lanes = 1;
  while (lanes < per_row) lanes <<= 1;
  const int slot = threadIdx.x % (PLAN_SPAN * lanes), t = slot / lanes, c = slot % lanes;
  const int rows_at_once = PLAN_THREADS / (PLAN_SPAN * lanes);
  const int cols = min(tile_n, n_k - (n0 + t) * tile_n);  // this thread's tile's
  const bool mine = t < span && c < per_row;
  if (threadIdx.x < PLAN_SPAN) s_ones[threadIdx.x] = 0;
  __syncthreads();
  unsigned short* s_half = reinterpret_cast<unsigned short*>(s_bits[t]);
  const unsigned char* column = base + (static_cast<long long>(t) * tile_n + 16 * c) * stride_c;
  const bool vectors = mine && 16 * c + 16 <= cols && stride_c == 1;
  int ones = 0;
  for (int first = threadIdx.x / (PLAN_SPAN * lanes); first < tile_m; first += PLAN_LOADS * rows_at_once) {
    uint4 v[PLAN_LOADS];
    bool vector[PLAN_LOADS];
    // every load of the round issued before any is used
#pragma unroll
    for (int k = 0; k < PLAN_LOADS; ++k) {
      const int r = first + k * rows_at_once;
      const unsigned char* at = column + r * stride_r;
      vector[k] = vectors && r < rows && (reinterpret_cast<unsigned long long>(at) & 15) == 0;
      v[k] = vector[k] ? __ldcs(reinterpret_cast<const uint4*>(at)) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int k = 0; k < PLAN_LOADS; ++k) {
      const int r = first + k * rows_at_once;
      if (!mine || r >= tile_m) continue;
      unsigned half = 0;
      if (vector[k]) {
        half = bits16(v[k]);
      } else if (r < rows) {  // a chunk at the key edge, unaligned or strided: byte by byte
        const unsigned char* at = column + r * stride_r;
        for (int j = 0; j < 16 && 16 * c + j < cols; ++j) half |= (at[j * stride_c] != 0 ? 1u : 0u) << j;
      }
      s_half[r * per_row + c] = static_cast<unsigned short>(half);
      ones += __popc(half);
    }
  }
  // a tile's lanes are `lanes` adjacent threads of one warp (lanes divides 32)
  for (int offset = lanes / 2; offset > 0; offset >>= 1) ones += __shfl_xor_sync(0xffffffffu, ones, offset);
  if (mine && c == 0 && ones != 0) atomicAdd(&s_ones[t], ones);
  __syncthreads();
  if (threadIdx.x < span) {
    const int tt = threadIdx.x, n = n0 + tt, total = s_ones[tt];
    const int kind = total == 0 ? 0 : (total == rows * min(tile_n, n_k - n * tile_n) ? 1 : 2);
    const long long tile = (static_cast<long long>(g) * n_mblocks + m) * n_nblocks + n;
    tile_kind[tile] = static_cast<unsigned char>(kind);
    if (kind != 0) {
      atomicAdd(row_len + static_cast<long long>(g) * n_mblocks + m, 1);
      atomicAdd(col_len + static_cast<long long>(g) * n_nblocks + n, 1);
      atomicAdd(group_len + g, 1);
    }
    s_kind[tt] = kind;
  }
  __syncthreads();
  const int words = tile_m * tile_n / 32, vectors_per_tile = words / 4;  // whole 16-byte vectors: words % 8 == 0
  for (int tt = 0; tt < span; ++tt) {
    if (s_kind[tt] != 2) continue;
    const long long tile = (static_cast<long long>(g) * n_mblocks + m) * n_nblocks + n0 + tt;
    uint4* out = reinterpret_cast<uint4*>(bit_pool + tile * words);
    for (int i = threadIdx.x; i < vectors_per_tile; i += PLAN_THREADS) {
      out[i] = reinterpret_cast<const uint4*>(s_bits[tt])[i];
    }
  }
}

// Warps [0, groups * n_mblocks) take the query blocks (forward CSR: row_ptr, col_idx, kind, payload_idx, m_order),
// the next groups * n_nblocks warps the key blocks (backward CSR: col_ptr, row_idx, bwd_kind, bwd_payload_idx,
// n_order). A block's entries start after every entry of the groups before its own (group_len: the same count in
// both directions) and of the blocks before it in its group; its place in the order counts the blocks with more
// entries, and those with as many that come before it (a stable sort, heaviest first). m_levels and n_levels take
// each place's run, [first, end) in the order (maskprep's rank_levels; common.cuh's plan_cta starts a run's CTAs head
// by head): in each group the places whose blocks' entry counts lie in the band of this block's below the group's
// longest, intersected over the groups by atomics (first the greatest, end the least: the buffer's levels start at
// -1 and 0xffffffff).
extern "C" __global__ void __launch_bounds__(PLAN_THREADS)
    dense_plan_fill(const unsigned char* __restrict__ tile_kind, const int* __restrict__ row_len,
                    const int* __restrict__ col_len, const int* __restrict__ group_len, long long* __restrict__ row_ptr,
                    int* __restrict__ col_idx, unsigned char* __restrict__ kind, int* __restrict__ payload_idx,
                    int* __restrict__ m_order, long long* __restrict__ col_ptr, int* __restrict__ row_idx,
                    unsigned char* __restrict__ bwd_kind, int* __restrict__ bwd_payload_idx,
                    int* __restrict__ n_order, int2* __restrict__ m_levels, int2* __restrict__ n_levels, int groups,
                    int n_mblocks, int n_nblocks) {
  const long long warp = (static_cast<long long>(blockIdx.x) * PLAN_THREADS + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  const long long query_warps = static_cast<long long>(groups) * n_mblocks;
  if (warp >= query_warps + static_cast<long long>(groups) * n_nblocks) return;  // whole warps leave together
  const bool forward = warp < query_warps;
  // this warp's block ("line") and the blocks it crosses, in its direction
  const int lines = forward ? n_mblocks : n_nblocks, across = forward ? n_nblocks : n_mblocks;
  const long long item = forward ? warp : warp - query_warps;
  const int g = static_cast<int>(item / lines), line = static_cast<int>(item % lines);
  const int* len = (forward ? row_len : col_len) + static_cast<long long>(g) * lines;

  long long start = 0;
  for (int i = lane; i < g; i += 32) start += group_len[i];
  const int length = len[line];
  int longest = 0;
  for (int i = lane; i < lines; i += 32) longest = max(longest, len[i]);
  longest = warp_max(longest);
  const int band = length_band(length, longest);
  long long before = 0;
  int rank = 0, run_first = 0, run_end = 0;
  for (int i = lane; i < lines; i += 32) {
    const int l = len[i];
    if (i < line) before += l;
    rank += (l > length || (l == length && i < line)) ? 1 : 0;
    const int b = length_band(l, longest);
    run_first += b < band ? 1 : 0;
    run_end += b <= band ? 1 : 0;
  }
  start = warp_sum(start) + warp_sum(before);
  rank = warp_sum(rank);
  run_first = warp_sum(run_first);
  run_end = warp_sum(run_end);
  long long* const ptr = forward ? row_ptr : col_ptr;
  int* const order = forward ? m_order : n_order;
  int* const idx_out = forward ? col_idx : row_idx;
  unsigned char* const kind_out = forward ? kind : bwd_kind;
  int* const payload_out = forward ? payload_idx : bwd_payload_idx;
  if (lane == 0) {
    const long long at = static_cast<long long>(g) * (lines + 1) + line;
    ptr[at] = start;
    if (line == lines - 1) ptr[at + 1] = start + length;
    order[static_cast<long long>(g) * lines + rank] = line;
    int2* const run = (forward ? m_levels : n_levels) + rank;
    atomicMax(&run->x, run_first);
    atomicMin(reinterpret_cast<unsigned*>(&run->y), static_cast<unsigned>(run_end));
  }
  const long long group_tiles = static_cast<long long>(g) * n_mblocks * n_nblocks;
  for (int first = 0; first < across; first += 32) {
    const int i = first + lane;
    const long long tile = group_tiles + (forward ? static_cast<long long>(line) * n_nblocks + i
                                                  : static_cast<long long>(i) * n_nblocks + line);
    const int k = i < across ? tile_kind[tile] : 0;
    const unsigned listed = __ballot_sync(0xffffffffu, k != 0);
    if (k != 0) {
      const long long e = start + __popc(listed & ((1u << lane) - 1u));
      idx_out[e] = i;
      kind_out[e] = static_cast<unsigned char>(k);
      payload_out[e] = k == 2 ? static_cast<int>(tile) : -1;
    }
    start += __popc(listed);
  }
}

}  // namespace maskattn
