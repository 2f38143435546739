// The bulk tensor copy engine (TMA, sm_90): tiles of K and V copied by one thread, their arrival counted in bytes on
// an mbarrier, so the producer never waits for its own copies (with cp.async a producer thread had to wait for its
// group to land before announcing it: the consumers then waited for the next key block's announcement behind the
// producer's wait for a free V stage, about 30% of the dense D = 128 forward on an H100, measured by leaving the
// copies out). As FlashAttention-3's mainloop (hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp) feeds its warpgroups.
//
// A tensor map describes a (B, H, n, D) tensor of 16-bit elements (any strides, 16-byte multiples), built on the
// host by the driver's cuTensorMapEncodeTiled (backends/cuda/tma.py) with a box of 64 columns x TILE rows and the
// 128-byte swizzle: exactly wgmma.cuh's shared layout (a 64-column block of TILE x 128 bytes, chunk c of row r at
// c ^ (r % 8)). Rows past n arrive as zeros. The map travels as a __grid_constant__ kernel parameter.
#pragma once

#include "wgmma.cuh"

namespace maskattn {

// CUtensorMap's storage: 128 opaque bytes, 64-byte aligned.
struct alignas(64) TensorMap {
  unsigned long long words[16];
};

// Arrives on the barrier and raises the bytes its phase waits for by `bytes` (the copies' complete_tx lower them).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// `bytes` contiguous bytes (a multiple of 16, both addresses 16-byte aligned) from global to shared memory by the
// copy engine, completing on the barrier.
__device__ __forceinline__ void bulk_load(unsigned s_dst, const void* g_src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(s_dst),
               "l"(reinterpret_cast<unsigned long long>(g_src)), "r"(bytes), "r"(bar)
               : "memory");
}

// g_dst[i] += s_src[i] for `bytes` / 4 floats or 32-bit integers, by the copy engine (FlashAttention-3's dQ
// accumulation): one asynchronous bulk reduction of this thread's bulk group. The shared source must have been written
// before a fence_proxy_async and stays in use until bulk_wait_read says it was read. Integer additions are exact, so
// their sum does not depend on the order in which the copy engine performs them.
__device__ __forceinline__ void bulk_reduce_add(float* g_dst, unsigned s_src, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                   reinterpret_cast<unsigned long long>(g_dst)),
               "r"(s_src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_reduce_add(int* g_dst, unsigned s_src, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.s32 [%0], [%1], %2;" ::"l"(
                   reinterpret_cast<unsigned long long>(g_dst)),
               "r"(s_src), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Until at most PENDING of this thread's bulk groups are still reading their shared sources.
template <int PENDING>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(PENDING) : "memory");
}

// Until at most PENDING of this thread's bulk groups are incomplete (their writes done).
template <int PENDING>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(PENDING) : "memory");
}

// Rows [row0, row0 + ROWS) of head h of batch b into the swizzled tile at shared address s_tile (1024-byte aligned),
// one box per 64-column block; the copies complete ROWS * SW128_COLUMNS<D> * 2 bytes on the barrier (columns past D
// arrive as zeros).
template <int ROWS, int D>
__device__ __forceinline__ void tma_load_tile(unsigned s_tile, const TensorMap* map, int row0, int h, int b,
                                              unsigned bar) {
  const unsigned long long desc = reinterpret_cast<unsigned long long>(map);
#pragma unroll
  for (int cb = 0; cb < SW128_COLUMNS<D> / 64; ++cb) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];" ::"r"(s_tile + cb * ROWS * SW128_BYTES),
        "l"(desc), "r"(cb * 64), "r"(row0), "r"(h), "r"(b), "r"(bar)
        : "memory");
  }
}

// The reverse of tma_load_tile for ROWS rows of a swizzled tile: rows [row0, row0 + ROWS) of head h of batch b from
// shared address s_tile, where column block cb lies block_stride bytes after block cb - 1 (a tile of more rows than
// the box's), one box per 64-column block in this thread's bulk group; rows and columns past the tensor's are not
// written. The tile must have been written before a fence_proxy_async and stays in use until bulk_wait_read.
template <int ROWS, int D>
__device__ __forceinline__ void tma_store_tile(const TensorMap* map, unsigned s_tile, unsigned block_stride, int row0,
                                               int h, int b) {
  const unsigned long long desc = reinterpret_cast<unsigned long long>(map);
#pragma unroll
  for (int cb = 0; cb < SW128_COLUMNS<D> / 64; ++cb) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];" ::"l"(desc),
                 "r"(cb * 64), "r"(row0), "r"(h), "r"(b), "r"(s_tile + cb * block_stride)
                 : "memory");
  }
}

// produce_kv_stages (wgmma.cuh) for plans without a node order, by one thread of the producer warpgroup: key blocks
// blocks[0 .. n_entries) of KV head h of batch b through the tensor maps of K and V, into the two stages; a stage is
// refilled after its release, and its FULL barrier (one arrival: kv_stages_init's full_arrivals 1) completes when
// the bytes have landed, a partial entry's payload (PayloadStages) with its K tile.
template <int TILE_N, int D, typename Payload>
__device__ __forceinline__ void produce_kv_stages_tma(unsigned bars, unsigned sK, unsigned sV, const TensorMap* k_map,
                                                      const TensorMap* v_map, int h, int b,
                                                      const int* __restrict__ blocks, int n_entries,
                                                      const Payload& payload) {
  using namespace kv_stages;
  constexpr unsigned TILE = TILE_N * SW128_COLUMNS<D> * 2;
  int n_block = n_entries > 0 ? blocks[0] : 0;
  typename Payload::Item item = n_entries > 0 ? payload.read(0) : typename Payload::Item{};
#pragma unroll 1
  for (int i = 0; i < n_entries; ++i) {
    const int stage = i & 1;
    const unsigned released = ((i >> 1) & 1) ^ 1;  // parity of the release of block i - 2
    // read ahead: their latency hides behind the waits
    const int next = i + 1 < n_entries ? blocks[i + 1] : 0;
    const typename Payload::Item next_item = payload.read(i + 1 < n_entries ? i + 1 : i);
    typename Payload::Copy copies[2];
    const int n_copies = payload.copies(item, n_block, stage, copies);
    unsigned bytes = TILE;
    for (int c = 0; c < n_copies; ++c) bytes += copies[c].bytes;
    if (i >= 2) mbarrier_wait(bars + 8 * (K_EMPTY + stage), released);
    mbarrier_arrive_expect_tx(bars + 8 * (K_FULL + stage), bytes);
    tma_load_tile<TILE_N, D>(sK + stage * TILE, k_map, n_block * TILE_N, h, b, bars + 8 * (K_FULL + stage));
    for (int c = 0; c < n_copies; ++c) {
      bulk_load(copies[c].dst, copies[c].src, copies[c].bytes, bars + 8 * (K_FULL + stage));
    }
    if (i >= 2) mbarrier_wait(bars + 8 * (V_EMPTY + stage), released);
    mbarrier_arrive_expect_tx(bars + 8 * (V_FULL + stage), TILE);
    tma_load_tile<TILE_N, D>(sV + stage * TILE, v_map, n_block * TILE_N, h, b, bars + 8 * (V_FULL + stage));
    n_block = next;
    item = next_item;
  }
}

}  // namespace maskattn
