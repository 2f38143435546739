// Block-sparse flash attention on the CPU: forward and backward over a block plan, float and double.
//
// Included once by each attention_<isa>.cpp, which defines
//   MASKPREP_ISA_NAMESPACE  the namespace of its entries (isa_avx512, isa_avx2, isa_generic),
//   MASKPREP_VECTOR_BYTES   the vector width its compiler flags allow (64, 32, 16),
//   MASKPREP_MICRO_ROWS     the rows of a register tile (as many accumulators as the register file holds).
// Everything below those entries has internal linkage, and nothing here instantiates a library template that another
// translation unit could instantiate too: the linker must never pick a copy built for a wider instruction set.
//
// The algorithm is the exact blockwise reference's (maskattn/backends/reference.py), with the work laid out for
// registers: K^T and V (and, for the backward, Q, dO, K and V^T) are packed once per call into zero-padded tiles,
// so every product is a register-tiled kernel over aligned rows (`gemm`); the softmax works in base 2 with the scale
// folded into the exponent, exp2(s * scale * log2(e) - shift) by fused multiply-adds in which scale * log2(e) and the
// backward's lse * log2(e) are each a pair of T (high and low part), so that neither is rounded to T (`exp2v`). Work units: the
// forward takes one (batch, head, query block) each, heaviest first; the backward one (batch, head, range of key
// blocks), which owns its dK, dV rows and accumulates dQ in a buffer of its own (FlashAttention 2's order, without
// atomics). Results are the same whatever thread runs a unit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>

#include "attention.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#ifndef MASKPREP_ISA_NAMESPACE
#define MASKPREP_ISA_NAMESPACE isa_generic
#endif
#ifndef MASKPREP_VECTOR_BYTES
#define MASKPREP_VECTOR_BYTES 16
#endif
#ifndef MASKPREP_MICRO_ROWS
#define MASKPREP_MICRO_ROWS 4
#endif
#ifndef MASKPREP_KB
#define MASKPREP_KB 32
#endif

namespace maskprep {
namespace MASKPREP_ISA_NAMESPACE {
namespace {

constexpr int VB = MASKPREP_VECTOR_BYTES;
constexpr int MR = MASKPREP_MICRO_ROWS;  // rows of a register tile
#ifndef MASKPREP_VECTORS
#define MASKPREP_VECTORS 2
#endif
constexpr int NV = MASKPREP_VECTORS;     // vectors per register-tile row
constexpr uint8_t PARTIAL_TILE = 2;
constexpr double LOG2E = 1.4426950408889634074;
constexpr double LN2 = 0.69314718055994530942;

template <class T>
struct Simd;
template <>
struct Simd<float> {
  typedef float V __attribute__((vector_size(VB)));
  typedef int32_t I __attribute__((vector_size(VB)));
  typedef int32_t Idx;  // interval bounds, lane for lane with V
  static constexpr int W = VB / 4;
};
template <>
struct Simd<double> {
  typedef double V __attribute__((vector_size(VB)));
  typedef int64_t I __attribute__((vector_size(VB)));
  typedef int64_t Idx;
  static constexpr int W = VB / 8;
};

template <class V, class T>
inline V load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

template <class V, class T>
inline void store(T* p, V v) {
  std::memcpy(p, &v, sizeof(V));
}

template <class V, class T>
inline V splat(T x) {
  return x - V{};  // x - (+0) is x exactly, so this folds to a broadcast
}

// Lane by lane a > b ? a : b and a < b ? a : b (b where either is NaN): what x86's max and min instructions compute,
// one instruction each, where GCC compiles the vector conditional to a compare and a blend, two operations on the
// ports the FMAs need (exp2v's clamps and the softmax's maxima; the forward's loop of exponentials alone ran 10-15%
// faster on AVX2).
#if defined(__x86_64__)
#define MASKPREP_MAX_MIN(prefix)                                                                          \
  inline Simd<float>::V vmax(Simd<float>::V a, Simd<float>::V b) { return prefix##_max_ps(a, b); }     \
  inline Simd<double>::V vmax(Simd<double>::V a, Simd<double>::V b) { return prefix##_max_pd(a, b); }  \
  inline Simd<float>::V vmin(Simd<float>::V a, Simd<float>::V b) { return prefix##_min_ps(a, b); }     \
  inline Simd<double>::V vmin(Simd<double>::V a, Simd<double>::V b) { return prefix##_min_pd(a, b); }
#if MASKPREP_VECTOR_BYTES == 64
MASKPREP_MAX_MIN(_mm512)
#elif MASKPREP_VECTOR_BYTES == 32
MASKPREP_MAX_MIN(_mm256)
#else
MASKPREP_MAX_MIN(_mm)
#endif
#undef MASKPREP_MAX_MIN
#else
template <class V>
inline V vmax(V a, V b) {
  return a > b ? a : b;
}
template <class V>
inline V vmin(V a, V b) {
  return a < b ? a : b;
}
#endif

template <class T>
inline T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

template <class T>
inline int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

constexpr int64_t gcd(int64_t a, int64_t b) { return b ? gcd(b, a % b) : a; }
inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
inline float exp2s(float x) { return ::exp2f(x); }
inline double exp2s(double x) { return ::exp2(x); }
inline float log2s(float x) { return ::log2f(x); }
inline double log2s(double x) { return ::log2(x); }

// (ln 2)^i / i!, i = 0..D: the Taylor coefficients of 2^f in f
template <int D>
struct Exp2Taylor {
  double c[D + 1];
  constexpr Exp2Taylor() : c() {
    c[0] = 1.0;
    for (int i = 1; i <= D; ++i) c[i] = c[i - 1] * LN2 / i;
  }
};

// 2^x per lane, to within 1 ulp for x >= the smallest normal exponent, 0 below it (and at -inf): x = n + f with
// n an integer and |f| <= 1/2, 2^f by its Taylor series in f ln 2 (degree 7 for float, 13 for double: the first
// neglected term is below half an ulp), 2^n put into the exponent bits.
template <class T>
struct Exp2Consts;
template <>
struct Exp2Consts<float> {
  static constexpr int degree = 7, bias = 127, mantissa = 23;
  static constexpr float lo = -126.0f, hi = 127.0f, magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to integer
};
template <>
struct Exp2Consts<double> {
  static constexpr int degree = 13, bias = 1023, mantissa = 52;
  static constexpr double lo = -1022.0, hi = 1023.0, magic = 6755399441055744.0;  // 1.5 * 2^52
};

// x[u] = 2^x[u] for U vectors, each step taken for all U before the next. NONPOSITIVE: the caller's x is at most 0 up
// to rounding (or NaN), as the forward's exponents are (scores less their row's maximum): no clamp at the top, one
// operation fewer on the ports the FMAs need. One exponential is a chain of about 15 dependent operations (some 50
// cycles on AVX2), longer than the core's scheduler can overlap with the chains that follow it in program order;
// in steps, U chains advance side by side (the forward's loop of exponentials, one row at a time, ran at a quarter
// of the FMA ports' rate). Every lane's operations are those of one exponential alone.
template <class T, bool NONPOSITIVE = false, int U = 1>
__attribute__((always_inline)) inline void exp2v_n(typename Simd<T>::V* x) {
  using V = typename Simd<T>::V;
  using I = typename Simd<T>::I;
  using C = Exp2Consts<T>;
  const V lo = splat<V>(C::lo), hi = splat<V>(C::hi), magic = splat<V>(C::magic);
  constexpr Exp2Taylor<C::degree> taylor{};
  V r[U], f[U], p[U];
#pragma GCC unroll 16
  for (int u = 0; u < U; ++u) {
    const V xc = NONPOSITIVE ? vmax(lo, x[u]) : vmin(hi, vmax(lo, x[u]));  // lo and hi first: a NaN x stays NaN
    r[u] = xc + magic;
    f[u] = xc - (r[u] - magic);
    p[u] = splat<V>(static_cast<T>(taylor.c[C::degree]));
  }
#pragma GCC unroll 16
  for (int i = C::degree - 1; i >= 0; --i)
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) p[u] = p[u] * f[u] + static_cast<T>(taylor.c[i]);
#pragma GCC unroll 16
  for (int u = 0; u < U; ++u) {
    // the low bits of r hold n; the difference of the two bit patterns is n itself (casts of vectors keep the bits)
    const I e = (((I)r[u] - (I)magic) + C::bias) << C::mantissa;
    const V y = p[u] * (V)e;
    x[u] = x[u] < lo ? V{} : y;
  }
}

// 2^x per lane (exp2v_n of one vector)
template <class T, bool NONPOSITIVE = false>
inline typename Simd<T>::V exp2v(typename Simd<T>::V x) {
  exp2v_n<T, NONPOSITIVE>(&x);
  return x;
}

// The lanes of v folded in halves (max or sum): log2(W) steps, in registers (halves taken by shuffles: taking the
// vector's address, as a memcpy of its halves does, kept sums in memory across whole loops).
template <class T, int BYTES, bool MAX>
struct Fold {
  typedef T V __attribute__((vector_size(BYTES)));
  typedef T H __attribute__((vector_size(BYTES / 2)));
  static constexpr int N = BYTES / sizeof(T);
  template <int... I>
  static T halves(V v, std::integer_sequence<int, I...>) {
#if defined(__clang__) || __GNUC__ >= 12
    const H lo = __builtin_shufflevector(v, v, I...), hi = __builtin_shufflevector(v, v, (I + N / 2)...);
#else
    H lo, hi;
    std::memcpy(&lo, &v, sizeof(H));
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(H), sizeof(H));
#endif
    return Fold<T, BYTES / 2, MAX>::run(MAX ? (lo > hi ? lo : hi) : lo + hi);
  }
  static T run(V v) { return halves(v, std::make_integer_sequence<int, N / 2>{}); }
};
template <class T, bool MAX>
struct Fold<T, sizeof(T), MAX> {
  typedef T V __attribute__((vector_size(sizeof(T))));
  static T run(V v) { return v[0]; }
};

template <class T, class V>
inline T hmax(V v) {
  return Fold<T, sizeof(V), true>::run(v);
}

template <class T, class V>
inline T hsum(V v) {
  return Fold<T, sizeof(V), false>::run(v);
}

// ------------------------------------------------------------------------------------------------------ element path

// Lane i of the sum of two vectors' halves, for one level of a transposing reduction: the lanes come in groups of L
// (each group one key's partial sums); the result has groups of L / 2, alternately a's and b's.
constexpr int fold_lane(int i, int L, int W, bool high) {
  const int half = L / 2, group = i / half, within = i % half;
  return (group % 2) * W + (group / 2) * L + within + (high ? half : 0);
}

template <class V, int W, int L, int... I>
inline V fold_pair(V a, V b, std::integer_sequence<int, I...>) {
#if defined(__clang__) || __GNUC__ >= 12
  return __builtin_shufflevector(a, b, fold_lane(I, L, W, false)...) +
         __builtin_shufflevector(a, b, fold_lane(I, L, W, true)...);
#else
  typedef decltype(a < b) M;  // the integer vector of V's shape
  return __builtin_shuffle(a, b, M{fold_lane(I, L, W, false)...}) + __builtin_shuffle(a, b, M{fold_lane(I, L, W, true)...});
#endif
}

constexpr int bit_reverse(int i, int W) {
  int r = 0;
  for (int b = 1; b < W; b <<= 1, i >>= 1) r = (r << 1) | (i & 1);
  return r;
}

// Lane l of row i (first) or row i + b (else) after rows i and i + b (i & b == 0) swap their off-diagonal blocks of b
// lanes, as an index into the two rows' lanes: one step of an in-register transpose.
constexpr int swap_lane(int l, int b, int W, bool first) {
  return first ? ((l & b) ? W + l - b : l) : ((l & b) ? W + l : l + b);
}

template <class V, int W, int B, int... I>
inline void swap_blocks(V& a, V& b, std::integer_sequence<int, I...>) {
#if defined(__clang__) || __GNUC__ >= 12
  const V x = __builtin_shufflevector(a, b, swap_lane(I, B, W, true)...);
  b = __builtin_shufflevector(a, b, swap_lane(I, B, W, false)...);
#else
  typedef decltype(a < b) M;
  const V x = __builtin_shuffle(a, b, M{swap_lane(I, B, W, true)...});
  b = __builtin_shuffle(a, b, M{swap_lane(I, B, W, false)...});
#endif
  a = x;
}

// v[0, W) transposed in registers: the rows' off-diagonal blocks of 1, 2, 4, ... lanes swapped in turn.
template <class T, int B = 1>
__attribute__((always_inline)) inline void transpose(typename Simd<T>::V* v) {
  constexpr int W = Simd<T>::W;
  if constexpr (B < W) {
    for (int i = 0; i < W; ++i)
      if (!(i & B)) swap_blocks<typename Simd<T>::V, W, B>(v[i], v[i + B], std::make_integer_sequence<int, W>{});
    transpose<T, 2 * B>(v);
  }
}

// W vectors of partial sums in, one vector out whose lane t is the sum of vector t's lanes: log2(W) levels of
// pairwise folds (the folds interleave keys in bit-reversed order, so they are taken in that order). Always inlined:
// where a caller had it called, its W vectors went through the stack.
template <class T>
__attribute__((always_inline)) inline typename Simd<T>::V transpose_sum(typename Simd<T>::V* v) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::W;
  V level[W];
  for (int t = 0; t < W; ++t) level[t] = v[bit_reverse(t, W)];
  int count = W;
  if constexpr (W >= 2) {
    for (int t = 0; t < count / 2; ++t)
      level[t] = fold_pair<V, W, W>(level[2 * t], level[2 * t + 1], std::make_integer_sequence<int, W>{});
    count /= 2;
  }
  if constexpr (W >= 4) {
    for (int t = 0; t < count / 2; ++t)
      level[t] = fold_pair<V, W, W / 2>(level[2 * t], level[2 * t + 1], std::make_integer_sequence<int, W>{});
    count /= 2;
  }
  if constexpr (W >= 8) {
    for (int t = 0; t < count / 2; ++t)
      level[t] = fold_pair<V, W, W / 4>(level[2 * t], level[2 * t + 1], std::make_integer_sequence<int, W>{});
    count /= 2;
  }
  if constexpr (W >= 16) {
    for (int t = 0; t < count / 2; ++t)
      level[t] = fold_pair<V, W, W / 8>(level[2 * t], level[2 * t + 1], std::make_integer_sequence<int, W>{});
  }
  return level[0];
}

// out[t] = dot(x, row(t)) for t < count, W keys at a time (their partial sums reduced together by transpose_sum);
// rows and x hold C vectors, x in registers, each row's products summed before the next row's are started (so that
// the rows' addresses are live one at a time, not W of them through the whole sum). out has room for count rounded
// up to W.
template <class T, int C, class RowOf>
inline void dots_fixed(const T* x, int64_t count, RowOf&& row, T* out) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::W;
  V xv[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) xv[c] = load<V>(x + c * W);
  for (int64_t t0 = 0; t0 < count; t0 += W) {
    V acc[W];
#pragma GCC unroll 16
    for (int t = 0; t < W; ++t) {
      const T* r = row(t0 + t < count ? t0 + t : t0);  // a short group repeats its first
      acc[t] = xv[0] * load<V>(r);
#pragma GCC unroll 8
      for (int c = 1; c < C; ++c) acc[t] += xv[c] * load<V>(r + c * W);
    }
    store(out + t0, transpose_sum<T>(acc));
  }
}

// Calls f(Vectors<C>{}) for C = `vectors` where the row kernels have a version that holds C vectors in registers
// (1, 2, 3, 4, 6 or 8); returns false, calling nothing, for other counts.
template <int C>
struct Vectors {
  static constexpr int count = C;
};

template <class F>
inline bool with_vectors(int64_t vectors, F&& f) {
  switch (vectors) {
    case 1: f(Vectors<1>{}); return true;
    case 2: f(Vectors<2>{}); return true;
    case 3: f(Vectors<3>{}); return true;
    case 4: f(Vectors<4>{}); return true;
    case 6: f(Vectors<6>{}); return true;
    case 8: f(Vectors<8>{}); return true;
    default: return false;
  }
}

// the same for rows of n elements (a multiple of the vector width), n / W of them in registers where with_vectors
// has a version
template <class T, class RowOf>
inline void dots(const T* x, int64_t n, int64_t count, RowOf&& row, T* out) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::W;
  if (with_vectors(n / W, [&](auto c) { dots_fixed<T, decltype(c)::count>(x, count, row, out); })) return;
  for (int64_t t0 = 0; t0 < count; t0 += W) {
    V acc[W];
    for (int t = 0; t < W; ++t) {
      const T* r = row(t0 + t < count ? t0 + t : t0);
      acc[t] = V{};
      for (int64_t d = 0; d < n; d += W) acc[t] += load<V>(x + d) * load<V>(r + d);
    }
    store(out + t0, transpose_sum<T>(acc));
  }
}

// y (n elements, held in registers where n is at most 8 vectors) += sum_t weight[t] * row(t); even and odd t in
// accumulators of their own, so that consecutive rows do not wait on one another's sums
template <class T, int C, class RowOf>
inline void weighted_rows_fixed(T* y, const T* weight, int64_t count, RowOf&& row) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::W;
  V even[C], odd[C];
  for (int c = 0; c < C; ++c) even[c] = load<V>(y + c * W), odd[c] = V{};
  int64_t t = 0;
  for (; t + 1 < count; t += 2) {
    const T* r0 = row(t);
    const T* r1 = row(t + 1);
    const T w0 = weight[t], w1 = weight[t + 1];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      even[c] += w0 * load<V>(r0 + c * W);
      odd[c] += w1 * load<V>(r1 + c * W);
    }
  }
  if (t < count) {
    const T* r0 = row(t);
    const T w0 = weight[t];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) even[c] += w0 * load<V>(r0 + c * W);
  }
  for (int c = 0; c < C; ++c) store(y + c * W, even[c] + odd[c]);
}

template <class T, class RowOf>
inline void weighted_rows(T* y, int64_t n, const T* weight, int64_t count, RowOf&& row) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::W;
  if (with_vectors(n / W, [&](auto c) { weighted_rows_fixed<T, decltype(c)::count>(y, weight, count, row); })) return;
  for (int64_t t = 0; t < count; ++t) {
    const T* r = row(t);
    for (int64_t d = 0; d < n; d += W) store(y + d, load<V>(y + d) + weight[t] * load<V>(r + d));
  }
}

// sum_d a[d] * b[d] over n elements, in double: in the lanes of a vector (not one chain of dependent additions), then
// folded; the caller rounds it once.
template <class T>
inline double dot_double(const T* a, const T* b, int64_t n) {
  typedef double D __attribute__((vector_size(VB)));
  constexpr int L = VB / sizeof(double);
  typedef T X __attribute__((vector_size(L * sizeof(T))));
  D acc{};
  int64_t i = 0;
  for (; i + L <= n; i += L) acc += __builtin_convertvector(load<X>(a + i), D) * __builtin_convertvector(load<X>(b + i), D);
  double sum = hsum<double>(acc);
  for (; i < n; ++i) sum += double(a[i]) * double(b[i]);
  return sum;
}

// dst[0, n) = src[0, n) and dst[n, padded) = 0, by vectors where whole: inline (per-row calls of memcpy and memset
// were a fifth of packing a graph's rows).
template <class T>
inline void copy_row(T* dst, const T* src, int64_t n, int64_t padded) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::W;
  int64_t d = 0;
  for (; d + W <= n; d += W) store(dst + d, load<V>(src + d));
  for (; d < n; ++d) dst[d] = src[d];
  for (; d < padded; ++d) dst[d] = 0;
}

// Whether the n elements at x are all finite: x - x is 0 for those and NaN for inf and NaN; the lanes' verdicts are
// or-ed (no chain of dependent additions), so that the check keeps up with the loads.
template <class T>
inline bool finite(const T* x, int64_t n) {
  using V = typename Simd<T>::V;
  using I = typename Simd<T>::I;
  constexpr int W = Simd<T>::W;
  I bad{};
  int64_t d = 0;
  for (; d + W <= n; d += W) {
    const V y = load<V>(x + d);
    const V t = y - y;
    bad |= t != t;
  }
  bool ok = hsum<typename Simd<T>::Idx>(bad) == 0;
  for (; d < n; ++d) ok &= std::isfinite(x[d]);
  return ok;
}

// Where the call checks its inputs (p.not_finite): sets `bit` there if one of rows row(0) .. row(count - 1) (D
// elements each) holds inf or NaN.
template <class RowOf>
inline void check_rows(const AttentionProblem& p, uint32_t bit, int64_t count, RowOf&& row) {
  if (!p.not_finite) return;
  bool ok = true;
  for (int64_t r = 0; r < count; ++r) ok &= finite(row(r), p.D);
  if (!ok) __atomic_fetch_or(p.not_finite, bit, __ATOMIC_RELAXED);
}

// Asks for the cache lines of n elements at x, to be read soon.
template <class T>
inline void prefetch(const T* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 64 / sizeof(T)) __builtin_prefetch(x + i);
}

// y += alpha * x over n elements, n a multiple of the vector width
template <class T>
inline void axpy(T* y, T alpha, const T* x, int64_t n) {
  using V = typename Simd<T>::V;
  for (int64_t d = 0; d < n; d += Simd<T>::W) store(y + d, load<V>(y + d) + alpha * load<V>(x + d));
}

// ------------------------------------------------------------------------------------------------------ products

// One register tile: C[ROWS][NV * W] (ACC: +=) sum_k A(r, k) * B(k, :), where A(r, k) = a[r * a_rs + k * a_ks]
// (a_ks = 1: rows of A; a_rs = 1: A is the transpose of what a points to) and row k of B starts at b + k * ldb,
// aligned. The sum starts from zero and is added to C at the end, so that a tile's share is rounded at its own size
// (as the reference's tile products are), not at the size of everything accumulated before it. Always inlined (into
// gemm, which is not): left to itself the compiler called it once per register tile.
template <class T, bool ACC, int ROWS>
__attribute__((always_inline)) inline void register_tile(int64_t K, const T* __restrict a, int64_t a_rs, int64_t a_ks,
                                                         const T* __restrict b, int64_t ldb, T* __restrict c,
                                                         int64_t ldc) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::W;
  V acc[ROWS][NV];
#pragma GCC unroll 16
  for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[r][j] = V{};
  for (int64_t k = 0; k < K; ++k) {
    V bk[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bk[j] = load<V>(b + k * ldb + j * W);
    const T* ak = a + k * a_ks;
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
      const T ar = ak[r * a_rs];
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[r][j] += ar * bk[j];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) store(c + r * ldc + j * W, ACC ? load<V>(c + r * ldc + j * W) + acc[r][j] : acc[r][j]);
}

// C (M x N) (ACC: +=) A (M x K) B (K x N), A and B as register_tile reads them; M % MR == 0, N % (NV * W) == 0.
// The column tile of B at column j starts at b + j * b_js: b_js = 1 where B is whole rows of ldb, Dp where it is
// packed in panels (pack_transposed: ldb = PANEL).
// The order of the register tiles: by column tile, each down all blocks of rows (B's column tile is read again by each,
// from L1: the scores, whose B is a panel of K^T), or ROWS_OUTER by block of rows, each across all column tiles (the
// block's rows of B are read again by each: P V, whose B rows are V's, a whole row a cache line per column tile).
// K is summed in blocks of KB, each from zero (blocked summation: a long dot product rounds like a short one, for the
// price of one pass over C per block). blocks(i / MR, j) says which K steps of KS the register tile at (i, j) takes
// (bit b: rows [b * KS, (b + 1) * KS) of B; all where it returns ~0): the others hold zeros of A, a PARTIAL tile's
// masked elements; a register tile that takes none is left as it is (its callers read no such tile of scores).
// Each WIDE_BLOCK rows (a multiple of both WR and MR) whose groups of MR rows take the same blocks run as register
// tiles of WR rows: where the register file holds more accumulators than MR rows take, the FMA latency has more
// independent sums to hide behind (AVX2: 6 x 2 vectors, 12 accumulators, against 4 x 2's 8 for two FMA pipes of
// latency 4). The rows of a register tile never change a sum's order.
// Not inlined: inside the forward's unit function the loop over K of P V had no registers left for A's row offsets
// and reloaded them from the stack on every step (AVX2; a forward 12-17% slower).
constexpr int64_t KB = MASKPREP_KB;
static_assert(KB % MR == 0 && KB >= 16, "a K block holds whole register tiles of rows and whole vectors of keys");
// Columns of a register tile (NV vectors): the width of the panels in which K^T and V^T are packed.
template <class T>
constexpr int64_t PANEL = NV * Simd<T>::W;
// Keys per bit of a PARTIAL tile's visibility (tile_visibility): half a K block, so that a K block takes at most two
// steps (AVX2: shared_question's computed pairs at 4096 fall from 0.093 to 0.088 of all against 32). Where a column
// tile of the score products is wider (AVX-512's 32 keys), it is computed where any of its groups is seen, and the
// softmax and P V take only the groups seen.
constexpr int64_t KG = KB / 2;
static_assert(KG % MR == 0, "a group of KG rows holds whole register tiles of rows");
constexpr uint64_t ALL_BLOCKS = ~uint64_t(0);

// Whether `seen` (bit g: key group g) names a key of the column tile of the score products at column j
template <class T>
inline bool panel_seen(uint64_t seen, int64_t j) {
  constexpr int64_t groups = (PANEL<T> + KG - 1) / KG;
  return (seen >> (j / KG)) & ((uint64_t(1) << groups) - 1);
}

// Calls f(j0, j1) for each run of consecutive key groups that `seen` names (bit g: keys [g * KG, (g + 1) * KG)), the
// run's keys [j0, j1) cut at ncols, in ascending order: one loop over a run's vectors instead of a test per group.
template <class T, class F>
inline void for_runs(uint64_t seen, int64_t ncols, F&& f) {
  static_assert(KG % Simd<T>::W == 0, "key groups of whole vectors");
  while (seen) {
    const int first = __builtin_ctzll(seen);
    const uint64_t from = seen >> first;
    const int end = ~from ? first + __builtin_ctzll(~from) : 64;
    const int64_t j0 = first * KG;
    if (j0 >= ncols) return;
    f(j0, imin(ncols, end * KG));
    seen = end < 64 ? seen & (~uint64_t(0) << end) : 0;
  }
}

#ifndef MASKPREP_STRIP
#define MASKPREP_STRIP 64
#endif
constexpr int64_t STRIP = MASKPREP_STRIP;  // rows of a tile the forward takes through scores, softmax and P V at once
static_assert(STRIP % MR == 0, "strips of whole register tiles");
#ifndef MASKPREP_WIDE_ROWS
#define MASKPREP_WIDE_ROWS MASKPREP_MICRO_ROWS
#endif
constexpr int WR = MASKPREP_WIDE_ROWS;
constexpr int64_t WIDE_BLOCK = WR * MR / gcd(WR, MR);
struct AllBlocks {  // a type of its own, not a function pointer: the products' calls of it fold away
  uint64_t operator()(int64_t, int64_t) const { return ALL_BLOCKS; }
};

// The K steps of KS that `take` names of one register tile of ROWS rows (gemm's loop over K), summed by K block: the
// steps a block takes are one run (at most two steps a block), and leaving out a step of zeros of A changes no sum.
template <class T, bool ACC, int ROWS, int64_t KS>
__attribute__((always_inline)) inline void register_tile_blocks(int64_t K, uint64_t take, const T* a, int64_t a_rs,
                                                                int64_t a_ks, const T* b, int64_t ldb, T* c,
                                                                int64_t ldc) {
  constexpr int64_t S = KB / KS;
  static_assert(KB % KS == 0 && S <= 2, "a K block's steps taken are one run");
  bool started = ACC;
  auto run = [&](int64_t k0, int64_t k1) __attribute__((always_inline)) {  // as register_tile itself
    if (started)
      register_tile<T, true, ROWS>(k1 - k0, a + k0 * a_ks, a_rs, a_ks, b + k0 * ldb, ldb, c, ldc);
    else
      register_tile<T, false, ROWS>(k1 - k0, a + k0 * a_ks, a_rs, a_ks, b + k0 * ldb, ldb, c, ldc);
    started = true;
  };
  if (take == ALL_BLOCKS) {
    for (int64_t k = 0; k < K; k += KB) run(k, imin(K, k + KB));
    return;
  }
  // the blocks taken, found from their bits (a PARTIAL tile's: K is its keys or rows, at most 64 steps): a test per
  // block taken, not one per block, which a partial tile's changing bits made the branch predictor miss
  for (uint64_t left = take; left;) {
    const int first = __builtin_ctzll(left) / S * S;  // the block's first step
    const int64_t k = first * KS;
    if (k >= K) return;
    const uint64_t steps = (left >> first) & ((uint64_t(1) << S) - 1);
    const int64_t k0 = k + (steps & 1 ? 0 : KS), k1 = imin(K, (S == 2 && !(steps & 2)) ? k + KS : k + KB);
    if (k0 < k1) run(k0, k1);
    left = first + S < 64 ? left & (~uint64_t(0) << (first + S)) : 0;
  }
}

template <class T, bool ACC, int64_t KS = KB, bool ROWS_OUTER = false, class Blocks = AllBlocks>
__attribute__((noinline)) void gemm(int64_t M, int64_t N, int64_t K, const T* a, int64_t a_rs, int64_t a_ks,
                                    const T* b, int64_t ldb, T* c, int64_t ldc, Blocks&& blocks = AllBlocks{},
                                    int64_t b_js = 1) {
  constexpr int64_t NC = PANEL<T>;
  auto tiles = [&](auto rows, int64_t i0, int64_t i1, int64_t j) {
    constexpr int R = decltype(rows)::value;
    for (int64_t i = i0; i < i1; i += R)
      register_tile_blocks<T, ACC, R, KS>(K, blocks(i / MR, j), a + i * a_rs, a_rs, a_ks, b + j * b_js, ldb,
                                      c + i * ldc + j, ldc);
  };
  const int64_t wide_end = M / WIDE_BLOCK * WIDE_BLOCK;
  auto block = [&](int64_t i, int64_t j) {
    bool same = true;
    for (int64_t g = 1; g < WIDE_BLOCK / MR; ++g) same &= blocks(i / MR + g, j) == blocks(i / MR, j);
    if (same)
      tiles(std::integral_constant<int, WR>{}, i, i + WIDE_BLOCK, j);
    else
      tiles(std::integral_constant<int, MR>{}, i, i + WIDE_BLOCK, j);
  };
  if (ROWS_OUTER) {
    for (int64_t i = 0; i < wide_end; i += WIDE_BLOCK)
      for (int64_t j = 0; j < N; j += NC) block(i, j);
    for (int64_t j = 0; j < N; j += NC) tiles(std::integral_constant<int, MR>{}, wide_end, M, j);
  } else {
    for (int64_t j = 0; j < N; j += NC) {
      for (int64_t i = 0; i < wide_end; i += WIDE_BLOCK) block(i, j);
      tiles(std::integral_constant<int, MR>{}, wide_end, M, j);
    }
  }
}

// ------------------------------------------------------------------------------------------------------ buffers

// Workspace of one call: 64-byte aligned, zeroed only where asked, from attention.cpp's cache of recent buffers (so that
// repeated calls do not fault their pages in anew); a plain owner, so that no library template is instantiated here.
template <class T>
struct Buffer {
  T* data = nullptr;
  size_t bytes = 0;
  explicit Buffer(int64_t count, bool zeroed = false) {
    bytes = static_cast<size_t>(count > 0 ? count : 1) * sizeof(T);
    data = static_cast<T*>(workspace_take(bytes));
    if (zeroed) std::memset(data, 0, bytes);
  }
  ~Buffer() { workspace_give(data, bytes); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// ------------------------------------------------------------------------------------------------------ geometry

// What every unit of one call shares: the problem, its padded geometry, the packed operands.
template <class T>
struct Call {
  using Idx = typename Simd<T>::Idx;
  const AttentionProblem& p;
  int64_t tm, tn;  // the plan's tile
  int64_t tnp;     // tn rounded up to whole register tiles (and MR rows)
  int64_t Dp;      // D rounded up to whole register tiles
  int64_t M, N;    // query and key blocks
  int64_t rep;     // query heads per KV head
  int64_t BH;
  T scale2, scale2_lo;  // scale * log2(e) = scale2 + scale2_lo: exponents are scores * scale * log2(e) - shift
  int64_t tile_words;
  // packed operands (null where a direction does not use them)
  T* kt = nullptr;  // (B * Hk, N, tnp / PANEL, Dp, PANEL): K^T per key block, in panels (pack_transposed)
  T* vp = nullptr;  // (B * Hk, N * tn, Dp): V rows (key position j at row j), where they are packed (key_rows)
  T* kp = nullptr;  // (B * Hk, N * tn, Dp): K rows
  bool score_rows = false;  // forward: tile scores as dot products of K rows (few query rows: no K^T to pack)
  bool direct;          // the products read the caller's K and V rows themselves: no perm, D whole register tiles
  // the element path reads the caller's K and V rows: D whole vectors, and in the forward no node order (in the
  // plan's order a query block's keys are a band of neighbouring rows, which packed rows hold in contiguous memory:
  // measured 10-12% faster on a reordered graph than reading them where they lie)
  bool element_direct;
  int64_t De;           // the element path's row length: D rounded up to whole vectors
  T* vt = nullptr;  // (B * Hk, N, tnp / PANEL, Dp, PANEL): V^T per key block, in panels
  T* qp = nullptr;  // (B * H, M * tm, Dp): Q rows
  T* dop = nullptr;  // (B * H, M * tm, Dp): dO
  T* lse2 = nullptr;  // (B * H, M * tm, 2): lse * log2(e) as high and low part; +inf where no key is seen and past
                      // n_q
  T* delta = nullptr;  // (B * H, M * tm): rowsum(dO * O)
  // each PARTIAL entry's vis, mixed and vis_t (tile_visibility), made once per call where the plan's tiles serve
  // several heads (null where each unit makes its own; SharedVisibility)
  uint64_t* entry_vis = nullptr;  // (PARTIAL entries, vis_words())
  int64_t* entry_slot = nullptr;  // (entries, of the call's direction): an entry's row of entry_vis (PARTIAL ones only)
  // backward bookkeeping
  int64_t chunks = 1;          // key-block ranges per (batch, head)
  int64_t* chunk_begin = nullptr;  // (G, chunks + 1)
  int64_t* chunk_rows = nullptr;   // (G, chunks, 2): the first and last query block a range's entries name
  T* dq_acc = nullptr;         // (B * H, chunks, M * tm, Dp)
  T* dkh = nullptr;            // GQA: (B * H, N * tnp, Dp) per query head, summed afterwards
  T* dvh = nullptr;
  // per-thread scratch: `scratch_stride` elements each
  T* scratch = nullptr;
  int64_t scratch_stride = 0;

  explicit Call(const AttentionProblem& prob) : p(prob) {
    constexpr int64_t NC = NV * Simd<T>::W;
    tm = p.tile_m;
    tn = p.tile_n;
    tnp = round_up<T>(round_up<T>(tn, NC), MR);
    Dp = round_up<T>(p.D, NC);
    M = (p.n_q + tm - 1) / tm;
    N = (p.n_k + tn - 1) / tn;
    rep = p.H / p.Hk;
    BH = p.B * p.H;
    scale2 = static_cast<T>(p.scale * LOG2E);
    scale2_lo = static_cast<T>(p.scale * LOG2E - double(scale2));
    direct = !p.plan.perm && p.D == Dp;
    De = round_up<T>(p.D, Simd<T>::W);
    element_direct = p.D == De && !p.plan.perm;
    tile_words = tm * tn / 32;
  }

  int64_t group(int64_t b, int64_t h) const {
    return (p.mask_B > 1 ? b : 0) * p.mask_H + (p.mask_H > 1 ? h : 0);
  }
  int64_t token(int64_t pos) const { return p.plan.perm ? p.plan.perm[pos] : pos; }
  const T* row_of(const void* base, const int64_t* stride, int64_t b, int64_t h, int64_t row) const {
    return static_cast<const T*>(base) + b * stride[0] + h * stride[1] + row * stride[2];
  }
  T* kt_block(int64_t bk, int64_t n) const { return kt + (bk * N + n) * Dp * tnp; }
  T* vt_block(int64_t bk, int64_t n) const { return vt + (bk * N + n) * Dp * tnp; }
  T* vp_rows(int64_t bk, int64_t n) const { return vp + (bk * N + n) * tn * Dp; }
  T* kp_rows(int64_t bk, int64_t n) const { return kp + (bk * N + n) * tn * Dp; }
  // key block n's K (V) rows as a product's B operand, and their stride
  const T* key_rows(int64_t bk, int64_t n) const {
    return direct ? row_of(p.k, p.k_stride, bk / p.Hk, bk % p.Hk, n * tn) : kp_rows(bk, n);
  }
  const T* value_rows(int64_t bk, int64_t n) const {
    return direct ? row_of(p.v, p.v_stride, bk / p.Hk, bk % p.Hk, n * tn) : vp_rows(bk, n);
  }
  int64_t key_ld() const { return direct ? p.k_stride[2] : Dp; }
  int64_t value_ld() const { return direct ? p.v_stride[2] : Dp; }
  // the K (V) rows of (batch, KV head) bk on the element path (De elements each), by key position
  struct Rows {
    const T* base;
    int64_t ld;
    const int64_t* perm;  // caller's rows are in the caller's order; packed ones in the plan's
    const T* operator()(int64_t j) const { return base + (perm ? perm[j] : j) * ld; }
  };
  Rows key_table(int64_t bk) const {
    if (element_direct) return {row_of(p.k, p.k_stride, bk / p.Hk, bk % p.Hk, 0), p.k_stride[2], p.plan.perm};
    return {kp + bk * N * tn * Dp, Dp, nullptr};
  }
  Rows value_table(int64_t bk) const {
    if (element_direct) return {row_of(p.v, p.v_stride, bk / p.Hk, bk % p.Hk, 0), p.v_stride[2], p.plan.perm};
    return {vp + bk * N * tn * Dp, Dp, nullptr};
  }
  // whether packed rows are needed: by products (tiles) that cannot read the caller's, or by the element path
  bool packs_rows(bool tiles, bool elements) const { return (tiles && !direct) || (elements && !element_direct); }
  bool fwd_elements(int64_t g, int64_t m) const { return p.fwd_sparse && p.fwd_sparse[g * M + m]; }
  bool bwd_elements(int64_t g, int64_t n) const { return p.bwd_sparse && p.bwd_sparse[g * N + n]; }
  // a PARTIAL tile's vis, mixed (tm / MR each) and vis_t, and where entry e's lie in entry_vis
  int64_t vis_words() const { return 2 * (tm / MR) + (tnp + KG - 1) / KG; }
  uint64_t* entry_visibility(int64_t e) const { return entry_vis + entry_slot[e] * vis_words(); }
};

// Key block n of (batch, KV head) bk, packed: K^T and/or V^T (Dp x tnp) and K and/or V rows (tn x Dp), zero past the
// key extent and past D (every element written: the buffers are not zeroed beforehand).

// The transposed ones in W x W blocks of whole keys and whole vectors of D through registers (element by element,
// the packing of K^T was 3% of shared_question's forward at 4096 on AVX2), the rest element by element; in panels of
// PANEL keys, Dp rows of PANEL each, so that the columns a register tile reads are one contiguous run of Dp lines
// rather than Dp lines a whole tile row apart (AVX2, 4096: shared_question's and doc_causal's forward 1-3% faster,
// their backward 4-7%; partial tiles read few register tiles of each key block, so their reads of B are the least
// reused).
template <class T>
void pack_transposed(T* dst, const T* const* rows, int64_t cols, int64_t D, int64_t Dp, int64_t tnp) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::W;
  constexpr int64_t NC = PANEL<T>;
  auto at = [&](int64_t d, int64_t j) { return dst + j / NC * Dp * NC + d * NC + j % NC; };
  const int64_t cols_w = cols / W * W, D_w = D / W * W;
  for (int64_t j = 0; j < cols_w; j += W)
    for (int64_t d = 0; d < D_w; d += W) {
      V v[W];
      for (int t = 0; t < W; ++t) v[t] = load<V>(rows[j + t] + d);
      transpose<T>(v);
      for (int t = 0; t < W; ++t) store(at(d + t, j), v[t]);
    }
  for (int64_t d = 0; d < Dp; ++d) {
    if (d < D)
      for (int64_t j = d < D_w ? cols_w : 0; j < cols; ++j) *at(d, j) = rows[j][d];
    else
      for (int64_t j = 0; j < cols; ++j) *at(d, j) = 0;
    for (int64_t j = cols; j < tnp; ++j) *at(d, j) = 0;
  }
}

template <class T>
void pack_rows(T* dst, const T* const* rows, int64_t cols, int64_t D, int64_t Dp, int64_t tn) {
  for (int64_t j = 0; j < tn; ++j) copy_row(dst + j * Dp, j < cols ? rows[j] : nullptr, j < cols ? D : 0, Dp);
}

template <class T>
void pack_keys(Call<T>& c, int64_t unit, const T** krows, const T** vrows) {
  const AttentionProblem& p = c.p;
  const int64_t bk = unit / c.N, n = unit % c.N, b = bk / p.Hk, kv = bk % p.Hk;
  const int64_t cols = imin(c.tn, p.n_k - n * c.tn);
  for (int64_t j = 0; j < cols; ++j) {
    const int64_t tok = c.token(n * c.tn + j);
    krows[j] = c.row_of(p.k, p.k_stride, b, kv, tok);
    vrows[j] = c.row_of(p.v, p.v_stride, b, kv, tok);
  }
  if (c.kt) pack_transposed(c.kt_block(bk, n), krows, cols, p.D, c.Dp, c.tnp);
  if (c.vt) pack_transposed(c.vt_block(bk, n), vrows, cols, p.D, c.Dp, c.tnp);
  if (c.kp) pack_rows(c.kp_rows(bk, n), krows, cols, p.D, c.Dp, c.tn);
  if (c.vp) pack_rows(c.vp_rows(bk, n), vrows, cols, p.D, c.Dp, c.tn);
  // checked where the rows just read are still in cache (V's, where they are not packed, are read here only for this)
  check_rows(p, NOT_FINITE_K, cols, [&](int64_t j) { return krows[j]; });
  check_rows(p, NOT_FINITE_V, cols, [&](int64_t j) { return vrows[j]; });
}

template <class T>
void pack_all_keys(Call<T>& c, int threads) {
  parallel_for(c.p.B * c.p.Hk * c.N, threads,
               [](void* ctx, int64_t u, int) {
                 const T* krows[256];
                 const T* vrows[256];
                 pack_keys(*static_cast<Call<T>*>(ctx), u, krows, vrows);
               },
               &c);
}

// ------------------------------------------------------------------------------------------------------ masking

// Applies the plan's mask to a PARTIAL tile's scores: -inf where an element is masked, on the key groups `mixed` names
// for each row's register tile (tile_visibility: visible register tiles that hold a masked element; the others are
// never read or have nothing to mask). rows: valid query rows of the tile, r0 its first plan row; cols: its valid key
// columns (those past `cols` are set to -inf by the caller).
template <class T>
void mask_bits(T* s, int64_t ld, int64_t rows, int64_t cols, const uint32_t* words, int64_t tn,
               const uint64_t* mixed) {
  using V = typename Simd<T>::V;
  using I = typename Simd<T>::I;
  constexpr int W = Simd<T>::W;
  I lane;
  for (int i = 0; i < W; ++i) lane[i] = i;
  const V ninf = splat<V>(neg_inf<T>());
  const uint32_t low = W == 32 ? ~0u : (1u << W) - 1u;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = r * tn;  // tn and W divide 32 or each other: W bits never straddle a word
    for_runs<T>(mixed[r / MR], cols, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; j += W) {
        const int64_t bit = off + j;
        const uint32_t chunk = (words[bit >> 5] >> (bit & 31)) & low;
        const I seen = (splat<I>(static_cast<typename Simd<T>::Idx>(chunk)) >> lane) & 1;
        const V x = load<V>(s + r * ld + j);
        store(s + r * ld + j, seen == 0 ? ninf : x);
      }
    });
  }
}

// The same for an interval payload (iv: the tile's keys' LTS, LTE, UTS, UTE), by vectors of keys: lane for lane
// the bounds (put into planar arrays of the lanes' width, zero past cols: no masked range) against the row index.
template <class T>
void mask_intervals(T* s, int64_t ld, int64_t rows, int64_t r0, int64_t cols, const int32_t* iv,
                    typename Simd<T>::Idx* planar, int64_t tnp, const uint64_t* mixed) {
  using V = typename Simd<T>::V;
  using I = typename Simd<T>::I;
  using Idx = typename Simd<T>::Idx;
  constexpr int W = Simd<T>::W;
  Idx* lts = planar;
  Idx* lte = planar + tnp;
  Idx* uts = planar + 2 * tnp;
  Idx* ute = planar + 3 * tnp;
  const int64_t ncols = round_up<T>(cols, W);
  for (int64_t j = 0; j < ncols; ++j) {
    const bool key = j < cols;
    lts[j] = key ? iv[4 * j] : 0;
    lte[j] = key ? iv[4 * j + 1] : 0;
    uts[j] = key ? iv[4 * j + 2] : 0;
    ute[j] = key ? iv[4 * j + 3] : 0;
  }
  const V ninf = splat<V>(neg_inf<T>());
  for (int64_t r = 0; r < rows; ++r) {
    const I i = splat<I>(static_cast<Idx>(r0 + r));
    T* row = s + r * ld;
    for_runs<T>(mixed[r / MR], ncols, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; j += W) {
        const I masked = ((load<I>(lts + j) <= i) & (i < load<I>(lte + j))) |
                         ((load<I>(uts + j) <= i) & (i < load<I>(ute + j)));
        store(row + j, masked ? ninf : load<V>(row + j));
      }
    });
  }
}

// Which register tiles of a PARTIAL tile hold a visible element: vis[r / MR] bit (j / KG) for row r and key j (bits:
// exactly; intervals: each key group's rows from the first to the last visible one, a bound); vis_t[j / KG] bit
// (r / KG) the same by key group and groups of KG rows, for the transposed products of the backward (where vis_t is
// not null), whose K steps are those rows (by 32 rows, shared_question's dV and dK products at 4096 computed 4% more
// pairs). Products skip the rest (whose probabilities and score gradients are 0). mixed: those of vis that hold a
// masked element, the only ones the mask has to touch (about half of shared_question's visible ones at 4096: the
// others lie wholly inside a document, question or answer). rows: valid rows of the tile; cols: valid keys.
template <class T>
void tile_visibility(const Call<T>& c, int64_t g, int64_t m, int64_t n, int32_t payload, int64_t rows, int64_t cols,
                     uint64_t* vis, uint64_t* mixed, uint64_t* vis_t) {
  const AttentionProblem& p = c.p;
  const int64_t groups = (rows + MR - 1) / MR, key_groups = (cols + KG - 1) / KG;
  for (int64_t rg = 0; rg < c.tm / MR; ++rg) vis[rg] = mixed[rg] = 0;
  if (p.plan.intervals) {
    const int32_t* iv = p.plan.intervals + (g * p.n_k + n * c.tn) * 4;
    const int64_t r0 = m * c.tm, r1 = r0 + rows;
    for (int64_t kg = 0; kg < key_groups; ++kg) {
      int64_t lo = r1, hi = r0;  // rows [lo, hi) bound every visible row of the group's keys
      uint64_t masked_groups = 0;  // bit rg: a key of the group masks a row of row group rg
      for (int64_t j = kg * KG; j < imin(cols, (kg + 1) * KG); ++j) {
        const int64_t a0 = iv[4 * j], a1 = iv[4 * j + 1], b0 = iv[4 * j + 2], b1 = iv[4 * j + 3];
        const int64_t ranges[2][2] = {{a0, a1}, {b0, b1}};
        for (const int64_t* range : ranges) {
          const int64_t first = imax(range[0], r0), last = imin(range[1], r1) - 1;  // masked rows of the tile
          if (first <= last)
            masked_groups |= (uint64_t(2) << ((last - r0) / MR)) - (uint64_t(1) << ((first - r0) / MR));
        }
        auto masked = [&](int64_t i) { return (a0 <= i && i < a1) || (b0 <= i && i < b1); };
        // the first visible row is r0 or just past a masked range, the last r1 - 1 or just before one
        int64_t first = r1, last = r0 - 1;
        for (int64_t i : {r0, a1, b1})
          if (i >= r0 && i < r1 && !masked(i) && i < first) first = i;
        for (int64_t i : {r1 - 1, a0 - 1, b0 - 1})
          if (i >= r0 && i < r1 && !masked(i) && i > last) last = i;
        if (first <= last) lo = imin(lo, first), hi = imax(hi, last + 1);
      }
      for (int64_t rg = (lo - r0) / MR; lo < hi && rg <= (hi - 1 - r0) / MR; ++rg) vis[rg] |= uint64_t(1) << kg;
      for (int64_t rg = 0; rg < groups; ++rg) mixed[rg] |= ((masked_groups >> rg) & 1) << kg;
    }
  } else {
    const uint32_t* words = p.plan.bit_pool + payload * c.tile_words;
    for (int64_t r = 0; r < rows; ++r) {
      uint64_t seen = 0, part = 0;  // the row's groups, in registers (vis and mixed might alias)
      for (int64_t kg = 0; kg < key_groups; ++kg) {
        // the group's bits of row r: at most 32 keys from a 16-bit boundary, never past the row's last key
        const int64_t bit = r * c.tn + kg * KG, len = imin(KG, cols - kg * KG);
        uint64_t chunk = words[bit >> 5] >> (bit & 31);
        if ((bit & 31) + len > 32) chunk |= uint64_t(words[(bit >> 5) + 1]) << (32 - (bit & 31));
        const uint64_t all = len < 64 ? (uint64_t(1) << len) - 1 : ~uint64_t(0);
        chunk &= all;
        seen |= uint64_t(chunk != 0) << kg;
        part |= uint64_t(chunk != all) << kg;
      }
      vis[r / MR] |= seen;
      mixed[r / MR] |= part;
    }
  }
  for (int64_t rg = 0; rg < groups; ++rg) mixed[rg] &= vis[rg];
  for (int64_t kg = 0; vis_t && kg < (c.tnp + KG - 1) / KG; ++kg) {
    vis_t[kg] = 0;
    for (int64_t rg = 0; rg < groups; ++rg)
      if ((vis[rg] >> kg) & 1) vis_t[kg] |= uint64_t(1) << (rg * MR / KG);
  }
}

// Masks entry (g, m, n) of the plan: its payload if PARTIAL, and the columns past `cols` always.
// row0: the first of the `rows` rows of the tile that s holds (a multiple of MR), so a strip of a tile is masked alike.
template <class T>
void mask_tile(const Call<T>& c, T* s, int64_t row0, int64_t rows, int64_t g, int64_t m, int64_t n, uint8_t kind,
               int32_t payload, int64_t cols, typename Simd<T>::Idx* planar, const uint64_t* mixed) {
  const AttentionProblem& p = c.p;
  if (kind == PARTIAL_TILE) {
    if (p.plan.intervals)
      mask_intervals<T>(s, c.tnp, rows, m * c.tm + row0, cols, p.plan.intervals + (g * p.n_k + n * c.tn) * 4, planar,
                        c.tnp, mixed + row0 / MR);
    else  // row0 * tn is a multiple of 128 bits: MR rows of a multiple of 16 keys
      mask_bits<T>(s, c.tnp, rows, cols, p.plan.bit_pool + payload * c.tile_words + row0 * c.tn / 32, c.tn,
                   mixed + row0 / MR);
  }
  if (cols < c.tnp) {
    const T ninf = neg_inf<T>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = cols; j < c.tnp; ++j) s[r * c.tnp + j] = ninf;
  }
}

// ------------------------------------------------------------------------------------------------------ forward

// Rows the forward's element path takes through each phase together: a row's phases depend on one another from end
// to end (scores, their maximum, exponentials, the sum of V rows), two rows' do not, so the core overlaps one row's
// latencies with the other's work.
constexpr int ELEMENT_ROWS = 2;

// Thread scratch of the forward: the query tile, scores, output accumulator, row maxima and sums, interval bounds.
template <class T>
struct ForwardScratch {
  T *q, *s, *o, *mx, *l;
  typename Simd<T>::Idx* planar;
  static int64_t row_scores(const Call<T>& c) { return round_up<T>(c.p.n_k + Simd<T>::W, Simd<T>::W); }
  static int64_t scores(const Call<T>& c) {  // a tile's, or ELEMENT_ROWS rows' over every key on the element path
    return imax(c.tm * c.tnp, c.p.fwd_sparse ? ELEMENT_ROWS * row_scores(c) : 0);
  }
  static int64_t size(const Call<T>& c) {
    return 2 * c.tm * c.Dp + scores(c) + 2 * c.tm + 4 * c.tnp * (sizeof(typename Simd<T>::Idx) / sizeof(T) + 1);
  }
  ForwardScratch(const Call<T>& c, int thread) {
    q = c.scratch + thread * c.scratch_stride;
    s = q + c.tm * c.Dp;
    o = s + scores(c);
    mx = o + c.tm * c.Dp;
    l = mx + c.tm;
    planar = reinterpret_cast<typename Simd<T>::Idx*>(l + c.tm);
  }
};

// Online softmax over one tile of scores (rows x ncols, masked elements -inf; rows <= STRIP, a multiple of MR):
// row maxima and sums updated (in base 2: exponents are scores * scale2), the output rows rescaled, the scores
// replaced by their probabilities (0 where masked). Only the key groups vis names for a row's register tile (all
// where vis is null): the products read no others.
// Every row's maximum first, then every row's exponentials: a row's exponentials wait for its maximum (a fold across
// the lanes), and a partial tile's row holds only a few vectors of them; in two passes no row waits on its own. Both
// passes take the MR rows of a register tile (which see the same key groups) side by side, vector by vector: their
// exponentials as MR chains in steps (exp2v_n), each row's sum in its own order.
// Not inlined: inside the unit function its row sum competed for registers with everything else live there and was
// kept on the stack, a store and a load on every step of the sum.
template <class T>
__attribute__((noinline)) void online_softmax(const Call<T>& c, T* s, int64_t rows, int64_t ncols, T* o, T* mx, T* l,
                                              const uint64_t* vis) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::W;
  const T ninf = neg_inf<T>();
  const V hi = splat<V>(c.scale2), lo = splat<V>(c.scale2_lo), lowest = splat<V>(std::numeric_limits<T>::lowest());
  const int64_t ld = c.tnp;
  T new_max[STRIP];
  for (int64_t r0 = 0; r0 < rows; r0 += MR) {
    const uint64_t seen = vis ? vis[r0 / MR] : ALL_BLOCKS;
    if (!seen) continue;
    V top[MR];
    for (int u = 0; u < MR; ++u) top[u] = splat<V>(ninf);
    const T* row = s + r0 * ld;
    for_runs<T>(seen, ncols, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; j += W)
#pragma GCC unroll 16
        for (int u = 0; u < MR; ++u) top[u] = vmax(top[u], load<V>(row + u * ld + j));
    });
    for (int u = 0; u < MR; ++u) {
      const T row_max = hmax<T>(top[u]) * c.scale2;  // scale2 > 0: the maximum of the exponents
      new_max[r0 + u] = row_max > mx[r0 + u] ? row_max : mx[r0 + u];
    }
  }
  for (int64_t r0 = 0; r0 < rows; r0 += MR) {
    const uint64_t seen = vis ? vis[r0 / MR] : ALL_BLOCKS;
    if (!seen) continue;  // nothing here for these rows: their state stands, and no product reads their probabilities
    // rows with nothing visible yet are shifted by 0, so that exp2(-inf - shift) is 0 rather than NaN
    T shift[MR];
    V vshift[MR], sum[MR];
    for (int u = 0; u < MR; ++u) {
      shift[u] = new_max[r0 + u] == ninf ? T(0) : new_max[r0 + u];
      vshift[u] = splat<V>(shift[u]);
      sum[u] = V{};
    }
    T* row = s + r0 * ld;
    for_runs<T>(seen, ncols, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; j += W) {
        V e[MR];
#pragma GCC unroll 16
        for (int u = 0; u < MR; ++u) {
          const V x = vmax(load<V>(row + u * ld + j), lowest);  // a masked -inf times a negative low part: NaN
          e[u] = x * lo + (x * hi - vshift[u]);  // fused multiply-adds: rounded once, where it is small
        }
        exp2v_n<T, true, MR>(e);
#pragma GCC unroll 16
        for (int u = 0; u < MR; ++u) {
          store(row + u * ld + j, e[u]);
          sum[u] += e[u];
        }
      }
    });
    for (int u = 0; u < MR; ++u) {
      const int64_t r = r0 + u;
      // exp2(-inf) is 0; a row that has seen nothing yet has o = 0 (no call of exp2s, no rescaling: one in five of
      // shared_question's tiles at 4096 is its rows' first)
      const bool first = mx[r] == ninf;
      const T alpha = mx[r] == shift[u] ? T(1) : first ? T(0) : exp2s(mx[r] - shift[u]);
      l[r] = alpha * l[r] + hsum<T>(sum[u]);
      if (alpha != T(1) && !first) {
        const V va = splat<V>(alpha);
        for (int64_t d = 0; d < c.Dp; d += W) store(o + r * c.Dp + d, load<V>(o + r * c.Dp + d) * va);
      }
      mx[r] = new_max[r];
    }
  }
}

// Row tok of (batch, head) bh's output and lse from its unnormalised output o (D elements), the row's maximum
// exponent mx and sum of exponentials l (base 2); zeros and -inf where the row saw no key.
template <class T>
void write_row(const AttentionProblem& p, int64_t bh, int64_t tok, const T* o, T mx, T l) {
  T* dst = static_cast<T*>(p.out_w) + (bh * p.n_q + tok) * p.D;
  T* lse = static_cast<T*>(p.lse_w) + bh * p.n_q + tok;
  // a row with a visible key has l >= 1 (its maximum contributes 2^0)
  if (l > 0) {
    for (int64_t d = 0; d < p.D; ++d) dst[d] = o[d] / l;
    *lse = static_cast<T>((double(mx) + log2s(double(l))) * LN2);  // in double, so that it is rounded once
  } else {
    for (int64_t d = 0; d < p.D; ++d) dst[d] = 0;
    *lse = neg_inf<T>();
  }
}

// The element path of a sparse query block: each row's keys one by one (dot products, one exact softmax over the
// row, a sum of V rows), for rows whose tiles are mostly masked; writes the rows' outputs and lse. Rows are read
// where they lie when D is whole vectors (else through w.q, zero-padded). ELEMENT_ROWS rows go through each phase
// together.
template <class T>
void forward_elements(const Call<T>& c, ForwardScratch<T>& w, int64_t g, int64_t bh, int64_t bk, int64_t r0,
                      int64_t rows, int64_t key_end) {
  using V = typename Simd<T>::V;
  using I = typename Simd<T>::I;
  constexpr int W = Simd<T>::W;
  constexpr int R = ELEMENT_ROWS;
  const AttentionProblem& p = c.p;
  const int64_t b = bh / p.H, h = bh % p.H;
  const V hi = splat<V>(c.scale2), lo = splat<V>(c.scale2_lo), lowest = splat<V>(std::numeric_limits<T>::lowest());
  const V ninf = splat<V>(neg_inf<T>());
  I lane;
  for (int i = 0; i < W; ++i) lane[i] = i;
  const typename Call<T>::Rows key_rows = c.key_table(bk), value_rows = c.value_table(bk);
  const int64_t* row_ptr = p.erow_ptr + g * (p.n_q + 1) + r0;
  const int64_t scores = ForwardScratch<T>::row_scores(c);
  for (int64_t r1 = 0; r1 < rows; r1 += R) {
    const int n = static_cast<int>(imin(R, rows - r1));
    const int32_t* keys[R];
    int64_t count[R], tok[R];
    T row_max[R], l[R];
    for (int i = 0; i < n; ++i) {
      keys[i] = p.ecols + row_ptr[r1 + i];
      count[i] = row_ptr[r1 + i + 1] - row_ptr[r1 + i];
      while (count[i] > 0 && keys[i][count[i] - 1] >= key_end) --count[i];  // keys ascend
      tok[i] = c.token(r0 + r1 + i);
      if (r1 + R + i < rows)  // rows lie anywhere
        prefetch(c.row_of(p.q, p.q_stride, b, h, c.token(r0 + r1 + R + i)), p.D);
    }
    for (int i = 0; i < n; ++i) {
      const T* q = c.row_of(p.q, p.q_stride, b, h, tok[i]);
      if (p.D != c.De) {
        copy_row(w.q + i * c.De, q, p.D, c.De);
        q = w.q + i * c.De;
      }
      dots(q, c.De, count[i], [&](int64_t t) { return key_rows(keys[i][t]); }, w.s + i * scores);
    }
    for (int i = 0; i < n; ++i) {
      T* sc = w.s + i * scores;
      // lanes past count (of the last vector) hold scores of a repeated key: -inf for the maximum, 0 for the sums
      V top = ninf;
      for (int64_t t = 0; t < count[i]; t += W)
        top = vmax(top, lane < static_cast<typename Simd<T>::Idx>(count[i] - t) ? load<V>(sc + t) : ninf);
      row_max[i] = hmax<T>(top) * c.scale2;
      const V vshift = splat<V>(row_max[i] == neg_inf<T>() ? T(0) : row_max[i]);
      V sum{};
      for (int64_t t = 0; t < count[i]; t += W) {
        const V x = vmax(load<V>(sc + t), lowest);
        const V e = exp2v<T, true>(x * lo + (x * hi - vshift));
        const V kept = lane < static_cast<typename Simd<T>::Idx>(count[i] - t) ? e : V{};
        store(sc + t, kept);
        sum += kept;
      }
      l[i] = hsum<T>(sum);
    }
    for (int i = 0; i < n; ++i) {
      T* o = w.o + i * c.De;
      std::memset(o, 0, c.De * sizeof(T));
      weighted_rows(o, c.De, w.s + i * scores, count[i], [&](int64_t t) { return value_rows(keys[i][t]); });
    }
    for (int i = 0; i < n; ++i) write_row(p, bh, tok[i], w.o + i * c.De, row_max[i], l[i]);
  }
}

// c.entry_vis of the PARTIAL entries [e_begin, e_end) of one direction's CSR (kind, payload_idx: its arrays), entry e
// of mask group g at tile (m_of(e), n_of(e))
template <class T, class M, class N>
void visibility_of_entries(Call<T>& c, int64_t g, int64_t e_begin, int64_t e_end, const uint8_t* kind,
                           const int32_t* payload_idx, M m_of, N n_of) {
  const AttentionProblem& p = c.p;
  for (int64_t e = e_begin; e < e_end; ++e) {
    if (kind[e] != PARTIAL_TILE) continue;
    const int64_t m = m_of(e), n = n_of(e);
    uint64_t* vis = c.entry_visibility(e);
    tile_visibility(c, g, m, n, payload_idx ? payload_idx[e] : -1, imin(c.tm, p.n_q - m * c.tm),
                    imin(c.tn, p.n_k - n * c.tn), vis, vis + c.tm / MR, vis + 2 * (c.tm / MR));
  }
}

// visibility_of_entries of the forward's entries of (group, query block) u that take the tiles' path
template <class T>
void visibility_of_row(Call<T>& c, int64_t u) {
  const PlanPointers& plan = c.p.plan;
  const int64_t g = u / c.M, m = u % c.M;
  if (c.fwd_elements(g, m)) return;
  visibility_of_entries(c, g, plan.row_ptr[g * (c.M + 1) + m], plan.row_ptr[g * (c.M + 1) + m + 1], plan.kind,
                        plan.payload_idx, [&](int64_t) { return m; }, [&](int64_t e) { return plan.col_idx[e]; });
}

// The PARTIAL entries' visibility made once per call for all the heads that share the plan's tiles, where `shared`
// (several heads to a mask, and in the forward no key_lens, which cut a tile's keys by batch): c.entry_vis, with
// c.entry_slot for the direction's entries (kind: theirs), filled by of_block for each of `blocks` (group, block)s.
// Made per head, it was 2% of shared_question's forward at 4096 (AVX2); by 16-key groups it made bigbird's backward
// 1-6% slower (AVX-512).
template <class T>
struct SharedVisibility {
  Buffer<int64_t> slots;
  Buffer<uint64_t> vis;
  static int64_t partials(const uint8_t* kind, int64_t entries) {
    int64_t count = 0;
    for (int64_t e = 0; e < entries; ++e) count += kind[e] == PARTIAL_TILE;
    return count;
  }
  SharedVisibility(Call<T>& c, bool shared, const uint8_t* kind, int64_t entries, int64_t blocks, int threads,
                   void (*of_block)(void*, int64_t, int))
      : slots(shared ? entries : 0), vis(shared ? partials(kind, entries) * c.vis_words() : 0) {
    if (!shared) return;
    int64_t slot = 0;
    for (int64_t e = 0; e < entries; ++e) slots.data[e] = kind[e] == PARTIAL_TILE ? slot++ : -1;
    if (!slot) return;
    c.entry_slot = slots.data;
    c.entry_vis = vis.data;
    parallel_for(blocks, threads, of_block, &c);
  }
};

template <class T>
void forward_unit(Call<T>& c, int64_t unit, int thread) {
  const AttentionProblem& p = c.p;
  // head by head (the threads share one head's K and V in cache), each head's query blocks heaviest first
  const int64_t bh = unit / c.M, rank = unit % c.M, b = bh / p.H, h = bh % p.H, kv = h / c.rep;
  const int64_t g = c.group(b, h);
  const int64_t m = p.plan.m_order ? p.plan.m_order[g * c.M + rank] : rank;
  const int64_t r0 = m * c.tm, rows = imin(c.tm, p.n_q - r0), rows_p = round_up<T>(rows, MR);
  ForwardScratch<T> w(c, thread);
  int64_t key_end = p.n_k;
  if (p.key_lens) key_end = imax(0, imin(p.n_k, p.key_lens[b]));
  const int64_t bk = b * p.Hk + kv;
  check_rows(p, NOT_FINITE_Q, rows, [&](int64_t r) { return c.row_of(p.q, p.q_stride, b, h, c.token(r0 + r)); });
  if (c.fwd_elements(g, m)) return forward_elements<T>(c, w, g, bh, bk, r0, rows, key_end);
  const T ninf = neg_inf<T>();
  // Q's rows are read where they lie where they are whole register tiles (no perm, D = Dp, no padding rows); else
  // through w.q, zero-padded
  const bool q_direct = c.direct && rows == rows_p;
  const T* q_rows = q_direct ? c.row_of(p.q, p.q_stride, b, h, r0) : w.q;
  const int64_t q_ld = q_direct ? p.q_stride[2] : c.Dp;
  for (int64_t r = 0; r < rows_p; ++r) {
    if (!q_direct)
      copy_row(w.q + r * c.Dp, r < rows ? c.row_of(p.q, p.q_stride, b, h, c.token(r0 + r)) : nullptr,
               r < rows ? p.D : 0, c.Dp);
    for (int64_t d = 0; d < c.Dp; ++d) w.o[r * c.Dp + d] = 0;
    w.mx[r] = ninf;
    w.l[r] = 0;
  }
  const int64_t* row_ptr = p.plan.row_ptr + g * (c.M + 1);
  uint64_t own[2 * 256 / MR];
  for (int64_t e = row_ptr[m]; e < row_ptr[m + 1]; ++e) {
    const int64_t n = p.plan.col_idx[e], c0 = n * c.tn;
    if (c0 >= key_end) break;  // key blocks ascend
    const int64_t cols = imin(c.tn, key_end - c0);
    // a PARTIAL tile's register tiles that see nothing are skipped by every product
    const bool partial = p.plan.kind[e] == PARTIAL_TILE;
    const int32_t payload = p.plan.payload_idx ? p.plan.payload_idx[e] : -1;
    const uint64_t* vis = c.entry_vis && partial ? c.entry_visibility(e) : own;
    const uint64_t* mixed = vis + c.tm / MR;
    if (partial && !c.entry_vis) tile_visibility(c, g, m, n, payload, rows, cols, own, own + c.tm / MR, nullptr);
    auto score_blocks = [&](int64_t i, int64_t j) { return panel_seen<T>(vis[i], j) ? ALL_BLOCKS : uint64_t(0); };
    auto key_blocks = [&](int64_t i, int64_t) { return vis[i]; };
    const int64_t ncols = round_up<T>(cols, Simd<T>::W);
    // the tile in strips of STRIP rows: scores, mask, softmax and P V of a strip while its scores are in L1
    for (int64_t r0s = 0; r0s < rows_p; r0s += STRIP) {
      const int64_t rs = imin(STRIP, rows_p - r0s), g0 = r0s / MR;
      T* s = w.s + r0s * c.tnp;
      T* o = w.o + r0s * c.Dp;
      const T* q = q_rows + r0s * q_ld;
      auto strip_scores = [&](int64_t i, int64_t j) { return score_blocks(i + g0, j); };
      auto strip_keys = [&](int64_t i, int64_t j) { return key_blocks(i + g0, j); };
      if (c.score_rows) {
        const typename Call<T>::Rows key_rows = c.key_table(bk);
        for (int64_t r = 0; r < rs; ++r) {
          if (r0s + r < rows)
            dots(q + r * q_ld, c.De, cols, [&](int64_t j) { return key_rows(c0 + j); }, s + r * c.tnp);
          else
            for (int64_t j = 0; j < c.tnp; ++j) s[r * c.tnp + j] = 0;
        }
      } else if (partial) {
        gemm<T, false>(rs, c.tnp, p.D, q, q_ld, 1, c.kt_block(bk, n), PANEL<T>, s, c.tnp, strip_scores, c.Dp);
      } else {
        gemm<T, false>(rs, c.tnp, p.D, q, q_ld, 1, c.kt_block(bk, n), PANEL<T>, s, c.tnp, AllBlocks{}, c.Dp);
      }
      mask_tile<T>(c, s, r0s, rs, g, m, n, p.plan.kind[e], payload, cols, w.planar, mixed);
      online_softmax<T>(c, s, rs, ncols, o, w.mx + r0s, w.l + r0s, partial ? vis + g0 : nullptr);
      if (partial)
        gemm<T, true, KG, true>(rs, c.Dp, cols, s, c.tnp, 1, c.value_rows(bk, n), c.value_ld(), o, c.Dp, strip_keys);
      else
        gemm<T, true, KB, true>(rs, c.Dp, cols, s, c.tnp, 1, c.value_rows(bk, n), c.value_ld(), o, c.Dp);
    }
  }
  for (int64_t r = 0; r < rows; ++r) write_row(p, bh, c.token(r0 + r), w.o + r * c.Dp, w.mx[r], w.l[r]);
}

// Threads worth starting: one where the call's products (the plan's entries for every (batch, head)) are too small to
// repay starting more (tens of microseconds each), e.g. decoding a few tokens.
template <class T>
int useful_threads(const Call<T>& c, int threads) {
  const AttentionProblem& p = c.p;
  const int64_t groups = p.mask_B * p.mask_H;
  const double entries = double(p.plan.row_ptr[groups * (c.M + 1) - 1] - p.plan.row_ptr[0]) * double(c.BH) / double(groups);
  return entries * double(c.tm * c.tn) * double(p.D) < 2e6 ? 1 : threads;
}

template <class T>
void run_forward(const AttentionProblem& p, int threads) {
  Call<T> c(p);
  threads = useful_threads(c, threads);
  // which paths run: tiles (K^T packed; V rows read as they are where they can be) and elements
  bool tiles = !p.fwd_sparse, elements = false;
  for (int64_t i = 0; p.fwd_sparse && i < p.mask_B * p.mask_H * c.M; ++i) (p.fwd_sparse[i] ? elements : tiles) = true;
  // K^T pays for its packing (a transposed copy of K) where enough query rows read each KV head's keys; for fewer
  // (decoding) the tiles' scores are dot products of the K rows themselves
  c.score_rows = p.n_q * c.rep <= 16;
  const bool packs_kt = tiles && !c.score_rows;
  const int64_t kv_tiles = p.B * p.Hk * c.N * c.Dp * c.tnp, kv_rows = p.B * p.Hk * c.N * c.tn * c.Dp;
  const bool values = c.packs_rows(tiles, elements), keys = c.packs_rows(false, elements || (tiles && c.score_rows));
  Buffer<T> kt(packs_kt ? kv_tiles : 0), vp(values ? kv_rows : 0), kp(keys ? kv_rows : 0);
  c.kt = packs_kt ? kt.data : nullptr;
  c.vp = values ? vp.data : nullptr;
  c.kp = keys ? kp.data : nullptr;
  pack_all_keys(c, threads);
  const int64_t groups = p.mask_B * p.mask_H;
  SharedVisibility<T> shared(c, tiles && !p.key_lens && c.BH > groups, p.plan.kind,
                             p.plan.row_ptr[groups * (c.M + 1) - 1], groups * c.M, threads,
                             [](void* ctx, int64_t u, int) { visibility_of_row(*static_cast<Call<T>*>(ctx), u); });
  const int64_t units = c.M * c.BH;
  threads = static_cast<int>(imax(1, imin(threads, units)));
  c.scratch_stride = round_up<T>(ForwardScratch<T>::size(c), 64);
  Buffer<T> scratch(threads * c.scratch_stride);
  c.scratch = scratch.data;
  parallel_for(units, threads,
               [](void* ctx, int64_t u, int t) { forward_unit(*static_cast<Call<T>*>(ctx), u, t); }, &c);
}

// ------------------------------------------------------------------------------------------------------ backward

template <class T>
struct BackwardScratch {
  T *s, *dp, *dk, *dv;
  typename Simd<T>::Idx* planar;
  static int64_t scores(const Call<T>& c) {  // a tile's, or one key's list over every query on the element path
    return round_up<T>(imax(c.tm * c.tnp, c.p.bwd_sparse ? c.p.n_q + Simd<T>::W : 0), Simd<T>::W);
  }
  static int64_t size(const Call<T>& c) {
    return 2 * scores(c) + 2 * c.tnp * c.Dp + 4 * c.tnp * (sizeof(typename Simd<T>::Idx) / sizeof(T) + 1);
  }
  BackwardScratch(const Call<T>& c, int thread) {
    s = c.scratch + thread * c.scratch_stride;
    dp = s + scores(c);
    dk = dp + scores(c);
    dv = dk + c.tnp * c.Dp;
    planar = reinterpret_cast<typename Simd<T>::Idx*>(dv + c.tnp * c.Dp);
  }
};

// Query block m of (batch, head) bh, packed: Q, dO, lse in base 2, delta = rowsum(dO * O) (each rounded once).
template <class T>
void pack_queries(Call<T>& c, int64_t unit) {
  const AttentionProblem& p = c.p;
  const int64_t bh = unit / c.M, m = unit % c.M, b = bh / p.H, h = bh % p.H;
  const T inf = std::numeric_limits<T>::infinity();
  const T* lse = static_cast<const T*>(p.lse) + bh * p.n_q;
  const int64_t r0 = m * c.tm, rows = imin(c.tm, p.n_q - r0);
  for (int64_t r = r0; r < r0 + c.tm; ++r) {
    const int64_t at = bh * c.M * c.tm + r;
    if (r >= p.n_q) {  // rows past n_q: zero, and P = 0
      std::memset(c.qp + at * c.Dp, 0, c.Dp * sizeof(T));
      std::memset(c.dop + at * c.Dp, 0, c.Dp * sizeof(T));
      c.lse2[2 * at] = inf;
      c.lse2[2 * at + 1] = 0;
      c.delta[at] = 0;
      continue;
    }
    const int64_t tok = c.token(r);
    const T* q = c.row_of(p.q, p.q_stride, b, h, tok);
    const T* dout = c.row_of(p.dout, p.do_stride, b, h, tok);
    const T* o = c.row_of(p.out, p.o_stride, b, h, tok);
    if (r + 1 < p.n_q) {  // rows lie anywhere
      const int64_t next = c.token(r + 1);
      prefetch(c.row_of(p.q, p.q_stride, b, h, next), p.D);
      prefetch(c.row_of(p.dout, p.do_stride, b, h, next), p.D);
      prefetch(c.row_of(p.out, p.o_stride, b, h, next), p.D);
    }
    copy_row(c.qp + at * c.Dp, q, p.D, c.Dp);
    copy_row(c.dop + at * c.Dp, dout, p.D, c.Dp);
    c.delta[at] = static_cast<T>(dot_double(dout, o, p.D));
    // +inf on rows that see no key makes P = exp2(scores - inf) = 0 there, whatever the scores are
    const double lse2 = lse[tok] == -inf ? double(inf) : double(lse[tok]) * LOG2E;
    c.lse2[2 * at] = static_cast<T>(lse2);
    c.lse2[2 * at + 1] = lse[tok] == -inf ? T(0) : static_cast<T>(lse2 - double(c.lse2[2 * at]));
  }
  // checked where the rows just read are still in cache
  auto row = [&](const void* base, const int64_t* stride) {
    return [&, base, stride](int64_t r) { return c.row_of(base, stride, b, h, c.token(r0 + r)); };
  };
  check_rows(p, NOT_FINITE_Q, rows, row(p.q, p.q_stride));
  check_rows(p, NOT_FINITE_DOUT, rows, row(p.dout, p.do_stride));
  check_rows(p, NOT_FINITE_OUT, rows, row(p.out, p.o_stride));
}

// The element path of a sparse key block n: each key's queries one by one (the dot products, then P and dS for the
// whole list at once, then the sums), into w.dk and w.dv (zeroed) and the unit's dq rows.
template <class T>
void backward_elements(const Call<T>& c, BackwardScratch<T>& w, int64_t g, int64_t bk, int64_t n, const T* qp,
                       const T* dop, const T* lse2, const T* delta, T* dq) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::W;
  const AttentionProblem& p = c.p;
  const V hi = splat<V>(c.scale2), lo = splat<V>(c.scale2_lo), lowest = splat<V>(std::numeric_limits<T>::lowest());
  typename Simd<T>::I lane;
  for (int i = 0; i < W; ++i) lane[i] = i;
  const int64_t c0 = n * c.tn, cols = imin(c.tn, p.n_k - c0);
  for (int64_t j = 0; j < cols; ++j) {
    const int64_t* ptr = p.ecol_ptr + g * (p.n_k + 1) + c0 + j;
    const int32_t* queries = p.erows + ptr[0];
    const int64_t count = ptr[1] - ptr[0];
    const T* k = c.key_table(bk)(c0 + j);
    const T* v = c.value_table(bk)(c0 + j);
    if (j + 1 < cols) {  // rows lie anywhere
      prefetch(c.key_table(bk)(c0 + j + 1), c.De);
      prefetch(c.value_table(bk)(c0 + j + 1), c.De);
    }
    dots(k, c.De, count, [&](int64_t t) { return qp + queries[t] * c.Dp; }, w.s);
    dots(v, c.De, count, [&](int64_t t) { return dop + queries[t] * c.Dp; }, w.dp);
    // P and dS W queries at a time, their lse and delta gathered in registers; lanes past count (a repeated query's
    // scores) are 0
    for (int64_t t = 0; t < count; t += W) {
      V l2, l2_lo, dl;
      for (int i = 0; i < W; ++i) {
        const int64_t at = queries[t + i < count ? t + i : t];
        l2[i] = lse2[2 * at];
        l2_lo[i] = lse2[2 * at + 1];
        dl[i] = delta[at];
      }
      const V x = vmax(load<V>(w.s + t), lowest);
      const V prob = exp2v<T>((x * hi - l2) + (x * lo - l2_lo));
      const V kept = lane < static_cast<typename Simd<T>::Idx>(count - t) ? prob : V{};
      store(w.s + t, kept);
      store(w.dp + t, kept * (load<V>(w.dp + t) - dl));  // dS
    }
    weighted_rows(w.dv + j * c.Dp, c.De, w.s, count, [&](int64_t t) { return dop + queries[t] * c.Dp; });
    weighted_rows(w.dk + j * c.Dp, c.De, w.dp, count, [&](int64_t t) { return qp + queries[t] * c.Dp; });
    for (int64_t t = 0; t < count; ++t) axpy(dq + queries[t] * c.Dp, w.dp[t], k, c.De);
  }
}

// visibility_of_entries of the backward's entries of (group, key block) u that take the tiles' path
template <class T>
void visibility_of_column(Call<T>& c, int64_t u) {
  const PlanPointers& plan = c.p.plan;
  const int64_t g = u / c.N, n = u % c.N;
  if (c.bwd_elements(g, n)) return;
  visibility_of_entries(c, g, plan.col_ptr[g * (c.N + 1) + n], plan.col_ptr[g * (c.N + 1) + n + 1], plan.bwd_kind,
                        plan.bwd_payload_idx, [&](int64_t e) { return plan.row_idx[e]; }, [&](int64_t) { return n; });
}

// Key blocks [chunk_begin[g, i], chunk_begin[g, i + 1]) of (batch, head) bh: dK, dV of those blocks (for this head),
// and this range's share of dQ.
template <class T>
void backward_unit(Call<T>& c, int64_t unit, int thread) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::W;
  const AttentionProblem& p = c.p;
  const int64_t bh = unit / c.chunks, chunk = unit % c.chunks, b = bh / p.H, h = bh % p.H, kv = h / c.rep;
  const int64_t g = c.group(b, h), bk = b * p.Hk + kv;
  const int64_t Mq = c.M * c.tm;
  BackwardScratch<T> w(c, thread);
  T* dq = c.dq_acc + (bh * c.chunks + chunk) * Mq * c.Dp;
  // only the query blocks the range's entries name, zeroed by the unit's thread: not the whole buffer in one thread
  // before the units, while the other waited (shared_question at 4096, 2 threads: about 1 ms a call)
  const int64_t* touched = c.chunk_rows + 2 * (c.group(b, h) * c.chunks + chunk);
  if (touched[0] <= touched[1])
    std::memset(dq + touched[0] * c.tm * c.Dp, 0, (touched[1] + 1 - touched[0]) * c.tm * c.Dp * sizeof(T));
  const T* qp = c.qp + bh * Mq * c.Dp;
  const T* dop = c.dop + bh * Mq * c.Dp;
  const T* lse2 = c.lse2 + 2 * bh * Mq;
  const T* delta = c.delta + bh * Mq;
  const int64_t* col_ptr = p.plan.col_ptr + g * (c.N + 1);
  const int64_t* bounds = c.chunk_begin + g * (c.chunks + 1);
  uint64_t own[2 * 256 / MR + 256 / KG];
  for (int64_t n = bounds[chunk]; n < bounds[chunk + 1]; ++n) {
    const int64_t c0 = n * c.tn, cols = imin(c.tn, p.n_k - c0), cols_p = round_up<T>(cols, MR);
    std::memset(w.dk, 0, c.tnp * c.Dp * sizeof(T));
    std::memset(w.dv, 0, c.tnp * c.Dp * sizeof(T));
    if (c.bwd_elements(g, n)) backward_elements<T>(c, w, g, bk, n, qp, dop, lse2, delta, dq);
    for (int64_t e = c.bwd_elements(g, n) ? col_ptr[n + 1] : col_ptr[n]; e < col_ptr[n + 1]; ++e) {
      const int64_t m = p.plan.row_idx[e], r0 = m * c.tm;
      const int64_t rows = imin(c.tm, p.n_q - r0), rows_p = round_up<T>(rows, MR);
      const T* q = qp + r0 * c.Dp;
      const T* dout = dop + r0 * c.Dp;
      // as in forward_unit: a PARTIAL tile's register tiles that see nothing are skipped by every product
      const bool partial = p.plan.bwd_kind[e] == PARTIAL_TILE;
      const int32_t payload = p.plan.bwd_payload_idx ? p.plan.bwd_payload_idx[e] : -1;
      const uint64_t* vis = c.entry_vis && partial ? c.entry_visibility(e) : own;
      const uint64_t *mixed = vis + c.tm / MR, *vis_t = mixed + c.tm / MR;
      if (partial && !c.entry_vis)
        tile_visibility(c, g, m, n, payload, rows, cols, own, own + c.tm / MR, own + 2 * (c.tm / MR));
      auto score_blocks = [&](int64_t i, int64_t j) {
        return !partial || panel_seen<T>(vis[i], j) ? ALL_BLOCKS : uint64_t(0);
      };
      auto key_blocks = [&](int64_t i, int64_t) { return partial ? vis[i] : ALL_BLOCKS; };
      auto query_blocks = [&](int64_t i, int64_t) { return partial ? vis_t[i * MR / KG] : ALL_BLOCKS; };
      gemm<T, false>(rows_p, c.tnp, p.D, q, c.Dp, 1, c.kt_block(bk, n), PANEL<T>, w.s, c.tnp, score_blocks, c.Dp);
      mask_tile<T>(c, w.s, 0, rows_p, g, m, n, p.plan.bwd_kind[e], payload, cols, w.planar, mixed);
      gemm<T, false>(rows_p, c.tnp, p.D, dout, c.Dp, 1, c.vt_block(bk, n), PANEL<T>, w.dp, c.tnp, score_blocks, c.Dp);
      const V hi = splat<V>(c.scale2), lo = splat<V>(c.scale2_lo);
      const V lowest = splat<V>(std::numeric_limits<T>::lowest());
      // P and dS by register tiles of rows (MR rows side by side, their exponentials in steps, as in online_softmax)
      for (int64_t r = 0; r < rows_p; r += MR) {
        V l2[MR], l2_lo[MR], dl[MR];
        for (int u = 0; u < MR; ++u) {
          l2[u] = splat<V>(lse2[2 * (r0 + r + u)]);
          l2_lo[u] = splat<V>(lse2[2 * (r0 + r + u) + 1]);
          dl[u] = splat<V>(delta[r0 + r + u]);
        }
        T* srow = w.s + r * c.tnp;
        T* drow = w.dp + r * c.tnp;
        const uint64_t seen = partial ? vis[r / MR] : ALL_BLOCKS;
        for (int64_t j = 0; j < c.tnp; j += W) {
          if (!((seen >> (j / KG)) & 1)) {  // unseen: 0, read by the transposed products beside seen rows
            for (int u = 0; u < MR; ++u) {
              store(srow + u * c.tnp + j, V{});
              store(drow + u * c.tnp + j, V{});
            }
            continue;
          }
          V prob[MR];
#pragma GCC unroll 16
          for (int u = 0; u < MR; ++u) {
            const V x = vmax(load<V>(srow + u * c.tnp + j), lowest);  // as in online_softmax
            prob[u] = (x * hi - l2[u]) + (x * lo - l2_lo[u]);
          }
          exp2v_n<T, false, MR>(prob);
#pragma GCC unroll 16
          for (int u = 0; u < MR; ++u) {
            store(srow + u * c.tnp + j, prob[u]);
            store(drow + u * c.tnp + j, prob[u] * (load<V>(drow + u * c.tnp + j) - dl[u]));  // dS
          }
        }
      }
      // dV += P^T dO, dK += dS^T Q, dQ += dS K (dK and dQ times scale at the end)
      gemm<T, true, KG>(cols_p, c.Dp, rows_p, w.s, 1, c.tnp, dout, c.Dp, w.dv, c.Dp, query_blocks);
      gemm<T, true, KG>(cols_p, c.Dp, rows_p, w.dp, 1, c.tnp, q, c.Dp, w.dk, c.Dp, query_blocks);
      gemm<T, true, KG>(rows_p, c.Dp, cols, w.dp, c.tnp, 1, c.key_rows(bk, n), c.key_ld(), dq + r0 * c.Dp, c.Dp,
                           key_blocks);
    }
    const T scale = static_cast<T>(p.scale);
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t tok = c.token(c0 + j);
      if (c.rep == 1) {
        T* dk = static_cast<T*>(p.dk) + (bk * p.n_k + tok) * p.D;
        T* dv = static_cast<T*>(p.dv) + (bk * p.n_k + tok) * p.D;
        for (int64_t d = 0; d < p.D; ++d) {
          dk[d] = w.dk[j * c.Dp + d] * scale;
          dv[d] = w.dv[j * c.Dp + d];
        }
      } else {  // this query head's share, summed over the KV head's query heads afterwards
        T* dk = c.dkh + (bh * c.N * c.tnp + c0 + j) * c.Dp;
        T* dv = c.dvh + (bh * c.N * c.tnp + c0 + j) * c.Dp;
        for (int64_t d = 0; d < p.D; ++d) {
          dk[d] = w.dk[j * c.Dp + d] * scale;
          dv[d] = w.dv[j * c.Dp + d];
        }
      }
    }
  }
}

// dQ rows of query block m of (batch, head) bh: the shares of the ranges that name the block summed in order (the
// others' are zeros), times scale, in caller order.
template <class T>
void finish_dq(Call<T>& c, int64_t unit) {
  const AttentionProblem& p = c.p;
  const int64_t bh = unit / c.M, m = unit % c.M;
  const int64_t Mq = c.M * c.tm;
  const int64_t* touched = c.chunk_rows + 2 * c.group(bh / p.H, bh % p.H) * c.chunks;
  const T scale = static_cast<T>(p.scale);
  for (int64_t r = m * c.tm; r < imin(p.n_q, (m + 1) * c.tm); ++r) {
    T* dst = static_cast<T*>(p.dq) + (bh * p.n_q + c.token(r)) * p.D;
    const T* src = c.dq_acc + (bh * c.chunks * Mq + r) * c.Dp;
    bool first = true;
    for (int64_t i = 0; i < c.chunks; ++i) {
      if (m < touched[2 * i] || m > touched[2 * i + 1]) continue;
      for (int64_t d = 0; d < p.D; ++d) dst[d] = first ? src[i * Mq * c.Dp + d] : dst[d] + src[i * Mq * c.Dp + d];
      first = false;
    }
    for (int64_t d = 0; d < p.D; ++d) dst[d] = first ? T(0) : dst[d] * scale;
  }
}

// GQA: dK and dV rows of key block n of (batch, KV head) bk, the query heads' shares summed in head order.
template <class T>
void finish_dkdv(Call<T>& c, int64_t unit) {
  const AttentionProblem& p = c.p;
  const int64_t bk = unit / c.N, n = unit % c.N, b = bk / p.Hk, kv = bk % p.Hk;
  for (int64_t j = n * c.tn; j < imin(p.n_k, (n + 1) * c.tn); ++j) {
    const int64_t tok = c.token(j);
    T* dk = static_cast<T*>(p.dk) + (bk * p.n_k + tok) * p.D;
    T* dv = static_cast<T*>(p.dv) + (bk * p.n_k + tok) * p.D;
    for (int64_t d = 0; d < p.D; ++d) dk[d] = dv[d] = 0;
    for (int64_t i = 0; i < c.rep; ++i) {
      const int64_t bh = b * p.H + kv * c.rep + i;
      const T* sk = c.dkh + (bh * c.N * c.tnp + j) * c.Dp;
      const T* sv = c.dvh + (bh * c.N * c.tnp + j) * c.Dp;
      for (int64_t d = 0; d < p.D; ++d) {
        dk[d] += sk[d];
        dv[d] += sv[d];
      }
    }
  }
}

template <class T>
void run_backward(const AttentionProblem& p, int threads) {
  Call<T> c(p);
  // the element path reads each K and V row once per head here (one key's x in its dot products): packing them in
  // the plan's order would only add a copy
  c.element_direct = p.D == c.De;
  threads = useful_threads(c, threads);
  const int64_t groups = p.mask_B * p.mask_H, Mq = c.M * c.tm;
  // Enough work units for every thread: whole (batch, head)s where there are many, else each (batch, head)'s key
  // blocks in ranges of about equal entries, each with a dQ buffer of its own. At least 8 units a thread even where
  // the (batch, head)s divide evenly: the two cores of the development host ran the same unit 10-30% apart in speed,
  // and with 4 units each the faster one idled 9-13 ms of a 60-80 ms backward (shared_question at 4096).
  if (threads > 1 && c.BH < 8 * threads) c.chunks = imax(1, imin(c.N, (8 * threads + c.BH - 1) / c.BH));
  Buffer<int64_t> bounds(groups * (c.chunks + 1)), touched(groups * c.chunks * 2);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t* col_ptr = p.plan.col_ptr + g * (c.N + 1);
    const int64_t total = col_ptr[c.N] - col_ptr[0];
    int64_t* b = bounds.data + g * (c.chunks + 1);
    int64_t n = 0;
    for (int64_t i = 0; i < c.chunks; ++i) {
      b[i] = n;
      while (n < c.N && (col_ptr[n] - col_ptr[0]) * c.chunks < total * (i + 1)) ++n;
    }
    b[c.chunks] = c.N;
    for (int64_t i = 0; i < c.chunks; ++i) {
      int64_t* rows = touched.data + 2 * (g * c.chunks + i);
      rows[0] = c.M, rows[1] = -1;
      for (int64_t e = col_ptr[b[i]]; e < col_ptr[b[i + 1]]; ++e)
        rows[0] = imin(rows[0], p.plan.row_idx[e]), rows[1] = imax(rows[1], p.plan.row_idx[e]);
    }
  }
  c.chunk_begin = bounds.data, c.chunk_rows = touched.data;
  const int64_t kv_tiles = p.B * p.Hk * c.N * c.Dp * c.tnp, kv_rows = p.B * p.Hk * c.N * c.tn * c.Dp;
  bool tiles = !p.bwd_sparse, elements = false;  // which paths run, as in run_forward
  for (int64_t i = 0; p.bwd_sparse && i < groups * c.N; ++i) (p.bwd_sparse[i] ? elements : tiles) = true;
  const bool keys = c.packs_rows(tiles, elements), values = c.packs_rows(false, elements);
  Buffer<T> kt(tiles ? kv_tiles : 0), vt(tiles ? kv_tiles : 0), kp(keys ? kv_rows : 0), vp(values ? kv_rows : 0);
  Buffer<T> qp(c.BH * Mq * c.Dp), dop(c.BH * Mq * c.Dp), lse2(2 * c.BH * Mq), delta(c.BH * Mq);
  Buffer<T> dq_acc(c.BH * c.chunks * Mq * c.Dp);
  const int64_t head_keys = c.rep > 1 ? c.BH * c.N * c.tnp * c.Dp : 0;
  Buffer<T> dkh(head_keys), dvh(head_keys);
  c.kt = tiles ? kt.data : nullptr, c.vt = tiles ? vt.data : nullptr;
  c.kp = keys ? kp.data : nullptr, c.vp = values ? vp.data : nullptr;
  c.qp = qp.data, c.dop = dop.data, c.lse2 = lse2.data;
  c.delta = delta.data, c.dq_acc = dq_acc.data, c.dkh = dkh.data, c.dvh = dvh.data;
  pack_all_keys(c, threads);
  parallel_for(c.BH * c.M, threads, [](void* ctx, int64_t u, int) { pack_queries(*static_cast<Call<T>*>(ctx), u); },
               &c);
  SharedVisibility<T> shared(c, tiles && c.BH > groups, p.plan.bwd_kind, p.plan.col_ptr[groups * (c.N + 1) - 1],
                             groups * c.N, threads,
                             [](void* ctx, int64_t u, int) { visibility_of_column(*static_cast<Call<T>*>(ctx), u); });
  const int64_t units = c.BH * c.chunks;
  const int workers = static_cast<int>(imax(1, imin(threads, units)));
  c.scratch_stride = round_up<T>(BackwardScratch<T>::size(c), 64);
  Buffer<T> scratch(workers * c.scratch_stride);
  c.scratch = scratch.data;
  parallel_for(units, workers, [](void* ctx, int64_t u, int t) { backward_unit(*static_cast<Call<T>*>(ctx), u, t); },
               &c);
  parallel_for(c.BH * c.M, threads, [](void* ctx, int64_t u, int) { finish_dq(*static_cast<Call<T>*>(ctx), u); }, &c);
  if (c.rep > 1)
    parallel_for(p.B * p.Hk * c.N, threads,
                 [](void* ctx, int64_t u, int) { finish_dkdv(*static_cast<Call<T>*>(ctx), u); }, &c);
}

}  // namespace

void forward(const AttentionProblem& p, int threads) {
  if (p.dtype_bytes == 4)
    run_forward<float>(p, threads);
  else
    run_forward<double>(p, threads);
}

void backward(const AttentionProblem& p, int threads) {
  if (p.dtype_bytes == 4)
    run_backward<float>(p, threads);
  else
    run_backward<double>(p, threads);
}

}  // namespace MASKPREP_ISA_NAMESPACE
}  // namespace maskprep
