// Hopper (sm_90a) device helpers: wgmma on 128-byte-swizzled shared tiles, mbarriers, proxy fences, register
// reallocation between warpgroups. Like common.cuh, no CUDA headers: NVRTC and nvcc compile it alike.
//
// Shared tiles for wgmma: a tile of ROWS rows x D 16-bit elements (D a multiple of 64) is D / 64 column blocks of
// ROWS x 128 bytes, 1024-byte aligned; inside a block, the 16-byte chunk c of row r sits at chunk c ^ (r % 8) (the
// hardware's 128-byte swizzle, so that one descriptor covers 8-row groups 1024 bytes apart). Rows are K-major for
// Q and K (a wgmma k step of 16 elements is a 32-byte offset inside the block) and N-major for V; the backward reads
// its Q and dO tiles both ways (K-major for S^T = K Q^T and dP^T = V dO^T, N-major for dK += dS^T Q and dV += P^T dO).
#pragma once

#include "common.cuh"

namespace maskattn {

constexpr int SW128_BYTES = 128;  // bytes of one swizzled row of a 64-column block

// Byte offset of 16-byte chunk `chunk` (8 elements) of row `row` in a ROWS-row swizzled tile.
template <int ROWS>
__device__ __forceinline__ unsigned sw128_offset(int row, int chunk) {
  return (chunk / 8) * (ROWS * SW128_BYTES) + row * SW128_BYTES + (((chunk % 8) ^ (row % 8)) << 4);
}

// wgmma shared-memory descriptor of a 128-byte-swizzled operand at shared address addr. K-major operands ignore
// lbo; N-major ones take the distance between 64-column blocks. sbo: distance between 8-row groups (1024 here).
// Adding (bytes >> 4) to a descriptor moves its start address.
__device__ __forceinline__ unsigned long long sw128_desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return ((addr & 0x3FFFFu) >> 4) | (unsigned long long)((lbo >> 4) & 0x3FFFu) << 16 |
         (unsigned long long)((sbo >> 4) & 0x3FFFu) << 32 | 1ull << 62;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory");
}

// Pins registers that an asynchronous wgmma reads or writes at this point of the program: nvcc may not move their
// other uses across it (after wgmma_wait) nor reuse them earlier.
template <int N>
__device__ __forceinline__ void pin_registers(float (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(r[i][j])::"memory");
  }
}

template <int N>
__device__ __forceinline__ void pin_registers(unsigned (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
  }
}

// Orders this thread's ordinary shared-memory writes (cp.async included) before later async-proxy reads (wgmma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Blocks until the phase of parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Named barrier over `threads` threads (a multiple of 32); id 0 is __syncthreads'.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Arrives on a named barrier without waiting (the other side calls named_barrier_sync).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Per-warpgroup register budgets (need a register cap at kernel entry: __launch_bounds__(threads, 1)).
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}

template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}

// Start copying rows [0, ROWS) of a global tile (D contiguous elements a row; row r starts row_offset(r) elements
// past g_tile) into a swizzled shared tile at shared address s_tile; rows >= rows_valid are zero-filled. THREADS
// threads share the copy; each keeps one chunk column and one row phase of the swizzle, so its shared offset only
// advances by whole rows.
template <int ROWS, int D, int THREADS, typename T, typename RowOffset>
__device__ __forceinline__ void load_rows_sw128_async(unsigned s_tile, const T* g_tile, RowOffset row_offset,
                                                      int rows_valid, int tid) {
  constexpr int CHUNKS = D / 8;
  constexpr int STEP = THREADS / CHUNKS;  // rows one pass covers
  static_assert(THREADS % CHUNKS == 0 && ROWS % STEP == 0 && STEP % 8 == 0, "whole rows and swizzle phases");
  const int c = tid % CHUNKS, r0 = tid / CHUNKS;
  const unsigned dst = s_tile + sw128_offset<ROWS>(r0, c);
#pragma unroll 4
  for (int i = 0; i < ROWS / STEP; ++i) {
    const int r = r0 + i * STEP;
    const bool valid = r < rows_valid;
    cp_async_16(dst + i * STEP * SW128_BYTES, g_tile + (valid ? row_offset(r) + c * 8 : 0), valid);
  }
}

// The common case: rows row_stride elements apart.
template <int ROWS, int D, int THREADS, typename T>
__device__ __forceinline__ void load_tile_sw128_async(unsigned s_tile, const T* g_tile, long long row_stride,
                                                      int rows_valid, int tid) {
  load_rows_sw128_async<ROWS, D, THREADS>(s_tile, g_tile, [row_stride](int r) { return r * row_stride; },
                                          rows_valid, tid);
}

// The wgmma shapes of the attention kernels, fp32 accumulate; the accumulator of m64nNk16 is, per warp, N / 8
// m16n8 fragments (rows lane / 4 and lane / 4 + 8 of the warp's 16, columns 8 j + 2 (lane % 4) + {0, 1}).
#define MASKATTN_WGMMA_OPS(TYPE)                                                                                  \
  /* d = A B (scale_d 0) or d += A B (scale_d 1): A 64 x 16 and B 16 x 128 from shared memory, K-major */ \
  static __device__ __forceinline__ void ss_n128(float (&d)[16][4], unsigned long long desc_a,            \
                                                 unsigned long long desc_b, int scale_d) {                \
    asm volatile(                                                                                         \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                      \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " "                                  \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                         \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "               \
        "%64, %65, p, 1, 1, 0, 0;\n}\n"                                                                   \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),       \
          "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),       \
          "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),       \
          "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),       \
          "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),       \
          "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),       \
          "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),     \
          "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
          "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), \
          "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
          "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])                                  \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                        \
  }                                                                                                       \
  /* d = A B (scale_d 0) or d += A B (scale_d 1): A 64 x 16 and B 16 x 64 from shared memory, K-major */  \
  static __device__ __forceinline__ void ss_n64(float (&d)[8][4], unsigned long long desc_a,              \
                                                unsigned long long desc_b, int scale_d) {                 \
    asm volatile(                                                                                         \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                      \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " "                                   \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                         \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "               \
        "%32, %33, p, 1, 1, 0, 0;\n}\n"                                                                   \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),       \
          "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),       \
          "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),       \
          "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),       \
          "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),       \
          "+f"(d[7][2]), "+f"(d[7][3])                                                                    \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                        \
  }                                                                                                       \
  /* d += A B: A 64 x 16 from registers (per warp, the A fragment of mma.sync m16n8k16), */               \
  /* B 16 x 64 from shared memory, N-major (the transposed B of the PTX ISA) */                           \
  static __device__ __forceinline__ void rs_n64_tnsp(float (&d)[8][4], const unsigned (&a)[4],            \
                                                     unsigned long long desc_b) {                         \
    asm volatile(                                                                                         \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                      \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " "                                   \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                         \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "               \
        "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                                     \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),       \
          "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),       \
          "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),       \
          "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),       \
          "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),       \
          "+f"(d[7][2]), "+f"(d[7][3])                                                                    \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));                               \
  }                                                                                                       \
  /* d += A B: A 64 x 16 from registers (per warp, the A fragment of mma.sync m16n8k16), */               \
  /* B 16 x 128 from shared memory, N-major (the transposed B of the PTX ISA) */                          \
  static __device__ __forceinline__ void rs_n128_tnsp(float (&d)[16][4], const unsigned (&a)[4],          \
                                                     unsigned long long desc_b) {                         \
    asm volatile(                                                                                         \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                      \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " "                                  \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                         \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "               \
        "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                                     \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),       \
          "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),       \
          "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),       \
          "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),       \
          "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),       \
          "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),       \
          "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),     \
          "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
          "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), \
          "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
          "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])                                  \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));                               \
  }                                                                                                       

template <typename T>
struct Wgmma;

template <>
struct Wgmma<half_t> {
  MASKATTN_WGMMA_OPS("f16")
};

template <>
struct Wgmma<bf16_t> {
  MASKATTN_WGMMA_OPS("bf16")
};

#undef MASKATTN_WGMMA_OPS

}  // namespace maskattn
