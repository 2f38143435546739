// Element lists of a bits plan's sparse blocks, for the CPU kernels' element path.
//
// Where the tiles a query block lists hold few true elements (a graph's adjacency in its nodes' order), multiplying
// whole tiles computes mostly masked pairs. For such blocks the CPU kernels instead take each row's keys one by one:
// this file decodes the plan's bit tiles into those keys, once per plan. A query block is sparse when the true
// elements of its listed tiles are at most `max_density` of their area; so is a key block, by its backward entries.
// For a sparse query block, row i's keys are cols[row_ptr[g, i] : row_ptr[g, i + 1]] (ascending, positions in the
// plan's order); for a sparse key block, key j's queries are rows[col_ptr[g, j] : col_ptr[g, j + 1]]. Rows and keys of
// dense blocks have empty lists.
//
// Where every block takes the element path, the plan has no node order of its own, one mask group and as many rows as
// keys (a graph in its nodes' given order), the lists may come in an execution order instead (`ordered`): a Reverse
// Cuthill-McKee order of the lists' pattern (rcm.hpp), `order[i]` the plan position at position i, both lists
// relabelled to it. The kernels then follow it as they follow a plan's node order (perm): a block of consecutive rows
// reads a band of neighbouring keys, packed, instead of keys scattered over the whole array. Each row's result is the
// same up to the order of its sums.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention.hpp"
#include "rcm.hpp"

namespace maskprep {

struct ElementLists {
  std::vector<uint8_t> fwd_sparse;  // (G, M): 1 where a query block takes the element path
  std::vector<int64_t> row_ptr;     // (G, n_q + 1), global offsets into cols
  std::vector<int32_t> cols;
  std::vector<uint8_t> bwd_sparse;  // (G, N)
  std::vector<int64_t> col_ptr;     // (G, n_k + 1), global offsets into rows
  std::vector<int32_t> rows;
  std::vector<int64_t> order;       // (n_q,) the execution order the lists are in, or empty: the plan's
};

struct BitsPlan {  // what of a plan the lists need: its arrays and geometry
  PlanPointers arrays;
  int64_t groups, n_q, n_k, tile_m, tile_n;
};

namespace element_lists_detail {

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The set columns of row r of a tile (bits as the plan stores them), or all `cols` where bits is null (FULL).
template <class F>
inline void row_elements(const uint32_t* bits, int64_t r, int64_t tile_n, int64_t cols, F&& emit) {
  if (!bits) {
    for (int64_t c = 0; c < cols; ++c) emit(c);
    return;
  }
  const int64_t off = r * tile_n;  // tile_n is a multiple of 16: a row starts at bit 0 or 16 of a word
  for (int64_t c0 = 0; c0 < cols; c0 += 32) {
    const int64_t bit = off + c0;
    uint32_t w = bits[bit >> 5];
    if ((bit & 31) != 0) {  // the next word only where the row goes on into it (never past the tile)
      w >>= 16;
      if (cols - c0 > 16) w |= bits[(bit >> 5) + 1] << 16;
    }
    if (cols - c0 < 32) w &= (1u << (cols - c0)) - 1u;
    while (w) {
      emit(c0 + __builtin_ctz(w));
      w &= w - 1;
    }
  }
}

// Which blocks of one direction are sparse: true elements of their entries against the entries' area.
inline void mark_sparse(const BitsPlan& p, const int64_t* ptr, const uint8_t* kind, const int32_t* payload,
                        const int32_t* other, int64_t blocks, bool by_rows, const std::vector<int64_t>& ones,
                        double max_density, std::vector<uint8_t>& sparse) {
  sparse.assign(p.groups * blocks, 0);
  for (int64_t g = 0; g < p.groups; ++g)
    for (int64_t x = 0; x < blocks; ++x) {
      int64_t count = 0, area = 0;
      for (int64_t e = ptr[g * (blocks + 1) + x]; e < ptr[g * (blocks + 1) + x + 1]; ++e) {
        const int64_t m = by_rows ? x : other[e], n = by_rows ? other[e] : x;
        const int64_t rows = std::min(p.tile_m, p.n_q - m * p.tile_m), cols = std::min(p.tile_n, p.n_k - n * p.tile_n);
        area += rows * cols;
        count += kind[e] == 2 ? ones[payload[e]] : rows * cols;
      }
      sparse[g * blocks + x] = area > 0 && count <= max_density * area;
    }
}

// ptr / idx (one group's lists over n positions) relabelled: position i takes old position order[i]'s list, its entries
// mapped by inverse (old -> new) and ascending again.
inline void relabel(std::vector<int64_t>& ptr, std::vector<int32_t>& idx, const std::vector<int64_t>& order,
                    const std::vector<int64_t>& inverse) {
  const int64_t n = static_cast<int64_t>(order.size());
  std::vector<int64_t> new_ptr(n + 1, 0);
  std::vector<int32_t> new_idx(idx.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t old = order[i], begin = new_ptr[i];
    new_ptr[i + 1] = begin + ptr[old + 1] - ptr[old];
    for (int64_t e = ptr[old]; e < ptr[old + 1]; ++e) new_idx[begin + e - ptr[old]] = static_cast<int32_t>(inverse[idx[e]]);
    std::sort(new_idx.begin() + begin, new_idx.begin() + new_ptr[i + 1]);
  }
  ptr.swap(new_ptr);
  idx.swap(new_idx);
}

}  // namespace element_lists_detail

inline void element_lists(const BitsPlan& p, double max_density, bool ordered, ElementLists& out) {
  using namespace element_lists_detail;
  const int64_t M = cdiv(p.n_q, p.tile_m), N = cdiv(p.n_k, p.tile_n), words = p.tile_m * p.tile_n / 32;
  std::vector<int64_t> ones(p.arrays.pool_tiles, 0);
  for (int64_t t = 0; t < p.arrays.pool_tiles; ++t)
    for (int64_t w = 0; w < words; ++w) ones[t] += __builtin_popcount(p.arrays.bit_pool[t * words + w]);
  auto tile_bits = [&](uint8_t kind, int32_t payload) -> const uint32_t* {
    return kind == 2 ? p.arrays.bit_pool + static_cast<int64_t>(payload) * words : nullptr;
  };

  // forward: each sparse query block's rows, their keys ascending (entries ascend, and bits within a row)
  mark_sparse(p, p.arrays.row_ptr, p.arrays.kind, p.arrays.payload_idx, p.arrays.col_idx, M, true, ones, max_density, out.fwd_sparse);
  out.row_ptr.assign(p.groups * (p.n_q + 1), 0);
  for (int pass = 0; pass < 2; ++pass) {
    int64_t at = 0;
    for (int64_t g = 0; g < p.groups; ++g) {
      int64_t* ptr = out.row_ptr.data() + g * (p.n_q + 1);
      for (int64_t m = 0; m < M; ++m) {
        const int64_t r0 = m * p.tile_m, rows = std::min(p.tile_m, p.n_q - r0);
        const bool sparse = out.fwd_sparse[g * M + m];
        for (int64_t r = 0; r < rows; ++r) {
          ptr[r0 + r] = at;
          if (!sparse) continue;
          for (int64_t e = p.arrays.row_ptr[g * (M + 1) + m]; e < p.arrays.row_ptr[g * (M + 1) + m + 1]; ++e) {
            const int64_t n = p.arrays.col_idx[e], c0 = n * p.tile_n;
            row_elements(tile_bits(p.arrays.kind[e], p.arrays.payload_idx ? p.arrays.payload_idx[e] : -1), r, p.tile_n,
                         std::min(p.tile_n, p.n_k - c0), [&](int64_t c) {
                           if (pass) out.cols[at] = static_cast<int32_t>(c0 + c);
                           ++at;
                         });
          }
        }
      }
      ptr[p.n_q] = at;
    }
    if (!pass) out.cols.resize(at);
  }

  // backward: each sparse key block's keys, their queries ascending (entries ascend, rows within a tile)
  mark_sparse(p, p.arrays.col_ptr, p.arrays.bwd_kind, p.arrays.bwd_payload_idx, p.arrays.row_idx, N, false, ones, max_density,
              out.bwd_sparse);
  out.col_ptr.assign(p.groups * (p.n_k + 1), 0);
  std::vector<int64_t> next;
  int64_t total = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t g = 0; g < p.groups; ++g) {
      int64_t* ptr = out.col_ptr.data() + g * (p.n_k + 1);
      if (pass) next.assign(ptr, ptr + p.n_k);
      for (int64_t n = 0; n < N; ++n) {
        if (!out.bwd_sparse[g * N + n]) continue;
        const int64_t c0 = n * p.tile_n, cols = std::min(p.tile_n, p.n_k - c0);
        for (int64_t e = p.arrays.col_ptr[g * (N + 1) + n]; e < p.arrays.col_ptr[g * (N + 1) + n + 1]; ++e) {
          const int64_t m = p.arrays.row_idx[e], r0 = m * p.tile_m, rows = std::min(p.tile_m, p.n_q - r0);
          const uint32_t* bits = tile_bits(p.arrays.bwd_kind[e], p.arrays.bwd_payload_idx ? p.arrays.bwd_payload_idx[e] : -1);
          for (int64_t r = 0; r < rows; ++r)
            row_elements(bits, r, p.tile_n, cols, [&](int64_t c) {
              if (pass)
                out.rows[next[c0 + c]++] = static_cast<int32_t>(r0 + r);
              else
                ++ptr[c0 + c + 1];  // counts, made offsets below
            });
        }
      }
      if (!pass) {
        ptr[0] = total;
        for (int64_t j = 0; j < p.n_k; ++j) ptr[j + 1] += ptr[j];
        total = ptr[p.n_k];
      }
    }
    if (!pass) out.rows.resize(total);
  }

  out.order.clear();
  const bool every_block = std::all_of(out.fwd_sparse.begin(), out.fwd_sparse.end(), [](uint8_t s) { return s; }) &&
                           std::all_of(out.bwd_sparse.begin(), out.bwd_sparse.end(), [](uint8_t s) { return s; });
  if (!ordered || !every_block || p.groups != 1 || p.n_q != p.n_k || p.arrays.perm || p.n_q < 2) return;
  out.order.resize(p.n_q);
  rcm_order(out.row_ptr.data(), out.cols.data(), p.n_q, false, 0, 1, out.order.data());
  std::vector<int64_t> inverse(p.n_q);
  for (int64_t i = 0; i < p.n_q; ++i) inverse[out.order[i]] = i;
  relabel(out.row_ptr, out.cols, out.order, inverse);
  relabel(out.col_ptr, out.rows, out.order, inverse);
}

}  // namespace maskprep
