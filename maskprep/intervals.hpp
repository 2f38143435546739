// Interval masks (FlashMask's column-wise row intervals, normalised to four columns LTS, LTE, UTS, UTE):
// in column j, row i is masked iff LTS[j] <= i < LTE[j] or UTS[j] <= i < UTE[j].
//
// Per key block, the bounds of its columns' intervals split the query blocks into segments that are surely
// masked (skipped), surely untouched (FULL, emitted as one run) or neither (each tile checked exactly, column
// by column). Only tiles near interval ends get the exact check, so the cost is O(n_k + runs + boundary tiles
// * tile_n), and both directions of the plan are then written straight from the runs.
#pragma once

#include "blocks.hpp"

namespace maskprep {

struct Run {
  int32_t m0, m1;  // query blocks [m0, m1)
  uint8_t kind;
};

struct IntervalRuns {
  int64_t groups = 0, n_q = 0, n_k = 0, tile_m = 0, tile_n = 0, rows = 0, cols = 0;
  std::vector<int64_t> run_ptr;  // groups*cols + 1
  std::vector<Run> runs;
  std::vector<int32_t> minmax;   // [groups, cols, 8]: min, max of LTS, LTE, UTS, UTE over the block's columns
};

namespace detail {

inline int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

// Rows of [r0, r1) that column v masks.
inline int64_t covered_rows(const int32_t* v, int64_t r0, int64_t r1) {
  const int64_t lo = std::max<int64_t>(v[0], v[2]), hi = std::min<int64_t>(v[1], v[3]);
  return overlap(r0, r1, v[0], v[1]) + overlap(r0, r1, v[2], v[3]) - (lo < hi ? overlap(r0, r1, lo, hi) : 0);
}

// Exact kind of the tile rows [r0, r1) x columns [c0, c1). The last column goes first: partial tiles almost
// always differ between their two ends (a diagonal, a document boundary), so most checks stop at two columns.
inline uint8_t exact_kind(const int32_t* iv, int64_t c0, int64_t c1, int64_t r0, int64_t r1) {
  bool visible = false, masked = false;
  for (int64_t k = c0; k < c1; ++k) {
    const int64_t j = k == c0 ? c1 - 1 : k - 1;
    const int64_t covered = covered_rows(iv + 4 * j, r0, r1);
    visible |= covered < r1 - r0;
    masked |= covered > 0;
    if (visible && masked) return PARTIAL;
  }
  return visible ? FULL : MASKED;
}

// Min and max of LTS, LTE, UTS, UTE over columns [c0, c1) (c0 < c1), the bulk of an interval plan's time. A
// column's four values are one vector, and four accumulators of each keep the min / max chains independent.
typedef int32_t int32x4 __attribute__((vector_size(16)));

__attribute__((always_inline)) inline void column_bounds_body(const int32_t* iv, int64_t c0, int64_t c1,
                                                              int32_t* lo, int32_t* hi) {
  auto column = [iv](int64_t j) {
    int32x4 v;
    std::memcpy(&v, iv + 4 * j, sizeof v);
    return v;
  };
  int32x4 l[4], h[4];
  for (int u = 0; u < 4; ++u) l[u] = h[u] = column(c0);
  int64_t j = c0;
  for (; j + 4 <= c1; j += 4) {
    for (int u = 0; u < 4; ++u) {
      const int32x4 v = column(j + u);
      l[u] = v < l[u] ? v : l[u];
      h[u] = v > h[u] ? v : h[u];
    }
  }
  for (; j < c1; ++j) {
    const int32x4 v = column(j);
    l[0] = v < l[0] ? v : l[0];
    h[0] = v > h[0] ? v : h[0];
  }
  for (int u = 1; u < 4; ++u) {
    l[0] = l[u] < l[0] ? l[u] : l[0];
    h[0] = h[u] > h[0] ? h[u] : h[0];
  }
  for (int k = 0; k < 4; ++k) lo[k] = l[0][k], hi[k] = h[0][k];
}

#if defined(__x86_64__) && defined(__GNUC__)
// SSE2, all that x86-64 builds may assume, has no 32-bit min / max (four instructions each); where the CPU has
// AVX2, the same loop built for it takes less than half the time.
__attribute__((target("avx2"))) inline void column_bounds_avx2(const int32_t* iv, int64_t c0, int64_t c1,
                                                               int32_t* lo, int32_t* hi) {
  column_bounds_body(iv, c0, c1, lo, hi);
}
#endif

inline void column_bounds(const int32_t* iv, int64_t c0, int64_t c1, int32_t* lo, int32_t* hi) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return column_bounds_avx2(iv, c0, c1, lo, hi);
#endif
  column_bounds_body(iv, c0, c1, lo, hi);
}

// Appends query blocks [m0, m1) of one kind, merged with the block's previous run where they touch.
inline void append_run(std::vector<Run>& runs, size_t block_start, int64_t m0, int64_t m1, uint8_t kind) {
  if (runs.size() > block_start && runs.back().m1 == m0 && runs.back().kind == kind) {
    runs.back().m1 = static_cast<int32_t>(m1);
  } else {
    // field by field: a Run built aside and copied in is read back before its stores land (a stall per run)
    Run& run = runs.emplace_back();
    run.m0 = static_cast<int32_t>(m0), run.m1 = static_cast<int32_t>(m1), run.kind = kind;
  }
}

}  // namespace detail

// iv: [groups, n_k, 4] int32, values in [0, n_q].
inline void interval_runs(const int32_t* iv, int64_t groups, int64_t n_q, int64_t n_k, int64_t tile_m,
                          int64_t tile_n, IntervalRuns& out) {
  out.groups = groups, out.n_q = n_q, out.n_k = n_k, out.tile_m = tile_m, out.tile_n = tile_n;
  const int64_t rows = out.rows = cdiv(n_q, tile_m);
  const int64_t cols = out.cols = cdiv(n_k, tile_n);
  out.run_ptr.assign(groups * cols + 1, 0);
  out.runs.clear();
  out.minmax.assign(groups * cols * 8, 0);
  // query blocks [m_lo, m_hi) whose rows lie inside [s, e) / meet [s, e)
  auto inside = [&](int64_t s, int64_t e, int64_t& lo, int64_t& hi) {
    lo = cdiv(s, tile_m);
    hi = e >= n_q ? rows : e / tile_m;
  };
  auto meets = [&](int64_t s, int64_t e, int64_t& lo, int64_t& hi) {
    lo = s / tile_m;
    hi = std::min(rows, cdiv(e, tile_m));
  };
  std::vector<int64_t> cuts;
  for (int64_t g = 0; g < groups; ++g) {
    const int32_t* giv = iv + g * n_k * 4;
    for (int64_t n = 0; n < cols; ++n) {
      const int64_t c0 = n * tile_n, c1 = std::min(n_k, c0 + tile_n);
      const size_t block_start = out.runs.size();
      int32_t* mm = out.minmax.data() + (g * cols + n) * 8;
      int32_t lo[4], hi[4];
      detail::column_bounds(giv, c0, c1, lo, hi);
      for (int k = 0; k < 4; ++k) mm[2 * k] = lo[k], mm[2 * k + 1] = hi[k];
      // Per interval t (lower, upper): rows every column masks, [max start, min end) (empty as soon as one
      // column's interval is empty, since an empty [x, x) forces max start >= x >= min end), and rows some
      // column may mask, [min start, max end) (empty intervals only widen it, which costs exact checks only).
      const int64_t all_s[2] = {hi[0], hi[2]}, all_e[2] = {lo[1], lo[3]};
      const int64_t any_s[2] = {lo[0], lo[2]}, any_e[2] = {hi[1], hi[3]};
      int64_t skip_lo[2], skip_hi[2], touch_lo[2], touch_hi[2];
      cuts.clear();
      cuts.push_back(0), cuts.push_back(rows);  // not assign({0, rows}): the list is read back from the stack too early
      for (int t = 0; t < 2; ++t) {
        if (all_s[t] < all_e[t]) inside(all_s[t], all_e[t], skip_lo[t], skip_hi[t]);
        else skip_lo[t] = skip_hi[t] = 0;
        if (any_s[t] < any_e[t]) meets(any_s[t], any_e[t], touch_lo[t], touch_hi[t]);
        else touch_lo[t] = touch_hi[t] = 0;
        for (int64_t c : {skip_lo[t], skip_hi[t], touch_lo[t], touch_hi[t]})
          if (c > 0 && c < rows) cuts.push_back(c);
      }
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      for (size_t s = 0; s + 1 < cuts.size(); ++s) {
        const int64_t a = cuts[s], b = cuts[s + 1];
        bool skipped = false, touched = false;
        for (int t = 0; t < 2; ++t) {
          skipped |= skip_lo[t] <= a && a < skip_hi[t];
          touched |= touch_lo[t] <= a && a < touch_hi[t];
        }
        if (skipped) continue;
        if (!touched) {
          detail::append_run(out.runs, block_start, a, b, FULL);
          continue;
        }
        for (int64_t m = a; m < b; ++m) {
          const int64_t r0 = m * tile_m, r1 = std::min(n_q, r0 + tile_m);
          const uint8_t kind = detail::exact_kind(giv, c0, c1, r0, r1);
          if (kind != MASKED) detail::append_run(out.runs, block_start, m, m + 1, kind);
        }
      }
      out.run_ptr[g * cols + n + 1] = static_cast<int64_t>(out.runs.size());
    }
  }
}

// Entries of the plan (in each direction), and how many of them are PARTIAL.
inline void count_entries(const IntervalRuns& r, int64_t& listed, int64_t& partial) {
  listed = partial = 0;
  for (const Run& run : r.runs) {
    listed += run.m1 - run.m0;
    partial += run.kind == PARTIAL ? run.m1 - run.m0 : 0;
  }
}

// Offsets of both directions: rows of the forward CSR (query blocks) and of the backward CSR (key blocks).
inline void interval_counts(const IntervalRuns& r, int64_t* fwd_ptr, int64_t* bwd_ptr) {
  std::vector<int64_t> diff(r.rows + 1);
  int64_t offset = 0;
  for (int64_t g = 0; g < r.groups; ++g) {
    int64_t* bp = bwd_ptr + g * (r.cols + 1);
    bp[0] = offset;
    std::fill(diff.begin(), diff.end(), 0);
    for (int64_t n = 0; n < r.cols; ++n) {
      int64_t c = 0;
      for (int64_t k = r.run_ptr[g * r.cols + n]; k < r.run_ptr[g * r.cols + n + 1]; ++k) {
        const Run& run = r.runs[k];
        c += run.m1 - run.m0;
        ++diff[run.m0], --diff[run.m1];
      }
      bp[n + 1] = bp[n] + c;
    }
    int64_t* fp = fwd_ptr + g * (r.rows + 1);
    fp[0] = offset;
    int64_t live = 0;
    for (int64_t m = 0; m < r.rows; ++m) {
      live += diff[m];
      fp[m + 1] = fp[m] + live;
    }
    offset = bp[r.cols];
  }
}

// Writes the forward direction (query block rows, ascending key blocks) row by row, sequentially: a sweep
// over query blocks keeps the key blocks whose run covers the current row in two bitsets (FULL, PARTIAL),
// updated at each run's start and end.
inline void interval_fill_fwd(const IntervalRuns& r, const int64_t* fwd_ptr, int32_t* col_idx, uint8_t* kind) {
  const int64_t words = cdiv(r.cols, 64);
  std::vector<uint64_t> full(words), partial(words);
  std::vector<int64_t> first(r.rows + 2);  // events (run index, start or end) bucketed by query block
  std::vector<int64_t> events;
  for (int64_t g = 0; g < r.groups; ++g) {
    const int64_t k0 = r.run_ptr[g * r.cols], k1 = r.run_ptr[(g + 1) * r.cols];
    std::fill(first.begin(), first.end(), 0);
    for (int64_t k = k0; k < k1; ++k) ++first[r.runs[k].m0 + 1], ++first[r.runs[k].m1 + 1];
    for (int64_t m = 0; m <= r.rows; ++m) first[m + 1] += first[m];
    events.resize(first[r.rows + 1]);
    std::vector<int64_t> at(first.begin(), first.end() - 1);
    std::vector<int32_t> owner(k1 - k0);  // key block of each run
    for (int64_t n = 0; n < r.cols; ++n)
      for (int64_t k = r.run_ptr[g * r.cols + n]; k < r.run_ptr[g * r.cols + n + 1]; ++k) owner[k - k0] = n;
    // ends sort before starts within a query block: encode an end as ~k
    for (int64_t k = k0; k < k1; ++k) events[at[r.runs[k].m1]++] = ~(k - k0);
    for (int64_t k = k0; k < k1; ++k) events[at[r.runs[k].m0]++] = k - k0;
    std::fill(full.begin(), full.end(), 0), std::fill(partial.begin(), partial.end(), 0);
    for (int64_t m = 0; m < r.rows; ++m) {
      for (int64_t e = first[m]; e < first[m + 1]; ++e) {
        const bool start = events[e] >= 0;
        const int64_t k = start ? events[e] : ~events[e];
        const int64_t n = owner[k];
        std::vector<uint64_t>& set = r.runs[k0 + k].kind == FULL ? full : partial;
        if (start) set[n >> 6] |= 1ull << (n & 63);
        else set[n >> 6] &= ~(1ull << (n & 63));
      }
      int64_t out = fwd_ptr[g * (r.rows + 1) + m];
      for (int64_t w = 0; w < words; ++w) {
        // Consecutive key blocks (most of a row: documents, windows) are written as runs, all FULL; then the few
        // PARTIAL ones, found by their rank among the word's live bits. (Copies of the words: the uint8 stores to
        // kind may alias anything for the compiler, which would reload them.)
        const uint64_t all = full[w] | partial[w], part = partial[w];
        const int64_t first = out;
        for (uint64_t live = all; live;) {
          const int b = __builtin_ctzll(live);
          const uint64_t rest = live >> b;
          const int len = rest == ~0ull ? 64 - b : __builtin_ctzll(~rest);
          for (int i = 0; i < len; ++i) col_idx[out + i] = static_cast<int32_t>(w * 64 + b + i);
          std::memset(kind + out, FULL, len);
          out += len;
          live = b + len == 64 ? 0 : live & (~0ull << (b + len));
        }
        for (uint64_t p = part; p; p &= p - 1)
          kind[first + __builtin_popcountll(all & ((1ull << __builtin_ctzll(p)) - 1))] = PARTIAL;
      }
    }
  }
}

// Writes the backward direction (key block columns, ascending query blocks).
inline void interval_fill_bwd(const IntervalRuns& r, const int64_t* bwd_ptr, int32_t* row_idx, uint8_t* kind) {
  for (int64_t g = 0; g < r.groups; ++g) {
    for (int64_t n = 0; n < r.cols; ++n) {
      int64_t at = bwd_ptr[g * (r.cols + 1) + n];
      for (int64_t k = r.run_ptr[g * r.cols + n]; k < r.run_ptr[g * r.cols + n + 1]; ++k) {
        // copies: row_idx may alias the runs' int32 fields for the compiler, which would reload them per entry
        const int32_t m0 = r.runs[k].m0, m1 = r.runs[k].m1;
        for (int32_t m = m0; m < m1; ++m) row_idx[at + m - m0] = m;
        std::memset(kind + at, r.runs[k].kind, m1 - m0);
        at += m1 - m0;
      }
    }
  }
}

// Both directions, on two threads when the plan is large.
inline void interval_fill(const IntervalRuns& r, const int64_t* fwd_ptr, int32_t* col_idx, uint8_t* fwd_kind,
                          const int64_t* bwd_ptr, int32_t* row_idx, uint8_t* bwd_kind, int threads) {
  const int64_t nnz = r.groups ? bwd_ptr[r.groups * (r.cols + 1) - 1] : 0;
  if (threads > 1 && nnz > (1 << 16)) {
    std::thread t([&] { interval_fill_bwd(r, bwd_ptr, row_idx, bwd_kind); });
    interval_fill_fwd(r, fwd_ptr, col_idx, fwd_kind);
    t.join();
  } else {
    interval_fill_fwd(r, fwd_ptr, col_idx, fwd_kind);
    interval_fill_bwd(r, bwd_ptr, row_idx, bwd_kind);
  }
}

}  // namespace maskprep
