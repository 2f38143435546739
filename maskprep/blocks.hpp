// The block list every mask path produces, and the steps they share: bit packing, the FULL/PARTIAL
// decision, tile deduplication, row-block parallelism and the CSR transpose.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <unordered_map>
#include <vector>

namespace maskprep {

constexpr uint8_t MASKED = 0, FULL = 1, PARTIAL = 2;

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One direction of a plan for all groups: rows of group g are ptr[g*(rows+1) + r] .. ptr[g*(rows+1) + r + 1]
// (offsets are global, so a group's last offset equals the next group's first).
struct BlockList {
  std::vector<int64_t> ptr;
  std::vector<int32_t> idx;
  std::vector<uint8_t> kind;
  std::vector<int32_t> payload;  // index of a PARTIAL entry's bit tile, -1 for FULL entries
};

// Bits of a tile are one stream, row-major: element (r, c) is bit (r*tile_n + c) % 32 of word (r*tile_n + c) / 32.
inline int64_t tile_words(int64_t tile_m, int64_t tile_n) { return tile_m * tile_n / 32; }

inline int64_t popcount_words(const uint32_t* w, int64_t n) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += __builtin_popcount(w[i]);
  return c;
}

inline uint8_t tile_kind(int64_t ones, int64_t valid) {
  return ones == 0 ? MASKED : (ones == valid ? FULL : PARTIAL);
}

// Reads 32 bits starting at bit `off` of a word stream that has one spare word at its end.
inline uint32_t read_bits32(const uint32_t* src, int64_t off) {
  const int64_t w = off >> 5;
  const int s = off & 31;
  if (s == 0) return src[w];
  return (src[w] >> s) | (src[w + 1] << (32 - s));
}

// ORs the low `len` (<= 32) bits of `v` into the stream `dst` at bit `off`.
inline void or_bits(uint32_t* dst, int64_t off, uint32_t v, int len) {
  if (len < 32) v &= (1u << len) - 1u;
  const int64_t w = off >> 5;
  const int s = off & 31;
  dst[w] |= v << s;
  if (s != 0 && s + len > 32) dst[w + 1] |= v >> (32 - s);
}

// Copies `len` bits from src (at bit src_off) to dst (at bit dst_off); dst must be zero there.
inline void copy_bits(uint32_t* dst, int64_t dst_off, const uint32_t* src, int64_t src_off, int64_t len) {
  for (int64_t done = 0; done < len; done += 32) {
    const int n = static_cast<int>(std::min<int64_t>(32, len - done));
    or_bits(dst, dst_off + done, read_bits32(src, src_off + done), n);
  }
}

// The tiles one row block lists, in ascending key block order.
struct RowPiece {
  std::vector<int32_t> count;  // entries per work item
  std::vector<int32_t> idx;
  std::vector<uint8_t> kind;
  std::vector<uint32_t> bits;  // tile_words per PARTIAL entry, in entry order
};

// Runs fn(item, piece) for items [0, n_items) split in contiguous ranges over `threads` threads, then
// concatenates the pieces in item order into a BlockList whose item i is row i % rows of group i / rows.
template <class Fn>
void run_row_blocks(int64_t groups, int64_t rows, int threads, Fn fn, BlockList& out,
                    std::vector<uint32_t>& bits) {
  const int64_t n_items = groups * rows;
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n_items)));
  std::vector<RowPiece> pieces(threads);
  auto work = [&](int t) {
    const int64_t lo = n_items * t / threads, hi = n_items * (t + 1) / threads;
    RowPiece& p = pieces[t];
    for (int64_t item = lo; item < hi; ++item) {
      const size_t before = p.idx.size();
      fn(item, p);
      p.count.push_back(static_cast<int32_t>(p.idx.size() - before));
    }
  };
  if (threads == 1) {
    work(0);
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
    for (auto& th : pool) th.join();
  }
  int64_t total = 0, total_bits = 0;
  for (auto& p : pieces) total += p.idx.size(), total_bits += p.bits.size();
  out.ptr.assign(groups * (rows + 1), 0);
  out.idx.clear(), out.kind.clear(), out.payload.clear(), bits.clear();
  out.idx.reserve(total), out.kind.reserve(total), out.payload.reserve(total), bits.reserve(total_bits);
  int64_t item = 0, offset = 0, partial = 0;
  for (auto& p : pieces) {
    for (int32_t c : p.count) {
      const int64_t g = item / rows, r = item % rows;
      out.ptr[g * (rows + 1) + r] = offset;
      offset += c;
      out.ptr[g * (rows + 1) + r + 1] = offset;
      ++item;
    }
    out.idx.insert(out.idx.end(), p.idx.begin(), p.idx.end());
    out.kind.insert(out.kind.end(), p.kind.begin(), p.kind.end());
    for (uint8_t k : p.kind) out.payload.push_back(k == PARTIAL ? static_cast<int32_t>(partial++) : -1);
    bits.insert(bits.end(), p.bits.begin(), p.bits.end());
  }
}

// Replaces `payload` (an index into `bits`, one tile of `words` each) by an index into a pool of distinct
// tiles; returns the pool. Equal tiles get the index of their first appearance.
inline std::vector<uint32_t> dedup_tiles(const std::vector<uint32_t>& bits, int64_t words,
                                         std::vector<int32_t>& payload) {
  const int64_t n = words ? static_cast<int64_t>(bits.size()) / words : 0;
  std::vector<uint32_t> pool;
  std::vector<int32_t> remap(n);
  std::unordered_map<uint64_t, std::vector<int32_t>> seen;
  seen.reserve(n);
  int32_t distinct = 0;
  for (int64_t t = 0; t < n; ++t) {
    const uint32_t* tile = bits.data() + t * words;
    uint64_t h = 1469598103934665603ull;  // FNV-1a over words
    for (int64_t i = 0; i < words; ++i) h = (h ^ tile[i]) * 1099511628211ull;
    auto& bucket = seen[h];
    int32_t found = -1;
    for (int32_t c : bucket) {
      if (std::memcmp(pool.data() + c * words, tile, words * sizeof(uint32_t)) == 0) {
        found = c;
        break;
      }
    }
    if (found < 0) {
      found = distinct++;
      bucket.push_back(found);
      pool.insert(pool.end(), tile, tile + words);
    }
    remap[t] = found;
  }
  for (auto& p : payload) {
    if (p >= 0) p = remap[p];
  }
  return pool;
}

// The transpose of `fwd` (rows = query blocks, idx = key blocks) for n_cols key blocks per group, entries of
// each column in ascending row order.
inline BlockList transpose(const BlockList& fwd, int64_t groups, int64_t rows, int64_t cols) {
  BlockList bwd;
  const int64_t nnz = static_cast<int64_t>(fwd.idx.size());
  bwd.ptr.assign(groups * (cols + 1), 0);
  bwd.idx.resize(nnz), bwd.kind.resize(nnz), bwd.payload.resize(fwd.payload.empty() ? 0 : nnz);
  std::vector<int64_t> next(cols);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t* rp = fwd.ptr.data() + g * (rows + 1);
    std::fill(next.begin(), next.end(), 0);
    for (int64_t e = rp[0]; e < rp[rows]; ++e) ++next[fwd.idx[e]];
    int64_t* cp = bwd.ptr.data() + g * (cols + 1);
    cp[0] = rp[0];
    for (int64_t c = 0; c < cols; ++c) {
      cp[c + 1] = cp[c] + next[c];
      next[c] = cp[c];
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t e = rp[r]; e < rp[r + 1]; ++e) {
        const int64_t at = next[fwd.idx[e]]++;
        bwd.idx[at] = static_cast<int32_t>(r);
        bwd.kind[at] = fwd.kind[e];
        if (!fwd.payload.empty()) bwd.payload[at] = fwd.payload[e];
      }
    }
  }
  return bwd;
}

// Rows of each group by descending length, equal lengths in ascending row order (a stable counting sort): the
// order in which the kernels start their CTAs, heaviest first. ptr as in BlockList; order is [groups, rows].
inline void order_by_length(const int64_t* ptr, int64_t groups, int64_t rows, int32_t* order) {
  std::vector<int64_t> start;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t* p = ptr + g * (rows + 1);
    int64_t longest = 0;
    for (int64_t r = 0; r < rows; ++r) longest = std::max(longest, p[r + 1] - p[r]);
    // bucket longest - length: the longest rows first
    start.assign(longest + 2, 0);
    for (int64_t r = 0; r < rows; ++r) ++start[longest - (p[r + 1] - p[r]) + 1];
    for (int64_t b = 0; b <= longest; ++b) start[b + 1] += start[b];
    int32_t* o = order + g * rows;
    for (int64_t r = 0; r < rows; ++r) o[start[longest - (p[r + 1] - p[r])]++] = static_cast<int32_t>(r);
  }
}

// A row's band below the longest row of its group: band b holds the lengths l with l * 2^(b+1) >= longest > l * 2^b
// (band 0: at least half the longest); empty rows share the last band. Rows of one band differ in length by at most
// 2x. dense_plan.cu's length_band is the same function for plans built on the device.
inline int32_t length_band(int64_t length, int64_t longest) {
  if (length == 0) return INT32_MAX;
  int32_t band = 0;
  while ((length << (band + 1)) < longest) ++band;
  return band;
}

// The runs of ranks (places in order, as order_by_length gives it) whose rows lie in one length band in every group:
// levels[2 r] and levels[2 r + 1] are the first rank of rank r's run and the rank after its last. The kernels start a
// run's CTAs head by head (rows within 2x of each other, so taking them head by head costs heaviest first little, and
// a head's K and V are read by many CTAs at once and stay in L2) and the runs in order. levels is [rows][2].
inline void order_levels(const int64_t* ptr, const int32_t* order, int64_t groups, int64_t rows, int32_t* levels) {
  auto length = [&](int64_t g, int64_t rank) {
    const int64_t* p = ptr + g * (rows + 1);
    const int32_t row = order[g * rows + rank];
    return p[row + 1] - p[row];
  };
  int64_t first = 0;
  for (int64_t r = 1; r <= rows; ++r) {
    bool ends = r == rows;
    for (int64_t g = 0; g < groups && !ends; ++g) {
      const int64_t longest = length(g, 0);
      ends = length_band(length(g, r), longest) != length_band(length(g, r - 1), longest);
    }
    if (!ends) continue;
    for (int64_t k = first; k < r; ++k) {
      levels[2 * k] = static_cast<int32_t>(first);
      levels[2 * k + 1] = static_cast<int32_t>(r);
    }
    first = r;
  }
}

}  // namespace maskprep
