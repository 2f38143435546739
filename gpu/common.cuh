// Device helpers shared by the attention kernels: 16-bit element types, cp.async tile loads, ldmatrix, mma.sync.
//
// No CUDA headers are included, so the kernels compile the same under nvcc and under NVRTC (CuPy) without
// knowing where the toolkit's headers live. Helpers put their destination first.
#pragma once

namespace maskattn {

// Storage types: only the bits travel; arithmetic happens in fp32 and in the tensor cores.
struct half_t {
  unsigned short bits;
};
struct bf16_t {
  unsigned short bits;
};

constexpr float LN2 = 0.6931471805599453f;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

template <typename T>
struct Dtype;

template <>
struct Dtype<half_t> {
  // lo goes to the low 16 bits (the lower column of an mma fragment pair)
  static __device__ __forceinline__ unsigned pack(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  // d += a * b, m16n8k16, fp32 accumulate
  static __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Dtype<bf16_t> {
  static __device__ __forceinline__ unsigned pack(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float log2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 16 bytes global -> shared, bypassing L1; valid == false writes 16 zero bytes (src-size 0) and reads nothing.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

// Waits for every cp.async this thread has issued, committed to a group or not.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// A graph plan computes in its node order: token t of the plan is row perm[t] of the caller's arrays (perm null: the
// caller's order is the plan's). The kernels gather and scatter rows through it, so no permuted copy is made.
__device__ __forceinline__ long long caller_token(const int* perm, int t) {
  return perm == nullptr ? t : __ldg(perm + t);
}

// Where row p of a CTA's rows lives, in elements past its (batch, head) slice, from the strides of heads and tokens:
// with GQA packing (fwd.cu, fwd_sm90.cu) row p is token p / pack of query head h0 + p % pack; pack is 1 elsewhere.
struct PackedRows {
  int pack;
  long long s_h, s_n;
  const int* perm;
  __device__ __forceinline__ long long operator()(int p) const {
    // pack == 1 (no packing) skips the integer division
    return pack == 1 ? caller_token(perm, p) * s_n : (p % pack) * s_h + caller_token(perm, p / pack) * s_n;
  }
};

// Row r of a tile that starts at token row0 of one head, in elements past the head's slice (no packing).
struct TokenRows {
  const int* perm;
  long long s_n;
  int row0;
  __device__ __forceinline__ long long operator()(int r) const { return caller_token(perm, row0 + r) * s_n; }
};

// Shared-memory tiles hold rows of D elements padded to D + 8: an odd number of 16-byte chunks per row, so the
// eight rows one ldmatrix reads (and the rows of a fragment store) fall in distinct banks.
template <int D>
constexpr int SMEM_STRIDE = D + 8;

// Start loading rows [0, ROWS) of a tile (D contiguous elements per row; row r starts row_offset(r) elements past
// g_tile) into shared memory; rows >= rows_valid are zero-filled, so padding rows compute as zeros, not garbage.
template <int ROWS, int D, int THREADS, typename T, typename RowOffset>
__device__ __forceinline__ void load_rows_async(T* s_tile, const T* g_tile, RowOffset row_offset, int rows_valid,
                                                int tid) {
  constexpr int CHUNKS = D / 8;
  constexpr int TOTAL = ROWS * CHUNKS;
  const unsigned s_base = smem_addr(s_tile);
  // not unrolled: unrolled, the compiler hoists every chunk's address out of the key loop and spills
#pragma unroll 1
  for (int i = 0; i < (TOTAL + THREADS - 1) / THREADS; ++i) {
    const int idx = tid + i * THREADS;
    if (TOTAL % THREADS == 0 || idx < TOTAL) {
      const int r = idx / CHUNKS, c = idx % CHUNKS;
      const bool valid = r < rows_valid;
      const T* src = g_tile + (valid ? row_offset(r) + c * 8 : 0);
      cp_async_16(s_base + (r * SMEM_STRIDE<D> + c * 8) * 2, src, valid);
    }
  }
}

// A row of the plan (entries [row_begin, row_begin + row_len) of col_idx) under a bound on its keys (key_lens):
// key blocks ascend along a row, so where they run without a gap (decode over a cache: 0, 1, 2, ...) those holding
// keys below `keys` are a prefix of known length, and the row is cut to it (splits then share that prefix, not the
// whole row). Rows with gaps keep their length; kernels stop at their first block past the bound.
__device__ __forceinline__ long long bounded_row_len(const int* __restrict__ col_idx, long long row_begin,
                                                     long long row_len, int keys, int tile_n) {
  if (row_len == 0) return 0;
  const int first = col_idx[row_begin], last = col_idx[row_begin + row_len - 1];
  const long long below = (keys + tile_n - 1) / tile_n - first;  // blocks first .. first + below - 1
  return last - first == row_len - 1 ? max(0LL, min(row_len, below)) : row_len;
}

// A CTA's rank in its plan's CTA order (m_order / n_order, heaviest rows first) and its head group, from its linear
// index on the grid (blockIdx.x + gridDim.x * blockIdx.y, the order CTAs launch in). The index is read rank by rank,
// every head group's CTA of a rank before any head group's of the next: longest first across heads, as
// FlashAttention-3's LPT tile scheduler (hopper/tile_scheduler.hpp) orders its tiles. Read head by head, the last
// heads' heaviest rows started late and ran on after the rest: BigBird's global rows at 16k took 25% of the forward's
// time that way (H200, docs/performance.md). But within a run of ranks whose rows lie in one length band (levels,
// maskprep's rank_levels: [first, end) of each rank's run, rows within 2x of each other; null: runs of one rank) the
// CTAs go head group by head group: they cost longest first little, and a head's CTAs side by side read its K and V
// (the backward: Q and dO) from L2 together. Rank by rank throughout (16 heads streamed at once), the dense forward
// at 16k, D = 128 took 1.04x the time with runs, the one-pass backward 1.05x, BigBird 1.09x and 1.17x; runs of one
// length instead of bands, BigBird's backward 1.45x, causal's backward 1.07x (H100). Sliding window's forward, whose
// 16 heads' K and V fit in L2 either way, is 2.5% faster rank by rank (the order, not the run's load: measured apart).
// FlashAttention-3 reads the order in sections of heads whose K and V fit in L2: that lost most of BigBird's gain
// (its few global rows then start late).
struct PlanCta {
  int rank, head_group;
};
__device__ __forceinline__ PlanCta plan_cta(unsigned linear, unsigned head_groups, const int2* __restrict__ levels) {
  unsigned rank = linear / head_groups, head_group = linear % head_groups;
  if (levels != nullptr) {
    const int2 run = levels[rank];
    const unsigned size = run.y - run.x, within = linear - run.x * head_groups;
    head_group = within / size;
    rank = run.x + within % size;
  }
  return {(int)rank, (int)head_group};
}

// The backward's CTA on its grid (head groups, ranks): the dK/dV kernels' head groups are KV heads, the dQ kernels'
// query heads.
__device__ __forceinline__ PlanCta backward_cta(const int2* __restrict__ levels) {
  return plan_cta(blockIdx.x + gridDim.x * blockIdx.y, gridDim.x, levels);
}

// A split-capable CTA on a one-dimensional grid: the forward's (a query block of a head group; ranks = n_mblocks)
// and the one-pass backward's (a key block of a batch and KV head; ranks = n_nblocks). The plan's CTA order (plan_cta:
// `ranks` ranks of head_groups head groups) runs whole up to CTA split_from; each CTA from there on (the tail, last to
// launch) is split num_splits ways: split s of the tail's t-th CTA is block split_from + s * tail + t, and writes
// float32 partials at `piece` s * tail + t (the forward's combine_kernel, the backward's bwd_dkdv_merge_sm90_kernel
// add them up). split_from 0 splits every CTA (split-KV for few CTAs); a tail alone evens out the last wave (fwd.py's
// tail_splits_for).
struct SplitCta {
  int rank, head_group, split, splits;  // split 0 of 1 for a whole row
};
// A CTA's piece, or -1 where its row is whole: what the epilogues need after the key loop. The index is read through
// volatile asm, so that it is read again there instead of kept live across the loop (which spilled at 160 registers).
__device__ __forceinline__ int split_piece(int split_from) {
  unsigned x;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(x));
  return (int)x >= split_from ? (int)x - split_from : -1;
}
__device__ __forceinline__ SplitCta split_cta(const int2* __restrict__ levels, int head_groups, int ranks,
                                              int split_from, int num_splits) {
  unsigned x;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(x));
  if ((int)x < split_from) {
    const PlanCta c = plan_cta(x, head_groups, levels);
    return {c.rank, c.head_group, 0, 1};
  }
  const int piece = (int)x - split_from, tail = head_groups * ranks - split_from;
  const PlanCta c = plan_cta(split_from + piece % tail, head_groups, levels);
  return {c.rank, c.head_group, piece / tail, num_splits};
}

}  // namespace maskattn

// The forward kernels' parameter list, shared by fwd_kernel (fwd.cu) and fwd_sm90_kernel (fwd_sm90.cu), which
// maskattn._cuda fills from one argument tuple. key_lens (null, or per batch the number of keys to see: keys j >=
// key_lens[b] are masked besides the plan, a KV cache's valid length, cache_seqlens) ends the arrays. Strides are
// in elements of the logical (B, H, n, D) views, whose last dimension is contiguous; n_q counts tokens (a CTA has
// n_q * pack rows); mask group g = b * group_sb + h * group_sh (0 strides broadcast the plan over batch or heads);
// batch (B), num_splits and split_from: split_cta. T is the kernel's element type.
#define MASKATTN_FWD_ARRAYS                                                                                      \
  const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,                \
      float* __restrict__ lse, float* __restrict__ o_part, float* __restrict__ lse_part,                       \
      const int* __restrict__ key_lens
#define MASKATTN_FWD_SHAPES_AND_PLAN                                                                             \
  long long q_sb, long long q_sh, long long q_sn, long long k_sb, long long k_sh, long long k_sn, long long v_sb, \
      long long v_sh, long long v_sn, long long o_sb, long long o_sh, long long o_sn, int heads, int heads_per_kv, \
      int pack, int batch, int num_splits, int split_from, int n_q, int n_k, int group_sb, int group_sh,           \
      int n_mblocks, int n_nblocks,                                                                               \
      const long long* __restrict__ row_ptr, const int* __restrict__ col_idx, const unsigned char* __restrict__ kind, \
      const int* __restrict__ m_order, const int2* __restrict__ m_levels, const int* __restrict__ payload_idx,     \
      const unsigned* __restrict__ bit_pool, const int* __restrict__ intervals,                                   \
      const int* __restrict__ interval_minmax, const int* __restrict__ perm, float scale_log2
