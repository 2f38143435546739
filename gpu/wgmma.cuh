// Hopper (sm_90a) device helpers: wgmma on 128-byte-swizzled shared tiles, mbarriers, proxy fences, register
// reallocation between warpgroups; and the pieces the wgmma kernels share: the key-block pipeline of the query-major
// kernel, A operands packed from accumulators, a listed tile's masks, the epilogue's staged stores. Like
// common.cuh, no CUDA headers: NVRTC and nvcc compile it alike.
//
// Shared tiles for wgmma: a tile of ROWS rows x D 16-bit elements is D / 64 column blocks (rounded up:
// SW128_COLUMNS) of ROWS x 128 bytes, 1024-byte aligned; inside a block, the 16-byte chunk c of row r sits at chunk
// c ^ (r % 8) (the hardware's 128-byte swizzle, so that one descriptor covers 8-row groups 1024 bytes apart). Rows are K-major for
// Q and K (a wgmma k step of 16 elements is a 32-byte offset inside the block) and N-major for V; the backward reads
// its Q and dO tiles both ways (K-major for S^T = K Q^T and dP^T = V dO^T, N-major for dK += dS^T Q and dV += P^T dO).
#pragma once

#include "common.cuh"
#include "mask.cuh"

namespace maskattn {

constexpr int SW128_BYTES = 128;  // bytes of one swizzled row of a 64-column block

// Columns a tile of D columns takes in shared memory: whole 64-column blocks. At D = 32 and 96 the last block's upper
// 32 columns hold zeros (the copy engine's fill past D) or stale bytes (cp.async writes D columns only); every
// product stops at column D (the K-major ones by their k steps, the N-major ones by wgmma_rs_tnsp at N = D) but the
// one-pass backward's dQ halves, whose extra accumulator columns nobody reads.
template <int D>
constexpr int SW128_COLUMNS = (D + 63) / 64 * 64;

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

// Descriptor offset of k step kk of a K-major ROWS-row operand: 32 bytes inside a 64-column block, then a block.
template <int ROWS>
__device__ __forceinline__ unsigned sw128_k_step(int kk) {
  return (unsigned)((kk / 4) * ROWS * SW128_BYTES + (kk % 4) * 32) >> 4;
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

// Orders this thread's ordinary shared-memory writes (cp.async included) before later async-proxy reads (wgmma); a
// thread that waited on a barrier for other threads' cp.async copies (cp_async_arrive) fences them so for itself.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// `count` arrivals at once (sm_90).
__device__ __forceinline__ void mbarrier_arrive(unsigned bar, unsigned count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// One arrival on the barrier once every cp.async this thread has issued so far has landed; the thread goes on at
// once (.noinc: the arrival is one of the barrier's expected count). Copies so announced were not fenced for the
// async proxy by the copying thread: the threads that wait for them and read them by wgmma fence them first.
__device__ __forceinline__ void cp_async_arrive(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
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

// Whether a row lookup serves every row of a tile, past its valid rows too (TableRows below).
template <typename RowOffset>
struct ServesEveryRow {
  static constexpr bool value = false;
};

// Where the copy of row r's chunk c reads, in elements past the tile's start: rows past the valid ones read nothing
// (zero-filled), so their copies point at the start without a lookup, unless the lookup serves every row: then no
// branch, and a row table's copies take a few instructions each.
template <typename RowOffset>
__device__ __forceinline__ long long chunk_offset(const RowOffset& row_offset, int r, int c, bool valid) {
  if constexpr (ServesEveryRow<RowOffset>::value) {
    return row_offset(r) + c * 8;
  } else {
    return valid ? row_offset(r) + c * 8 : 0;
  }
}

// Start copying rows [0, ROWS) of a global tile (D contiguous elements a row; row r starts row_offset(r) elements
// past g_tile) into a swizzled shared tile at shared address s_tile; rows >= rows_valid are zero-filled. THREADS
// threads share the copy. Where a pass of the threads covers whole rows and a multiple of 8 of them (D = 64 and 128
// with 128 threads), each thread keeps one chunk column and one row phase of the swizzle, so its shared offset only
// advances by whole rows; otherwise (D = 96, 192, 256) each 16-byte chunk's place is computed.
template <int ROWS, int D, int THREADS, typename T, typename RowOffset>
__device__ __forceinline__ void load_rows_sw128_async(unsigned s_tile, const T* g_tile, RowOffset row_offset,
                                                      int rows_valid, int tid) {
  constexpr int CHUNKS = D / 8;
  constexpr int STEP = THREADS / CHUNKS;  // rows one pass covers
  if constexpr (THREADS % CHUNKS == 0 && ROWS % STEP == 0 && STEP % 8 == 0) {
    const int c = tid % CHUNKS, r0 = tid / CHUNKS;
    const unsigned dst = s_tile + sw128_offset<ROWS>(r0, c);
#pragma unroll 4
    for (int i = 0; i < ROWS / STEP; ++i) {
      const int r = r0 + i * STEP;
      const bool valid = r < rows_valid;
      cp_async_16(dst + i * STEP * SW128_BYTES, g_tile + chunk_offset(row_offset, r, c, valid), valid);
    }
  } else {
    constexpr bool WHOLE = ROWS * CHUNKS % THREADS == 0;  // else the last pass is partial (112 keys at D = 96)
#pragma unroll 4
    for (int i = 0; i < (ROWS * CHUNKS + THREADS - 1) / THREADS; ++i) {
      const int idx = tid + i * THREADS, r = idx / CHUNKS, c = idx % CHUNKS;
      const bool valid = r < rows_valid;
      if (WHOLE || idx < ROWS * CHUNKS)
        cp_async_16(s_tile + sw128_offset<ROWS>(r, c), g_tile + chunk_offset(row_offset, r, c, valid), valid);
    }
  }
}

// Named barrier of a producer warpgroup's 128 threads (the consumers of fwd_sm90.cu use 1 to 4).
constexpr int PRODUCER_BARRIER = 5;

// Shared memory of the row tables (producer_rows' two slots of 128 rows, then up to 192 rows of the forward's
// epilogue): launches over plans with a node order (perm) ask for this many bytes more than the kernel's layout, and
// the tables lie right after it. Plans without one launch without it: static shared memory for the table slowed those
// launches of every Hopper kernel by about half (H100, 2026-11-22).
constexpr int ROW_TABLE_BYTES = (2 * 128 + 192) * 4;

// Row r of a tile gathered through a table of its caller rows (producer_rows below), rows s_n elements apart: a
// 32-bit stride, so that each row's offset is one wide multiply (launches over plans with a node order check that
// their row strides fit: launch.py's element_strides).
struct TableRows {
  const int* table;
  int s_n;
  __device__ __forceinline__ long long operator()(int r) const {
    long long offset;  // mul.wide by hand: the compilers turn (long long)table[r] * s_n into a 64-bit product
    asm("mul.wide.s32 %0, %1, %2;" : "=l"(offset) : "r"(table[r]), "r"(s_n));
    return offset;
  }
};

template <>
struct ServesEveryRow<TableRows> {  // producer_rows fills every row of the table
  static constexpr bool value = true;
};

// The caller rows (common.cuh's caller_token) of rows [row0, row0 + ROWS) of the plan's order, for a tile the
// producer warpgroup (tid < 128) is about to copy: one coalesced lookup per tile, not one dependent load per copied
// chunk (that cost graph plans twice the kernel time); rows past rows_valid get caller row 0. Producer thread t fills
// entries t, t + 128 of slot `slot` of `table` (two slots of ROWS ints, used in turn: a thread refills a slot only
// after every producer thread has passed the barrier after the slot's previous tile, so has finished reading it;
// `table` is the ROW_TABLE_BYTES after the kernel's layout, or fwd_sm90.cu's epilogue table).
template <int ROWS>
__device__ __forceinline__ const int* producer_rows(int* table, int slot, const int* perm, int row0, int rows_valid,
                                                    int tid) {
  static_assert(ROWS <= 192 && 2 * ROWS * 4 <= ROW_TABLE_BYTES, "two entries at most per producer thread");
  int* rows = table + slot * ROWS;
#pragma unroll
  for (int pass = 0; pass < ROWS; pass += 128) {
    const int i = pass + tid;
    if (i < ROWS) rows[i] = i < rows_valid ? __ldg(perm + row0 + i) : 0;
  }
  named_barrier_sync(PRODUCER_BARRIER, 128);
  return rows;
}

// The key-block pipeline of the query-major kernel (fwd_sm90.cu): a producer warpgroup copies
// the query side once (announced on Q_FULL), then each listed key block's K and V tiles (TILE_N x D, two stages
// each, consecutive in shared memory) and announces them on K_FULL and V_FULL of the stage; each of the 8
// consumer warps releases a stage with one arrival on K_EMPTY or V_EMPTY once its products no longer read it (in
// fwd_sm90.cu each consumer thread arrives on K_EMPTY after its reads of a partial tile's staged payload).
namespace kv_stages {
enum Barrier { Q_FULL = 0, K_FULL = 1, V_FULL = 3, K_EMPTY = 5, V_EMPTY = 7, BARRIERS = 9 };
}  // namespace kv_stages

// One thread, before the __syncthreads that publishes the barriers at shared address bars (8 bytes each).
// full_arrivals: arrivals that fill a K or V stage, 128 producer threads (cp.async) or 1 (tma.cuh's copies);
// q_arrivals likewise for the query side; consumer_warps: the releases of a V stage, by lane 0 of each consumer warp
// (warp_release); k_empty_arrivals: those of a K stage, the same, or in fwd_sm90.cu one per consumer thread
// (warp_release's 32 at once where the thread's loads did not read the stage's payload).
__device__ __forceinline__ void kv_stages_init(unsigned bars, unsigned full_arrivals, unsigned q_arrivals,
                                               unsigned consumer_warps, unsigned k_empty_arrivals) {
  using namespace kv_stages;
  mbarrier_init(bars + 8 * Q_FULL, q_arrivals);
  for (int s = 0; s < 2; ++s) {
    mbarrier_init(bars + 8 * (K_FULL + s), full_arrivals);
    mbarrier_init(bars + 8 * (V_FULL + s), full_arrivals);
    mbarrier_init(bars + 8 * (K_EMPTY + s), k_empty_arrivals);
    mbarrier_init(bars + 8 * (V_EMPTY + s), consumer_warps);
  }
}

// A consumer warp's release of a stage: its lanes' reads are ordered before lane 0's arrival (`count` arrivals).
__device__ __forceinline__ void warp_release(unsigned bar, int lane, unsigned count = 1) {
  __syncwarp();
  if (lane == 0) mbarrier_arrive(bar, count);
}

// Accumulators of columns [16 kk, 16 kk + 16) packed to 16 bits: the register A fragment of k step kk.
template <typename T, int KS>
__device__ __forceinline__ void pack_a_operand(unsigned (&a)[KS][4], const float (&x)[2 * KS][4]) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    a[kk][0] = Dtype<T>::pack(x[2 * kk][0], x[2 * kk][1]);
    a[kk][1] = Dtype<T>::pack(x[2 * kk][2], x[2 * kk][3]);
    a[kk][2] = Dtype<T>::pack(x[2 * kk + 1][0], x[2 * kk + 1][1]);
    a[kk][3] = Dtype<T>::pack(x[2 * kk + 1][2], x[2 * kk + 1][3]);
  }
}

// What masks a partial tile: FlashMask's per-block (min, max) of the key block's LTS, LTE, UTS, UTE (8 ints) and
// the (lower, upper) interval pairs of its columns from its first, or its bit tile (TILE_M x TILE_N bits); in global
// memory (TileMasks::payload) or staged in shared memory (PayloadStages::staged).
struct TilePayload {
  const int* minmax = nullptr;
  const int2* bounds = nullptr;
  const unsigned* bits = nullptr;
};

// Where a plan's masks live, as the kernels receive them.
struct TileMasks {
  const unsigned* bit_pool;
  const int* intervals;
  const int* interval_minmax;
  int n_k, n_nblocks;
  int keys;  // key columns >= keys are masked: n_k, or a per-batch bound below it (the forward's key_lens)

  // the payload of key block n_block of the plan's group `group` (bit tile `payload_idx` of the pool)
  template <int MASK, int TILE_M, int TILE_N>
  __device__ __forceinline__ TilePayload payload(int group, int n_block, int payload_idx) const {
    TilePayload p;
    if constexpr (MASK == MASK_INTERVALS) {
      p.minmax = interval_minmax + ((long long)group * n_nblocks + n_block) * 8;
      p.bounds = reinterpret_cast<const int2*>(intervals) + ((long long)group * n_k + (long long)n_block * TILE_N) * 2;
    } else if constexpr (MASK == MASK_BITS) {
      p.bits = bit_pool + (long long)payload_idx * (TILE_M * TILE_N / 32);
    }
    return p;
  }
};

// The masks of listed tile n_block (its payload p) on a warp's query-major score fragment (mask.cuh's layout): rows
// warp_row0 + lane / 4 (+ 8), tile_row + lane / 4 inside the tile; key columns n_block TILE_N + col_lo + 8 j +
// 2 (lane % 4) (+ 1), col_lo a multiple of 32 (kernels that step through a key block in parts). Partial tiles
// take their intervals or bit tile; columns past m.keys are masked.
template <int MASK, int TILE_M, int TILE_N, int NB>
__device__ __forceinline__ void mask_tile_scores(float (&s)[NB][4], const TileMasks& m, const TilePayload& p,
                                                 int n_block, bool partial, int col_lo, int warp_row0, int tile_row,
                                                 int lane) {
  const int g_lane = lane / 4, t_lane = lane % 4;
  const int tile_col0 = n_block * TILE_N, col = col_lo + 2 * t_lane;  // col: the thread's first column in the tile
  if constexpr (MASK == MASK_INTERVALS) {
    if (partial) {
      const IntervalReach reach = interval_reach(p.minmax, warp_row0, 16);
      if (reach.lower) mask_interval(s, p.bounds, col, m.n_k - tile_col0, warp_row0 + g_lane);
      if (reach.upper) mask_interval(s, p.bounds + 1, col, m.n_k - tile_col0, warp_row0 + g_lane);
    }
  } else if constexpr (MASK == MASK_BITS) {
    if (partial) mask_bits<NB, TILE_N>(s, p.bits, tile_row + g_lane, t_lane, col_lo);
  }
  if (tile_col0 + col_lo + 8 * NB > m.keys) mask_key_bound(s, tile_col0 + col, m.keys);
}

// The forward's partial-tile payloads, staged in shared memory beside the two K stages: a partial entry's copies
// (its block's (min, max), 32 bytes, then its columns' intervals up to n_k, 16 bytes each; or its bit tile,
// TILE_M / 8 bytes per column) land with its K tile, on the stage's K_FULL. The consumers' masks then read
// shared memory instead of waiting on global loads after the product (ncu, the sliding window at 16k: those masks
// held 15% of the samples, 9% stalled on the loads). A stage's payload is in use until the consumers release its
// K_EMPTY, which they do after the mask. kind and payload_idx: the producer's entries' (the plan's arrays from the
// row's first).
template <int MASK, int TILE_M, int TILE_N>
struct PayloadStages {
  static constexpr unsigned DATA = 32;  // the intervals or bits begin after the (min, max)
  static constexpr unsigned STAGE_BYTES = DATA + (TILE_M / 8 > 16 ? TILE_M / 8 : 16) * TILE_N;
  struct Copy {  // one copy of a payload, from global memory to its stage
    const void* src;
    unsigned dst, bytes;
  };
  struct Item {
    bool partial;
    int payload;
  };
  TileMasks masks;
  int group;
  const unsigned char* kind;
  const int* payload_idx;
  unsigned s_stages;  // shared address of stage 0 (16-byte aligned)

  __device__ __forceinline__ Item read(int i) const {
    const bool partial = MASK != MASK_NONE && kind[i] == KIND_PARTIAL;
    return {partial, MASK == MASK_BITS && partial ? payload_idx[i] : 0};
  }
  // the contiguous global -> shared copies of the entry (key block n_block) into stage `stage`: 0 to 2, 16-byte
  // multiples at 16-byte aligned addresses
  __device__ __forceinline__ int copies(const Item& item, int n_block, int stage, Copy (&c)[2]) const {
    if (!item.partial) return 0;
    const unsigned dst = s_stages + stage * STAGE_BYTES;
    const TilePayload p = masks.payload<MASK, TILE_M, TILE_N>(group, n_block, item.payload);
    if constexpr (MASK == MASK_INTERVALS) {
      c[0] = {p.minmax, dst, 32};
      c[1] = {p.bounds, dst + DATA, 16u * (unsigned)min(TILE_N, masks.n_k - n_block * TILE_N)};
      return 2;
    } else {
      c[0] = {p.bits, dst + DATA, TILE_M * TILE_N / 8};
      return 1;
    }
  }
  // the consumers' view of a stage (stages: the generic address of stage 0)
  __device__ __forceinline__ static TilePayload staged(const unsigned char* stages, int stage) {
    const unsigned char* base = stages + stage * STAGE_BYTES;
    return {reinterpret_cast<const int*>(base), reinterpret_cast<const int2*>(base + DATA),
            reinterpret_cast<const unsigned*>(base + DATA)};
  }
};

// The producer warpgroup (tid < 128), after announcing the query side: key blocks blocks[0 .. n_entries) of gK and
// gV (rows k_sn and v_sn elements apart, in the plan's order through perm, looked up once per key block by
// producer_rows before the wait for the stage; keys >= n_k zero-filled). Each tile is announced on its barrier by
// every copying thread's cp_async_arrive, so the producer never waits for its copies, only for a stage's release
// before refilling it (as the copy engine's produce_kv_stages_tma); the consumers fence each tile after its wait. A
// partial entry's payload (PayloadStages) is copied with its K tile.
template <int TILE_N, int D, typename T, typename Payload>
__device__ __forceinline__ void produce_kv_stages(unsigned bars, unsigned sK, unsigned sV, const T* gK, const T* gV,
                                                  long long k_sn, long long v_sn, const int* perm, int* row_table,
                                                  const int* __restrict__ blocks, int n_entries, int n_k, int tid,
                                                  const Payload& payload) {
  using namespace kv_stages;
  constexpr int TILE = TILE_N * SW128_COLUMNS<D> * 2;
#pragma unroll 1
  for (int i = 0; i < n_entries; ++i) {
    const int n_block = blocks[i];
    const int stage = i & 1;
    const unsigned released = ((i >> 1) & 1) ^ 1;  // parity of the release of block i - 2
    const int key0 = n_block * TILE_N;
    const int* rows = producer_rows<TILE_N>(row_table, stage, perm, key0, n_k - key0, tid);
    if (i >= 2) mbarrier_wait(bars + 8 * (K_EMPTY + stage), released);
    load_rows_sw128_async<TILE_N, D, 128>(sK + stage * TILE, gK, TableRows{rows, (int)k_sn}, n_k - key0, tid);
    typename Payload::Copy copies[2];
    const int n_copies = payload.copies(payload.read(i), n_block, stage, copies);
    for (int c = 0; c < n_copies; ++c) {
      for (unsigned at = 16 * tid; at < copies[c].bytes; at += 16 * 128) {
        cp_async_16(copies[c].dst + at, static_cast<const unsigned char*>(copies[c].src) + at, true);
      }
    }
    cp_async_arrive(bars + 8 * (K_FULL + stage));
    if (i >= 2) mbarrier_wait(bars + 8 * (V_EMPTY + stage), released);
    load_rows_sw128_async<TILE_N, D, 128>(sV + stage * TILE, gV, TableRows{rows, (int)v_sn}, n_k - key0, tid);
    cp_async_arrive(bars + 8 * (V_FULL + stage));
  }
  cp_async_wait_all();  // the copying threads stay until their copies have landed
}

// A warp's m16n8 accumulator fragments (rows top and top + 8 of the tile, columns 8 (chunk0 + j) + 2 (lane % 4)
// (+ 1)) times f0 (row top) and f1 (row top + 8), as 16-bit values into a ROWS-row swizzled tile at generic address
// tile: the swizzle makes the fragment writes conflict-free.
template <int ROWS, typename T, int DB>
__device__ __forceinline__ void store_fragments_sw128(unsigned char* tile, const float (&acc)[DB][4], int top,
                                                      int lane, float f0, float f1, int chunk0 = 0) {
  const int t_lane = lane % 4;
#pragma unroll
  for (int j = 0; j < DB; ++j) {
    // columns 8 (chunk0 + j) + 2 t, + 1: chunk chunk0 + j, bytes 4 t of it
    *reinterpret_cast<unsigned*>(tile + sw128_offset<ROWS>(top, chunk0 + j) + 4 * t_lane) =
        Dtype<T>::pack(acc[j][0] * f0, acc[j][1] * f0);
    *reinterpret_cast<unsigned*>(tile + sw128_offset<ROWS>(top + 8, chunk0 + j) + 4 * t_lane) =
        Dtype<T>::pack(acc[j][2] * f1, acc[j][3] * f1);
  }
}

// A warp's float32 accumulator fragments, as store_fragments_sw128 takes them, times f into a row-major float32 tile
// of COLS columns at global address tile: rows top and top + 8, columns 8 (chunk0 + j) + 2 (lane % 4), + 1.
template <int COLS, int DB>
__device__ __forceinline__ void store_fragments_f32(float* tile, const float (&acc)[DB][4], int top, int lane, float f,
                                                    int chunk0 = 0) {
  float* const row = tile + (long long)top * COLS + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < DB; ++j) {
    *reinterpret_cast<float2*>(row + 8 * (chunk0 + j)) = make_float2(acc[j][0] * f, acc[j][1] * f);
    *reinterpret_cast<float2*>(row + 8 * COLS + 8 * (chunk0 + j)) = make_float2(acc[j][2] * f, acc[j][3] * f);
  }
}

// A warp's packed A fragments (pack_a_operand's: rows top and top + 8, columns 8 chunk0 + 16 kk + 2 (lane % 4) (+ 1)
// and 8 more) into a ROWS-row swizzled tile at generic address tile, conflict-free as above.
template <int ROWS, int KS>
__device__ __forceinline__ void store_packed_sw128(unsigned char* tile, const unsigned (&a)[KS][4], int top,
                                                   int lane, int chunk0 = 0) {
  const int t_lane = lane % 4;
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      *reinterpret_cast<unsigned*>(tile + sw128_offset<ROWS>(top + 8 * (i % 2), chunk0 + 2 * kk + i / 2) + 4 * t_lane) =
          a[kk][i];
    }
  }
}

// A warp's packed A fragments (pack_a_operand's: rows top + 0..15 of the accumulator, columns 16 kk + 0..15) stored
// transposed into a ROWS-row swizzled tile at shared address tile: its column c becomes row c of the tile, its rows
// top .. top + 15 that row's elements top .. top + 15 (stmatrix .trans, four 8 x 8 matrices a k step:
// FlashAttention-3's dS store where S is computed transposed). Conflict-free: a matrix's 8 rows share a logical
// chunk, which the swizzle spreads.
template <int ROWS, int KS>
__device__ __forceinline__ void store_packed_transposed_sw128(unsigned tile, const unsigned (&a)[KS][4], int top) {
  // the lane read here, not passed in: its address computed at each call, not kept in a register across the caller's
  // loop (the one-pass backward's 80-row steps spilled it)
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  // the matrix whose row this lane addresses: a[kk][i] (rows top + 8 (i % 2), columns + 8 (i / 2))
  const int i = lane / 8;
  const int chunk = top / 8 + i % 2;
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    const unsigned addr = tile + sw128_offset<ROWS>(16 * kk + 8 * (i / 2) + lane % 8, chunk);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
                 "r"(a[kk][0]), "r"(a[kk][1]), "r"(a[kk][2]), "r"(a[kk][3])
                 : "memory");
  }
}

// A warpgroup's rows [row_lo, row_lo + 64) of a ROWS-row swizzled tile of D 16-bit columns to global memory in
// 16-byte stores: row r to g + row_offset(r); rows >= rows_valid are skipped. ctid: the thread's index in the
// warpgroup.
template <int ROWS, int D, typename T, typename RowOffset>
__device__ __forceinline__ void store_rows_sw128(T* g, RowOffset row_offset, const unsigned char* tile, int row_lo,
                                                 int rows_valid, int ctid) {
  constexpr int CHUNKS = D / 8;
#pragma unroll
  for (int i = 0; i < 64 * CHUNKS / 128; ++i) {
    const int idx = ctid + 128 * i;
    const int row = row_lo + idx / CHUNKS, c = idx % CHUNKS;
    if (row < rows_valid) {
      *reinterpret_cast<uint4*>(g + row_offset(row) + c * 8) =
          *reinterpret_cast<const uint4*>(tile + sw128_offset<ROWS>(row, c));
    }
  }
}

// The wgmma shapes of the attention kernels, fp32 accumulate; the accumulator of m64nNk16 is, per warp, N / 8
// m16n8 fragments (rows lane / 4 and lane / 4 + 8 of the warp's 16, columns 8 j + 2 (lane % 4) + {0, 1}).
// Their asm operands: the accumulator registers %0.. of N = 32 to 256 (MASKATTN_WGMMA_D_N*), bound to fragments
// of d four at a time (MASKATTN_WGMMA_ACC_X4(d, j): fragments j to j + 3).
#define MASKATTN_WGMMA_ACC_X4(d, j)                                                                                   \
  "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3]), "+f"(d[j + 1][0]), "+f"(d[j + 1][1]),                   \
      "+f"(d[j + 1][2]), "+f"(d[j + 1][3]), "+f"(d[j + 2][0]), "+f"(d[j + 2][1]), "+f"(d[j + 2][2]),                  \
      "+f"(d[j + 2][3]), "+f"(d[j + 3][0]), "+f"(d[j + 3][1]), "+f"(d[j + 3][2]), "+f"(d[j + 3][3])
#define MASKATTN_WGMMA_ACC_N32(d) MASKATTN_WGMMA_ACC_X4(d, 0)
#define MASKATTN_WGMMA_ACC_N80(d)                                                                                     \
  MASKATTN_WGMMA_ACC_X4(d, 0), MASKATTN_WGMMA_ACC_X4(d, 4), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]),              \
      "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3])
#define MASKATTN_WGMMA_ACC_N64(d) MASKATTN_WGMMA_ACC_X4(d, 0), MASKATTN_WGMMA_ACC_X4(d, 4)
#define MASKATTN_WGMMA_ACC_N96(d) MASKATTN_WGMMA_ACC_N64(d), MASKATTN_WGMMA_ACC_X4(d, 8)
#define MASKATTN_WGMMA_ACC_N112(d)                                                                                    \
  MASKATTN_WGMMA_ACC_N96(d), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]),           \
      "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3])
#define MASKATTN_WGMMA_ACC_N128(d)                                                                                    \
  MASKATTN_WGMMA_ACC_N64(d), MASKATTN_WGMMA_ACC_X4(d, 8), MASKATTN_WGMMA_ACC_X4(d, 12)
#define MASKATTN_WGMMA_ACC_N176(d)                                                                                    \
  MASKATTN_WGMMA_ACC_N128(d), MASKATTN_WGMMA_ACC_X4(d, 16), "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]),           \
      "+f"(d[20][3]), "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3])
#define MASKATTN_WGMMA_ACC_N192(d)                                                                                    \
  MASKATTN_WGMMA_ACC_N128(d), MASKATTN_WGMMA_ACC_X4(d, 16), MASKATTN_WGMMA_ACC_X4(d, 20)
#define MASKATTN_WGMMA_ACC_N256(d)                                                                                    \
  MASKATTN_WGMMA_ACC_N192(d), MASKATTN_WGMMA_ACC_X4(d, 24), MASKATTN_WGMMA_ACC_X4(d, 28)
#define MASKATTN_WGMMA_D_N32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
#define MASKATTN_WGMMA_D_N64                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define MASKATTN_WGMMA_D_N80                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                                  \
  "%32, %33, %34, %35, %36, %37, %38, %39}, "
#define MASKATTN_WGMMA_D_N96                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                                  \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, "
#define MASKATTN_WGMMA_D_N112                                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                                  \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                                  \
  "%48, %49, %50, %51, %52, %53, %54, %55}, "
#define MASKATTN_WGMMA_D_N128                                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                                  \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                                  \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
#define MASKATTN_WGMMA_D_N176                                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                                  \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                                  \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                                  \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                                  \
  "%80, %81, %82, %83, %84, %85, %86, %87}, "
#define MASKATTN_WGMMA_D_N192                                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                                  \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                                  \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                                  \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                                  \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
#define MASKATTN_WGMMA_D_N256                                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                                  \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                                  \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                                  \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                                  \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                                  \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "                      \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
// d += A B: A 64 x 16 from registers (per warp, the A fragment of mma.sync m16n8k16), B 16 x N from shared memory,
// N-major (the transposed B of the PTX ISA): rs_nN_tnsp, its asm operands A0..A3 (a), DESC and PRED numbered after
// the N / 2 accumulator registers.
#define MASKATTN_WGMMA_RS_TNSP(TYPE, N, A0, A1, A2, A3, DESC, PRED)                                                   \
  static __device__ __forceinline__ void rs_n##N##_tnsp(float (&d)[N / 8][4], const unsigned (&a)[4],                 \
                                                       unsigned long long desc_b) {                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #PRED ", 0;\n"                                                  \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " " MASKATTN_WGMMA_D_N##N            \
                 "{%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #DESC ", p, 1, 1, 1;\n}\n"                             \
                 : MASKATTN_WGMMA_ACC_N##N(d)                                                                         \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));                                  \
  }
// d = A B (scale_d 0) or d += A B (scale_d 1), A 64 x 16 and B 16 x N from shared memory: NAME, K-major (TA = TB =
// 0) or both transposed (1: A M-major, B N-major, as the PTX ISA names it); its asm operands DA, DB (the
// descriptors) and SCALE numbered after the N / 2 accumulator registers.
#define MASKATTN_WGMMA_SS(TYPE, NAME, N, TA, TB, DA, DB, SCALE)                                                       \
  static __device__ __forceinline__ void NAME(float (&d)[N / 8][4], unsigned long long desc_a,                        \
                                             unsigned long long desc_b, int scale_d) {                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #SCALE ", 0;\n"                                                 \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " " MASKATTN_WGMMA_D_N##N            \
                 "%" #DA ", %" #DB ", p, 1, 1, " #TA ", " #TB ";\n}\n"                                                \
                 : MASKATTN_WGMMA_ACC_N##N(d)                                                                         \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                           \
  }
// ss_nN: both K-major; ss_nN_tb: B transposed (N-major); ss_nN_tnsp: both transposed; ss_n80_ta: A transposed
// (M-major), B K-major (the one-pass backward's 80-row steps: S^T and dP^T, and dQ^T = K^T dS^T).
#define MASKATTN_WGMMA_OPS(TYPE)                                                                                      \
  MASKATTN_WGMMA_SS(TYPE, ss_n80, 80, 0, 0, 40, 41, 42)                                                               \
  MASKATTN_WGMMA_SS(TYPE, ss_n80_ta, 80, 1, 0, 40, 41, 42)                                                            \
  MASKATTN_WGMMA_SS(TYPE, ss_n128, 128, 0, 0, 64, 65, 66)                                                             \
  MASKATTN_WGMMA_SS(TYPE, ss_n112, 112, 0, 0, 56, 57, 58)                                                             \
  MASKATTN_WGMMA_SS(TYPE, ss_n176, 176, 0, 0, 88, 89, 90)                                                             \
  MASKATTN_WGMMA_SS(TYPE, ss_n64, 64, 0, 0, 32, 33, 34)                                                               \
  MASKATTN_WGMMA_SS(TYPE, ss_n32, 32, 0, 0, 16, 17, 18)                                                               \
  MASKATTN_WGMMA_SS(TYPE, ss_n128_tb, 128, 0, 1, 64, 65, 66)                                                          \
  MASKATTN_WGMMA_SS(TYPE, ss_n64_tb, 64, 0, 1, 32, 33, 34)                                                            \
  MASKATTN_WGMMA_SS(TYPE, ss_n32_tb, 32, 0, 1, 16, 17, 18)                                                            \
  MASKATTN_WGMMA_SS(TYPE, ss_n128_tnsp, 128, 1, 1, 64, 65, 66)                                                        \
  MASKATTN_WGMMA_SS(TYPE, ss_n64_tnsp, 64, 1, 1, 32, 33, 34)                                                          \
  MASKATTN_WGMMA_SS(TYPE, ss_n32_tnsp, 32, 1, 1, 16, 17, 18)                                                          \
  MASKATTN_WGMMA_RS_TNSP(TYPE, 32, 16, 17, 18, 19, 20, 21)                                                            \
  MASKATTN_WGMMA_RS_TNSP(TYPE, 64, 32, 33, 34, 35, 36, 37)                                                            \
  MASKATTN_WGMMA_RS_TNSP(TYPE, 96, 48, 49, 50, 51, 52, 53)                                                            \
  MASKATTN_WGMMA_RS_TNSP(TYPE, 128, 64, 65, 66, 67, 68, 69)                                                           \
  MASKATTN_WGMMA_RS_TNSP(TYPE, 192, 96, 97, 98, 99, 100, 101)                                                         \
  MASKATTN_WGMMA_RS_TNSP(TYPE, 256, 128, 129, 130, 131, 132, 133)

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
#undef MASKATTN_WGMMA_RS_TNSP
#undef MASKATTN_WGMMA_SS
#undef MASKATTN_WGMMA_D_N256
#undef MASKATTN_WGMMA_D_N192
#undef MASKATTN_WGMMA_D_N128
#undef MASKATTN_WGMMA_D_N96
#undef MASKATTN_WGMMA_D_N80
#undef MASKATTN_WGMMA_D_N64
#undef MASKATTN_WGMMA_D_N32
#undef MASKATTN_WGMMA_ACC_N256
#undef MASKATTN_WGMMA_ACC_N192
#undef MASKATTN_WGMMA_ACC_N128
#undef MASKATTN_WGMMA_ACC_N96
#undef MASKATTN_WGMMA_ACC_N64
#undef MASKATTN_WGMMA_ACC_N80
#undef MASKATTN_WGMMA_ACC_N32
#undef MASKATTN_WGMMA_ACC_X4

// d += A B with B N-major (Wgmma<T>::rs_nN_tnsp) at the N of d (NB n8 fragments): N = 32 to 256 in steps of 32 but
// 160 and 224. B's tile has whole 64-column blocks (SW128_COLUMNS); at N = 32 and 96 the product reads the first
// half of the last one.
template <typename T, int NB>
__device__ __forceinline__ void wgmma_rs_tnsp(float (&d)[NB][4], const unsigned (&a)[4], unsigned long long desc_b) {
  using Mma = Wgmma<T>;
  if constexpr (NB == 4) {
    Mma::rs_n32_tnsp(d, a, desc_b);
  } else if constexpr (NB == 8) {
    Mma::rs_n64_tnsp(d, a, desc_b);
  } else if constexpr (NB == 12) {
    Mma::rs_n96_tnsp(d, a, desc_b);
  } else if constexpr (NB == 16) {
    Mma::rs_n128_tnsp(d, a, desc_b);
  } else if constexpr (NB == 24) {
    Mma::rs_n192_tnsp(d, a, desc_b);
  } else {
    static_assert(NB == 32, "N = 32, 64, 96, 128, 192 or 256");
    Mma::rs_n256_tnsp(d, a, desc_b);
  }
}

// d = A B (scale_d 0) or d += A B at the N of d (NB n8 fragments: N = 32, 64 or 128; 80, 112 and 176 with B K-major),
// both operands in shared memory: TA / TB 0 for K-major, 1 for transposed (A M-major, B N-major) as the PTX ISA
// names them; TA = 1 takes TB = 1 but at N = 80, and 112 and 176 take both K-major.
template <typename T, int TA, int TB, int NB>
__device__ __forceinline__ void wgmma_ss(float (&d)[NB][4], unsigned long long desc_a, unsigned long long desc_b,
                                         int scale_d) {
  using Mma = Wgmma<T>;
  if constexpr (NB == 10) {
    static_assert(!TB, "N = 80 takes B K-major");
    if constexpr (TA) {
      Mma::ss_n80_ta(d, desc_a, desc_b, scale_d);
    } else {
      Mma::ss_n80(d, desc_a, desc_b, scale_d);
    }
  } else {
    static_assert(NB == 4 || NB == 8 || NB == 16 || (!TA && !TB && (NB == 14 || NB == 22)),
                  "N = 32, 64, 80 or 128; 112 and 176 both K-major");
    static_assert(TB || !TA, "A transposed takes B transposed");
    if constexpr (TA) {
      if constexpr (NB == 4) Mma::ss_n32_tnsp(d, desc_a, desc_b, scale_d);
      if constexpr (NB == 8) Mma::ss_n64_tnsp(d, desc_a, desc_b, scale_d);
      if constexpr (NB == 16) Mma::ss_n128_tnsp(d, desc_a, desc_b, scale_d);
    } else if constexpr (TB) {
      if constexpr (NB == 4) Mma::ss_n32_tb(d, desc_a, desc_b, scale_d);
      if constexpr (NB == 8) Mma::ss_n64_tb(d, desc_a, desc_b, scale_d);
      if constexpr (NB == 16) Mma::ss_n128_tb(d, desc_a, desc_b, scale_d);
    } else {
      if constexpr (NB == 4) Mma::ss_n32(d, desc_a, desc_b, scale_d);
      if constexpr (NB == 8) Mma::ss_n64(d, desc_a, desc_b, scale_d);
      if constexpr (NB == 14) Mma::ss_n112(d, desc_a, desc_b, scale_d);
      if constexpr (NB == 22) Mma::ss_n176(d, desc_a, desc_b, scale_d);
      if constexpr (NB == 16) Mma::ss_n128(d, desc_a, desc_b, scale_d);
    }
  }
}

// Fragments [OFF, OFF + NB) of an accumulator, as an accumulator of their own (a product over part of its columns).
template <int OFF, int NB, int N>
__device__ __forceinline__ float (&fragments(float (&acc)[N][4]))[NB][4] {
  static_assert(OFF + NB <= N, "inside the accumulator");
  return *reinterpret_cast<float(*)[NB][4]>(&acc[OFF]);
}

}  // namespace maskattn
