// Block-sparse attention on the CPU over a compiled block plan: what a call describes, and the entry points.
//
// attention.cpp dispatches to the kernels of one instruction set (attention_kernels.hpp compiled once per set by
// attention_avx512.cpp, attention_avx2.cpp and attention_generic.cpp) and owns the worker threads; the kernels
// see only this header, so that nothing compiled for a wider instruction set can reach code that runs anywhere.
#pragma once

#include <cstddef>
#include <cstdint>

namespace maskprep {

// The instruction sets the kernels are built for; ISA_AUTO picks the widest the CPU runs.
enum AttentionIsa : int { ISA_AUTO = -1, ISA_GENERIC = 0, ISA_AVX2 = 1, ISA_AVX512 = 2 };

// The arrays of a block plan (maskattn.plan.BlockMask's); payload_idx / bit_pool or intervals may be null.
struct PlanPointers {
  const int64_t* row_ptr;
  const int32_t* col_idx;
  const uint8_t* kind;
  const int32_t* payload_idx;
  const int64_t* col_ptr;
  const int32_t* row_idx;
  const uint8_t* bwd_kind;
  const int32_t* bwd_payload_idx;
  const uint32_t* bit_pool;
  int64_t pool_tiles;
  const int32_t* intervals;  // (G, n_k, 4): LTS, LTE, UTS, UTE
  const int32_t* m_order;    // (G, M)
  const int64_t* perm;       // plan position -> caller token, or null
};

// One attention call. Arrays q, k, v, dout, out are 4-d (B, H or Hk, n, D) with element strides (batch, head,
// row) and a contiguous last dimension; everything the kernels write is C-contiguous. T is float (dtype_bytes 4)
// or double (8) for every floating array alike.
struct AttentionProblem {
  int64_t B, H, Hk, n_q, n_k, D;
  int64_t tile_m, tile_n;
  int64_t mask_B, mask_H;  // the plan's groups: g = (mask_B > 1 ? b : 0) * mask_H + (mask_H > 1 ? h : 0)
  double scale;
  int dtype_bytes;

  const void* q;
  int64_t q_stride[3];
  const void* k;
  int64_t k_stride[3];
  const void* v;
  int64_t v_stride[3];
  const void* dout;  // backward
  int64_t do_stride[3];
  const void* out;  // backward: the forward's output
  int64_t o_stride[3];
  const void* lse;  // backward: (B, H, n_q) contiguous, natural log, -inf on rows that see no key

  void* out_w;  // forward: (B, H, n_q, D)
  void* lse_w;  // forward: (B, H, n_q)
  void* dq;     // backward: (B, H, n_q, D)
  void* dk;     // backward: (B, Hk, n_k, D)
  void* dv;

  PlanPointers plan;
  const int64_t* key_lens;  // forward: (B,) keys to see per batch, or null

  // where not null, the kernels check every element of their inputs as they read them and set bit NOT_FINITE_<input>
  // here (atomically, from any thread) where one is inf or NaN; their results are then not to be used
  uint32_t* not_finite;

  // the element path (element_lists.hpp), or all null: blocks marked sparse take their rows' keys (forward) or
  // their keys' rows (backward) one by one instead of whole tiles
  const uint8_t* fwd_sparse;  // (G, M)
  const int64_t* erow_ptr;    // (G, n_q + 1)
  const int32_t* ecols;
  const uint8_t* bwd_sparse;  // (G, N)
  const int64_t* ecol_ptr;    // (G, n_k + 1)
  const int32_t* erows;
};

// The bits of AttentionProblem::not_finite, one per input.
enum NotFinite : uint32_t {
  NOT_FINITE_DOUT = 1,
  NOT_FINITE_Q = 2,
  NOT_FINITE_K = 4,
  NOT_FINITE_V = 8,
  NOT_FINITE_OUT = 16,
};

// Runs fn(ctx, unit, thread) for every unit in [0, units) on `threads` threads (the caller's among them), units
// handed out in ascending order as threads come free. fn must not throw.
void parallel_for(int64_t units, int threads, void (*fn)(void*, int64_t, int), void* ctx);

// Workspace for the kernels, 64-byte aligned: freed buffers are kept (up to WORKSPACE_CACHE_BYTES in all) and handed
// to later calls, so that a call does not fault its pages in anew; workspace_release frees those kept.
constexpr size_t WORKSPACE_CACHE_BYTES = size_t(1) << 30;
void* workspace_take(size_t bytes);
void workspace_give(void* data, size_t bytes);
void workspace_release();

// The instruction set ISA_AUTO resolves to on this CPU, and whether `isa` was built and runs here.
int best_isa();
bool isa_available(int isa);

// Forward: writes out_w and lse_w. Backward: writes dq, dk, dv (dk, dv summed over the query heads of a KV
// head). Both deterministic: a result does not depend on which thread ran what.
void attention_forward(const AttentionProblem& p, int threads, int isa);
void attention_backward(const AttentionProblem& p, int threads, int isa);

// What each instruction set's translation unit defines (attention_kernels.hpp); attention.cpp dispatches.
#define MASKPREP_ISA_ENTRIES(ns)                        \
  namespace ns {                                        \
  void forward(const AttentionProblem& p, int threads);  \
  void backward(const AttentionProblem& p, int threads); \
  }
MASKPREP_ISA_ENTRIES(isa_generic)
MASKPREP_ISA_ENTRIES(isa_avx2)
MASKPREP_ISA_ENTRIES(isa_avx512)
#undef MASKPREP_ISA_ENTRIES

}  // namespace maskprep
