// Hopper (sm_90a) block-sparse flash-attention backward in one pass (FlashAttention-3's backward): bwd.cu's
// bwd_dkdv_kernel (its parameters, grid, plan traversal, masks and outputs) on wgmma, which also accumulates dQ.
//
// bwd_dkdv_sm90_kernel:
// Same parameters and outputs as bwd_dkdv_kernel (bwd.cu) with TILE_M = TILE_N = 128, then the batch, the last
// wave's split (SPLITS) and tensor maps of Q, dO, K and V (tma.cuh), on a one-dimensional grid: common.cuh's
// split_cta gives the CTA its head group b * kv_heads + kv_head, its key block's rank in n_order and its slice of
// the columns; the CTA walks the backward CSR of every query head of its GQA group, BM query rows
// a step (STEP_ROWS: 128 at D <= 64, else 64; at D = 128 without bit tiles, node order or fixed point 80, over runs
// of consecutive query blocks, with dQ computed transposed: RUNS), and reads bwd_preprocess_kernel's LSE (log2
// units), delta and (FIXED) dQ exponents. Three warpgroups (384 threads), FlashAttention-3's backward with the
// products transposed:
// - warpgroup 0 produces K and V (once) and, per step, Q, dO and the row values (two stages) in 128-byte-swizzled
//   shared memory, a partial bit tile's BM rows (up to D = 128), and the step's description (rows, dQ chunk, mask
//   group, payload; a negative row ends the walk).
//   Plans without a node order: one thread and the copy engine (tensor maps for the tiles, bulk copies for the row
//   values and a partial bit tile's rows), each stage counted in bytes on its "full" mbarrier, so the producer never
//   waits for its copies.
//   Plans with one: cp.async gathers by the warpgroup, each step announced by the copying threads' arrivals once
//   their copies land (cp_async_arrive), so the producer does not wait for them either; the consumers fence them for
//   wgmma after the wait. A stage is refilled after its "empty" mbarrier says both consumers are done with it.
// - warpgroups 1 and 2 consume, 64 keys each: S^T = K Q^T and dP^T = V dO^T (wgmma m64nBMk16, both operands in
//   shared memory, K-major), so a warp's part of each accumulator is the m16n8 fragment of bwd_common.cuh's *_t
//   mask helpers (keys in rows, queries in columns); P^T = exp2(S^T scale_log2 - LSE) and dS^T = P^T (dP^T - delta)
//   packed to 16 bits are the register A operands of dV += P^T dO and dK += dS^T Q, with dO and Q N-major (the
//   same tiles read transposed, as fwd_sm90.cu reads V).
// - each consumer also writes its dS^T rows to shared memory (two buffers, used in turn), and once both have (a
//   named barrier of the two), computes its part of the step's dQ (its 64 rows where BM = 128, else its half of the
//   columns), dS K over the block's 128 keys with both operands read transposed from shared memory, then issues dK's
//   product and, while it runs, stages dQ (DqChunk order: conflict-free), which is added to the accumulator dq_accum
//   by one bulk reduction (cp.reduce.async.bulk; FlashAttention-4's order); bwd_dq_convert_sm90_kernel then scales
//   and converts it. So S^T and dP^T are computed once per tile: five products where two passes would take seven.
// - without a node order, a thread of the producer warpgroup (warp 1's first) issues those reductions
//   (FlashAttention-4's dQ writer warp): a consumer hands its staged chunk over by arriving on an mbarrier and goes
//   on, and waits only, before it stages the next, until the writer has seen the last one read (WRITER: 4-6% faster
//   than issuing them itself behind a barrier of its 128 threads, docs/performance.md 2026-11-28 (d) and (e)). With a
//   node order every producer thread gathers, and D = 256 stages dQ in the step's tiles: there the consumers issue
//   their own. FlashAttention-4 hands over on named barriers (bar.arrive, then bar.sync by the writer); the chunk's
//   index, which its writer knows from a scheduler of its own, passes here through shared memory, and
//   compute-sanitizer's racecheck took those reads as racing with the consumer's writes (it does not follow
//   bar.arrive's release), where it follows mbarriers.
// - the accumulator holds float32 (the order of the additions varies from run to run) or, with FIXED (the
//   deterministic backward), 32-bit integers: each row's values scaled by a power of two that keeps every partial sum
//   below 2^30 (bwd_common.cuh's dq_fixed_exponent) and rounded, so that the exact integer sum is the same in any
//   order. It costs a byte of row values per row and a conversion per element; the reductions move as many bytes.
//
// Head dims 32 and 96 take the shared layout of 64 and 128, as in fwd_sm90.cu (DS = SW128_COLUMNS<D> columns); the
// products stop at column D but for the dQ halves at D = 96, which split DS (the accumulator dq_accum has DS columns a
// row, the conversion reads D of them).
//
// Dynamic shared memory: BWD_SM90_SMEM_BYTES<D> = 1024 (alignment slack) + K and V (128 x DS each) + two stages of Q
// and dO (BM x DS each) + two dS^T buffers (128 x BM; wide: and two of P^T) + the consumers' dQ chunks (64 x
// DQ_COLUMNS values each; none at D = 256) + two stages of the BM LSE, delta (floats) and dQ exponent (bytes) values
// + (up to D = 128) two stages of a bit tile's BM rows (BITS_BYTES) + 128 (step descriptions, mbarriers).
//
// Template knobs: T (half_t | bf16_t), D (32 to 256), MASK, PERM, FIXED; the #ifndef defaults configure the
// instantiations of a standalone nvcc -DMASKATTN_INSTANTIATE build.
#include "bwd_common.cuh"
#include "common.cuh"
#include "mask.cuh"
#include "tma.cuh"

#ifndef MASKATTN_DTYPE
#define MASKATTN_DTYPE bf16_t
#endif
#ifndef MASKATTN_HEAD_DIM
#define MASKATTN_HEAD_DIM 128
#endif
#ifndef MASKATTN_MASK
#define MASKATTN_MASK MASK_NONE
#endif
#ifndef MASKATTN_PERM
#define MASKATTN_PERM false
#endif
#ifndef MASKATTN_FIXED
#define MASKATTN_FIXED false
#endif

namespace maskattn {

namespace sm90_bwd {

constexpr int TILE_M = 128;
constexpr int TILE_N = 128;  // the dK/dV kernel's key blocks up to D = 128
constexpr int THREADS = 384;
// dK/dV kernel: query rows per step, 128 where the tiles are one 64-column block wide (D = 32, 64; FlashAttention-3's
// 128 x 128 backward tile at D = 64), else 64. At D <= 64 a step's products are short (k = D) and each step pays
// for its waits, barriers and dQ reduction: 128 rows halve the steps, and the consumers' S^T and dP^T (64 + 64
// registers), dK and dV (32 + 32) still fit their budget. From D = 96 dK and dV alone take 48 + 48 or more.
// RUNS: FlashAttention-3's non-causal D = 128 step (FlashAttention-4 takes it too; its 80-row steps made its backward
// 4.5% faster than its 64-row ones on dense 16k D = 128, H200, performance.md 2026-11-28 (i)): 80 rows, which the
// plan's 128-row query blocks do not divide, so the walk takes runs of consecutive query blocks (RUNS) and cuts a
// step where a run ends; dQ is computed transposed (dQ^T = K^T dS^T, M = DS: wgmma's M is 64). Plans without bit
// tiles, node order or fixed point: the tiles' and dQ staging's shared memory leave no room for bit tiles or dQ
// exponents, and a row table would not fit. Interval masks apply to any rows: a step is partial where one of its
// blocks is. At D = 96 (the padded tiles take D = 128's shared memory) only plans without partial tiles: there 80
// rows took 0.97x the time of 64 on full 16k, but 1.03x on causal and 1.02x on doc_causal (2026-11-29 (o)).
template <int D, int MASK, bool PERM, bool FIXED>
constexpr bool RUNS = ((D == 128 && MASK != MASK_BITS) || (D == 96 && MASK == MASK_NONE)) && !PERM && !FIXED;
template <int D, bool R = false>
constexpr int STEP_ROWS = R ? 80 : SW128_COLUMNS<D> == 64 ? 128 : 64;
// How the consumers share a step's dQ. At 128 rows each takes 64 of them over D columns (m64nD products over the
// block's keys); at 64 rows each takes half of the columns (HalfColumns) of all 64; with RUNS each takes half of
// the columns of dQ^T (its 64 x 80).
template <int D>
constexpr bool DQ_BY_ROWS = STEP_ROWS<D> == 128;
// dK/dV kernel: the plan's key blocks, 128 keys up to D = 128 (the consumers take 64 each) and 64 at D = 192 and 256
// (the training tile there, kernels.tile_for: the consumers share the keys and split the columns)
template <int D>
constexpr bool WIDE = D > 128;
template <int D>
constexpr int KEY_BLOCK = WIDE<D> ? 64 : TILE_N;
// dK/dV kernel: whether a launch may split its last wave's CTAs (split_cta; bwd.py's tail_splits_for): plans without
// partial tiles, whose columns are all of one length where the launch splits (dense ones, block-aligned masks), from
// D = 96 (at 32 and 64 reading the split's slice in the producer's walk spilled 4 bytes at its 24 registers)
template <int D, int MASK>
constexpr bool SPLITS = MASK == MASK_NONE && D > 64;
// dK/dV kernel: registers of the producer warpgroup (one thread's walk for the copy engine and one the dQ writer's, at
// 24 without a spill only as long as the walk keeps few values; for perm plans the cp.async addressing and the walk
// of 128 threads: 40, with which only D = 256 with fixed-point dQ and bit tiles spills, 8 bytes) and of the consumers
// (dK and dV accumulators, 64 + 64 at D = 128 and 256, S^T and dP^T, 32 + 32 (64 + 64 at D <= 64, 16 + 16 wide), dQ's
// part, 32 (64 wide); at 232 rather than 240 the writer's backward ran 2-4% slower at D = 64, H200, 2026-11-28 (e)).
// setmaxnreg.inc waits until the registers the producer's setmaxnreg.dec freed suffice, so the three budgets must add
// up to what the CTA holds at entry, 3 x 168: a consumer budget one step too high hangs the kernel.
template <bool PERM>
constexpr int PRODUCER_REGS = PERM ? 40 : 24;
template <bool PERM>
constexpr int CONSUMER_REGS = PERM ? 232 : 240;
static_assert(PRODUCER_REGS<false> + 2 * CONSUMER_REGS<false> == 3 * 168 &&
                  PRODUCER_REGS<true> + 2 * CONSUMER_REGS<true> == 3 * 168,
              "register budgets add up to the CTA's (__launch_bounds__(384, 1): 168 a thread)");
constexpr int ALIGN = 1024;         // the 128-byte swizzle repeats every 8 rows of 128 bytes

template <int D>
constexpr int KV_BYTES = KEY_BLOCK<D> * SW128_COLUMNS<D> * 2;
template <int D, bool R = false>
constexpr int STEP_BYTES = STEP_ROWS<D, R> * SW128_COLUMNS<D> * 2;
// LSE, delta, dQ's exponent (FIXED; none with RUNS)
template <int D, bool R = false>
constexpr int ROW_VALUES_BYTES = 2 * 2 * STEP_ROWS<D, R> * 4 + (R ? 0 : 2 * STEP_ROWS<D, R>);
// dS^T of a step, keys in rows and its queries in columns (RUNS: dS, queries in rows), two buffers; wide kernels
// also P^T, two buffers
template <int D, bool R = false>
constexpr int DS_BYTES = KEY_BLOCK<D> * STEP_ROWS<D, R> * 2;
// A consumer's part of the step's dQ, 64 rows of DQ_COLUMNS values (DQ_BY_ROWS: its rows, D columns; else its half of
// the columns, DS / 2), in the accumulator's register order (DqChunk), staged for its bulk reduction: in a buffer of
// its own, but at D = 256 (no room left) in the consumer's own columns of the step's Q and dO tiles, which nothing else
// reads once its dK and dV products have completed
// (RUNS: the consumers' halves of the step's 80 rows interleaved, DqRows order)
template <int D>
constexpr int DQ_COLUMNS = DQ_BY_ROWS<D> ? D : SW128_COLUMNS<D> / 2;
template <int D, bool R = false>
constexpr int DQ_BYTES = (R ? STEP_ROWS<D, R> : 64) * DQ_COLUMNS<D> * 4;
template <int D>
constexpr bool DQ_IN_STEP = D == 256;
// the step's rows of a bit tile (BM x KEY_BLOCK bits), staged with Q and dO where two stages fit (up to D = 128; 384
// bytes are left at D = 192 and 256, whose consumers read them from the pool): the consumers' reads of a partial
// step's bits then wait on shared memory, not on L2, which the dQ reductions keep busy
template <int D>
constexpr bool BITS_STAGED = !WIDE<D>;
template <int D, bool R = false>
constexpr int BITS_BYTES = BITS_STAGED<D> && !R ? STEP_ROWS<D, R> * KEY_BLOCK<D> / 8 : 0;

// mbarriers: K and V landed; a stage's step landed; a stage released by both consumers; with the dQ writer
// (WRITER), a consumer's dQ chunk staged (its 128 threads arrive) and its staging read again (the writer arrives)
enum Barrier { KV_FULL = 0, FULL = 1, EMPTY = 3, DQ_FULL = 5, DQ_EMPTY = 7, BARRIERS = 9 };
static_assert(2 * 16 + BARRIERS * 8 <= 128, "the step descriptions and mbarriers fit the last 128 bytes");

// Named barriers of the consumers: 1 + consumer (its own 128 threads), DS_READY (both, 256 threads)
constexpr int DS_READY = 6;

// A consumer's columns of its step's dQ (of the tiles' DS columns), and of dK and dV in the wide kernel: [N0 c, N0 c +
// N0) and, where N1 > 0 (DS = 192), [2 N0 + N1 c, 2 N0 + N1 (c + 1)). An N-major wgmma operand may end inside a
// 64-column swizzle block but not start inside one and run past it, so DS = 192 takes its halves of 96 columns as 64 +
// 32.
template <int DS>
struct HalfColumns {
  static constexpr int N0 = DS == 192 ? 64 : DS / 2, N1 = DS / 2 - N0;
  // first column of piece 0 or 1 of consumer c
  static __device__ __forceinline__ int first(int piece, int c) { return piece == 0 ? N0 * c : 2 * N0 + N1 * c; }
  // (consumer, index among its DS / 2 columns) of column col
  static __device__ __forceinline__ int2 of(int col) {
    if constexpr (N1 > 0) {
      if (col >= 2 * N0) return make_int2((col - 2 * N0) / N1, N0 + (col - 2 * N0) % N1);
    }
    return make_int2(col / N0, col % N0);
  }
  // desc (a ROWS-row N-major tile) moved to piece 0 or 1 of consumer c's columns: 64-column block col / 64, element
  // col % 64 of its rows (a descriptor's start address may lie inside a row)
  static __device__ __forceinline__ unsigned long long at(unsigned long long desc, int rows, int piece, int c) {
    const int col = first(piece, c);
    return desc + ((unsigned)((col / 64) * rows * SW128_BYTES + (col % 64) * 2) >> 4);
  }
};

// acc (consumer c's DS / 2 columns) = A B (scale_d 0) or += A B, with B N-major (a ROWS-row tile at desc b, k step
// b_step of it), in HalfColumns' pieces; A K-major (TA 0) or M-major (TA 1)
template <typename T, int TA, int DS>
__device__ __forceinline__ void wgmma_ss_columns(float (&acc)[DS / 16][4], unsigned long long a, unsigned long long b,
                                                 unsigned b_step, int rows, int c, int scale_d) {
  using Cols = HalfColumns<DS>;
  constexpr int F0 = Cols::N0 / 8, F1 = Cols::N1 / 8;
  wgmma_ss<T, TA, 1>(fragments<0, F0>(acc), a, Cols::at(b, rows, 0, c) + b_step, scale_d);
  if constexpr (F1 > 0) wgmma_ss<T, TA, 1>(fragments<F0, F1>(acc), a, Cols::at(b, rows, 1, c) + b_step, scale_d);
}

// RUNS: the dQ accumulator in rows of the padded query rows (b * heads + h) * n_q_pad + row, of DS = 128 values in
// the order the consumers stage them: consumer c's dQ^T fragment j (of m64n80: its columns 16 warp + g and 8 more,
// step rows 8 j + 2 t and one more) goes to 8-byte unit 32 c + ((8 warp + g) ^ (4 t)) of the row, column 16 warp +
// g the unit's first value and its + 8 the second. A step's 80 rows are then one contiguous run of the accumulator
// (one bulk reduction), staged by 64-bit stores without bank conflicts (a half-warp's 16 lanes take 16 distinct
// units modulo 16).
struct DqRows {
  // offset in its row of element col of row `row`
  static __device__ __forceinline__ int offset(int row, int col) {
    const int c = col / 64, x = col % 64;
    return 2 * (32 * c + ((8 * (x / 16) + x % 8) ^ (4 * ((row / 2) % 4)))) + (x / 8) % 2;
  }
};

// Where a consumer's part of a step's dQ lies in the accumulator: chunk (2 * step + consumer) of 64 x COLUMNS 4-byte
// values (DQ_COLUMNS), where step = (b * heads + h) * (n_q_pad / STEP_ROWS) + row / STEP_ROWS, written as the
// consumers hold it: the n8 fragment j of warpgroup thread c at values 4 (128 j + c) .. + 4 (fragment rows 16 (c / 32)
// + (c % 32) / 4 and 8 more, columns 8 j + 2 (c % 4) and one more, of the consumer's rows or columns:
// bwd_dq_convert_sm90_kernel undoes it). Bulk reductions from shared memory written without bank conflicts.
template <int COLUMNS>
struct DqChunk {
  static constexpr int VALUES = 64 * COLUMNS;
  // offset of element (r, x) of chunk ch (r < 64, x < COLUMNS)
  static __device__ __forceinline__ long long offset(long long ch, int r, int x) {
    const int thread = 32 * (r / 16) + 4 * (r % 8) + (x % 8) / 2;
    return ch * VALUES + 4 * (128 * (x / 8) + thread) + 2 * ((r % 16) / 8) + x % 2;
  }
};

// The elements of the dQ accumulator: float32, or (FIXED) 32-bit integers, each row's values times its 2^e
// (bwd_common.cuh's dq_fixed_exponent). staged: a fragment's four values as the consumers stage them (rows scaled by
// to_fixed.x, to_fixed.y); value2: two adjacent elements back as floats, still scaled.
template <bool FIXED>
struct DqElement {
  using type = float;
  using vec4 = float4;
  static __device__ __forceinline__ vec4 staged(const float (&a)[4], float2) {
    return make_float4(a[0], a[1], a[2], a[3]);
  }
  static __device__ __forceinline__ float2 value2(const float* p) { return *reinterpret_cast<const float2*>(p); }
};
template <>
struct DqElement<true> {
  using type = int;
  using vec4 = int4;
  static __device__ __forceinline__ vec4 staged(const float (&a)[4], float2 to_fixed) {
    return make_int4(__float2int_rn(a[0] * to_fixed.x), __float2int_rn(a[1] * to_fixed.x),
                     __float2int_rn(a[2] * to_fixed.y), __float2int_rn(a[3] * to_fixed.y));
  }
  static __device__ __forceinline__ float2 value2(const int* p) {
    const int2 x = *reinterpret_cast<const int2*>(p);
    return make_float2((float)x.x, (float)x.y);
  }
};

}  // namespace sm90_bwd

// bwd_sm90_smem_bytes in backends/cuda/bwd.py
template <int D, bool R = false>
constexpr int BWD_SM90_SMEM_BYTES =
    sm90_bwd::ALIGN + 2 * sm90_bwd::KV_BYTES<D> + 4 * sm90_bwd::STEP_BYTES<D, R> + 2 * sm90_bwd::DS_BYTES<D, R> +
    (sm90_bwd::WIDE<D> ? 2 * sm90_bwd::DS_BYTES<D> : 0) +
    (sm90_bwd::DQ_IN_STEP<D> ? 0 : 2 * sm90_bwd::DQ_BYTES<D, R>) + sm90_bwd::ROW_VALUES_BYTES<D, R> +
    2 * sm90_bwd::BITS_BYTES<D, R> + 128;

template <typename T, int D, int MASK, bool PERM, bool FIXED>
__global__ void __launch_bounds__(sm90_bwd::THREADS, 1)
    bwd_dkdv_sm90_kernel(MASKATTN_BWD_DKDV_PARAMS, int batch, int num_splits, int split_from, long long part_offset,
                         const __grid_constant__ TensorMap q_map,
                         const __grid_constant__ TensorMap do_map, const __grid_constant__ TensorMap k_map,
                         const __grid_constant__ TensorMap v_map) {
  if constexpr (!PERM) perm = nullptr;  // no node order: the row lookups compile away (common.cuh)
  using namespace sm90_bwd;
  static_assert(D == 32 || D == 64 || D == 96 || D == 128 || D == 192 || D == 256, "head dims 32 to 256");
  using Dq = DqElement<FIXED>;
  constexpr bool W = WIDE<D>;
  constexpr int KB = KEY_BLOCK<D>;       // keys of the CTA
  constexpr int DS = SW128_COLUMNS<D>;   // columns of the shared tiles, and of dQ's products
  constexpr bool R = RUNS<D, MASK, PERM, FIXED>;
  constexpr int BM = STEP_ROWS<D, R>;    // query rows per step
  constexpr int NQ = (W ? BM / 2 : BM) / 8;  // n8 fragments of S^T and dP^T per warp (query columns)
  constexpr int DB = (W ? DS / 2 : D) / 8;   // n8 fragments of dK and dV per warp
  constexpr int KS = BM / 16;  // k16 steps of P^T dO and dS^T Q
  constexpr int KV = KV_BYTES<D>, STEP = STEP_BYTES<D, R>, DSB = DS_BYTES<D, R>;
  constexpr int DQB = DQ_BYTES<D, R>, BITS = BITS_BYTES<D, R>;
  constexpr bool IN_STEP = DQ_IN_STEP<D>;
  // the dQ reductions by a writer thread of the producer warpgroup (warp 1's first), where that warpgroup's other
  // threads are idle (no node order: one thread drives the copy engine) and a consumer stages dQ in a buffer of its own
  constexpr bool WRITER = !PERM && !IN_STEP;
  using Cols = HalfColumns<DS>;
  static_assert(BWD_SM90_SMEM_BYTES<D, R> + 2 * BM * 4 <= 227 * 1024,
                "fits the shared memory a block may opt into, with a node order's row table (producer_rows<BM>)");

  extern __shared__ __align__(1024) unsigned char smem[];
  const unsigned smem_raw = smem_addr(smem);
  const unsigned sK = (smem_raw + ALIGN - 1) & ~(ALIGN - 1u);
  const unsigned sV = sK + KV;
  const unsigned sQ = sV + KV;            // [2] stages
  const unsigned sdO = sQ + 2 * STEP;     // [2] stages
  const unsigned sdS = sdO + 2 * STEP;    // [2] buffers
  const unsigned sP = sdS + 2 * DSB;      // [2] buffers (wide)
  const unsigned sdQ = sP + (W ? 2 * DSB : 0);              // [2] consumers (but DQ_IN_STEP)
  // [2] stages of BM LSE, then [2] of delta (floats), then (FIXED) [2] of dQ's exponents (bytes)
  const unsigned sRows = sdQ + (IN_STEP ? 0 : 2 * DQB);
  const unsigned sBits = sRows + ROW_VALUES_BYTES<D, R>;  // [2] stages of a bit tile's step rows (BITS_STAGED)
  const unsigned sSteps = sBits + 2 * BITS;               // [2] int4 step descriptions
  const unsigned bars = sSteps + 32;                 // BWD_SM90_SMEM_BYTES<D, R> in all
  auto barrier = [&](int id) { return bars + 8u * id; };
  auto generic = [&](unsigned addr) { return smem + (addr - smem_raw); };
  int4* steps = reinterpret_cast<int4*>(generic(sSteps));
  // WRITER: each consumer's last staged chunk (here.y of its step, -1 at the end), then (RUNS) the step's rows as
  // each consumer wrote them (the writer reads consumer 1's, with its chunk), after the mbarriers
  int* dq_slots = reinterpret_cast<int*>(generic(bars + 8 * BARRIERS));
  // then (SPLITS) a split CTA's slice of its columns, read at each head of the walk (computed there, ptxas spilled):
  // x, its first entry's offset, and y, its entries, or -1 for a whole column (split_cta: split s of S takes entries
  // [len s / S, len (s + 1) / S) of a column of len entries), the same for every head of the group, since the launch
  // splits only plans whose columns are all of one length (bwd.py)
  int2* const walk_slice = reinterpret_cast<int2*>(dq_slots + 4);
  static_assert(8 * BARRIERS + 24 <= 96, "the slots lie between the mbarriers and the row table");
  // where consumer c's dQ chunk of step chunk y (the step's here.y) lands in dq_accum (DqChunk order; RUNS: the
  // step's first row, both consumers' halves, y its accumulator row / 16, DqRows order)
  auto accum_chunk = [&](long long y, int c) {
    if constexpr (R) return reinterpret_cast<typename Dq::type*>(dq_accum) + y * 16 * DS;
    return reinterpret_cast<typename Dq::type*>(dq_accum) + DqChunk<DQ_COLUMNS<D>>::offset(2 * y + c, 0, 0);
  };
  // a step's rows (from row0) of the bit tile payload in the pool
  auto step_bits = [&](int payload, int row0) {
    return bit_pool + (long long)payload * (TILE_M * KB / 32) + row0 % TILE_M * (KB / 32);
  };

  const int tid = threadIdx.x, warpgroup = tid / 128;
  // the CTA's batch, KV head and key block; each warpgroup computes them after its register reallocation (live
  // across it, ptxas spills them)
  struct Where {
    int b, kv_head, h_first, n_block, key0;
  };
  auto where = [&]() {
    const SplitCta cta_of = split_cta(n_levels, batch * kv_heads, n_nblocks, split_from, num_splits);
    const int b = cta_of.head_group / kv_heads, kv_head = cta_of.head_group % kv_heads;
    const int h_first = kv_head * heads_per_kv;
    const int n_block = n_order[(long long)(b * group_sb + h_first * group_sh) * n_nblocks + cta_of.rank];
    return Where{b, kv_head, h_first, n_block, n_block * KB};
  };

  // with a node order: producer_rows of the query steps (two slots of BM rows), then the epilogue's key rows
  int* const row_table = reinterpret_cast<int*>(generic(bars + 96));
  static_assert(2 * BM >= KB, "the key rows fit the row table");

  if (tid == 0) {
    if constexpr (SPLITS<D, MASK>) {
      const SplitCta cta_of = split_cta(n_levels, batch * kv_heads, n_nblocks, split_from, num_splits);
      *walk_slice = make_int2(0, -1);
      if (cta_of.splits > 1) {
        const int b = cta_of.head_group / kv_heads, h_first = cta_of.head_group % kv_heads * heads_per_kv;
        const int group = b * group_sb + h_first * group_sh;
        const long long* ptr =
            col_ptr + (long long)group * (n_nblocks + 1) + n_order[(long long)group * n_nblocks + cta_of.rank];
        const int len = (int)(ptr[1] - ptr[0]), first = len * cta_of.split / cta_of.splits;
        *walk_slice = make_int2(first, len * (cta_of.split + 1) / cta_of.splits - first);
      }
    }
    // the copy engine's stages are announced by one arrival (with the bytes they wait for), cp.async ones by the 128
    // copying threads' cp_async_arrive, and a step's by thread 0's arrival too, after it wrote the step's description
    mbarrier_init(barrier(KV_FULL), PERM ? 128 : 1);
    for (int s = 0; s < 2; ++s) {
      mbarrier_init(barrier(FULL + s), PERM ? 129 : 1);
      // every consumer thread: each read the stage (LSE, delta, the step) with ordinary loads, which a release by
      // one lane per warp orders only through __syncwarp (compute-sanitizer's racecheck does not follow that)
      mbarrier_init(barrier(EMPTY + s), 256);
      mbarrier_init(barrier(DQ_FULL + s), 128);  // here s is the consumer
      mbarrier_init(barrier(DQ_EMPTY + s), 1);
    }
  }
  __syncthreads();

  if (warpgroup == 0) {
    setmaxnreg_dec<PRODUCER_REGS<PERM>>();
    const Where at = where();
    const int b = at.b, kv_head = at.kv_head, h_first = at.h_first, n_block = at.n_block, key0 = at.key0;
    // the walk over (query head of the group, backward CSR entry, BM-row step of the entry's query block)
    int head = -1, group = 0, m_block = 0, step = 0, n_steps = 0;
    long long e = 0;
    int left = 0;  // entries of the column after e (a 32-bit count, not an end: the walk keeps few registers)
    auto next_entry = [&]() -> bool {  // false at the walk's end
      ++e;
      while (--left < 0) {
        if (++head >= heads_per_kv) return false;
        group = b * group_sb + (h_first + head) * group_sh;
        const long long* ptr = col_ptr + (long long)group * (n_nblocks + 1) + n_block;
        e = ptr[0];
        left = (int)(ptr[1] - ptr[0]);
        if constexpr (SPLITS<D, MASK>) {
          const int2 slice = *walk_slice;
          e += slice.x;
          if (slice.y >= 0) left = slice.y;
        }
      }
      m_block = row_idx[e];
      return true;
    };
    // RUNS: the step's first row and rows (a multiple of 16, up to BM; padding rows of the last query block too): a
    // step runs on into the next entry's block where that is the next block (a run of consecutive blocks), else ends
    // at its own block's end; the next starts where it ended
    // (run_partial: whether one of its blocks is a PARTIAL tile)
    int run_row = 0, run_rows = 0;
    bool run_partial = false;
    auto partial_entry = [&](long long entry) { return MASK != MASK_NONE && bwd_kind[entry] == KIND_PARTIAL; };
    auto advance = [&]() -> bool {
      if constexpr (R) {
        int next = run_row + run_rows;
        if (run_rows == 0 || next >= (m_block + 1) * TILE_M) {
          const bool crossed = next > (m_block + 1) * TILE_M;  // into the next entry's block, which it continues
          if (!next_entry()) return false;
          if (!crossed) next = m_block * TILE_M;
        }
        run_row = next;
        run_rows = min(BM, (m_block + 1) * TILE_M - next);
        run_partial = partial_entry(e);
        if (run_rows < BM && left > 0 && row_idx[e + 1] == m_block + 1) {
          run_rows = BM;
          run_partial = run_partial || partial_entry(e + 1);
        }
        return true;
      }
      if (++step < n_steps) return true;
      step = 0;
      if (!next_entry()) return false;
      n_steps = min(TILE_M / BM, (n_q - m_block * TILE_M + BM - 1) / BM);
      return true;
    };
    // the step's description: its first row, its dQ chunks (DqChunk; RUNS: its accumulator row / 16), mask group and
    // payload (-1: FULL; RUNS: its rows, negated where the step is partial)
    // rows are padded to whole query blocks (+inf, 0), so the BM LSE and delta values need no bound (RUNS: a step's
    // rows do)
    auto row_values = [&](int row0) { return (long long)(b * heads + h_first + head) * n_q_pad + row0; };
    // (the chunk from the step's row values: n_q_pad / BM, kept, would spill at the producer's 24 registers)
    auto describe = [&](int row0) {
      int payload = -1;
      if constexpr (R) {
        payload = run_partial ? -run_rows : run_rows;
      } else if (partial_entry(e)) {
        payload = MASK == MASK_BITS ? bwd_payload_idx[e] : 0;
      }
      return make_int4(row0, (int)(row_values(row0) / (R ? 16 : BM)), group, payload);
    };
    const int4 end_of_walk = make_int4(-1, 0, 0, 0);
    if constexpr (PERM) {  // rows gathered through the node order: cp.async by the warpgroup, which never waits
      // for its copies either (cp_async_arrive); the consumers fence them after their waits
      // the block's keys through the row table too (then a barrier: the first step's rows overwrite it)
      const int* keys = producer_rows<KB>(row_table, 0, perm, key0, n_k - key0, tid);
      load_rows_sw128_async<KB, D, 128>(sK, k + b * k_sb + kv_head * k_sh, TableRows{keys, (int)k_sn}, n_k - key0,
                                        tid);
      load_rows_sw128_async<KB, D, 128>(sV, v + b * v_sb + kv_head * v_sh, TableRows{keys, (int)v_sn}, n_k - key0,
                                        tid);
      cp_async_arrive(barrier(KV_FULL));
      named_barrier_sync(PRODUCER_BARRIER, 128);
#pragma unroll 1
      for (int i = 0;; ++i) {
        const int stage = i & 1;
        // the walk and the step's rows are looked up before the wait for the stage, so that their latency hides
        // behind it
        const bool have = advance();
        const int h = h_first + head;
        const int row0 = m_block * TILE_M + step * BM;
        const int* rows = have ? producer_rows<BM>(row_table, stage, perm, row0, n_q - row0, tid) : nullptr;
        if (i >= 2) mbarrier_wait(barrier(EMPTY + stage), ((i >> 1) & 1) ^ 1);  // the release of step i - 2
        if (have) {
          load_rows_sw128_async<BM, D, 128>(sQ + stage * STEP, q + b * q_sb + h * q_sh, TableRows{rows, (int)q_sn},
                                            n_q - row0, tid);
          load_rows_sw128_async<BM, D, 128>(sdO + stage * STEP, d_o + b * do_sb + h * do_sh,
                                            TableRows{rows, (int)do_sn}, n_q - row0, tid);
          const long long values = row_values(row0);
          if (tid < BM / 4) {
            cp_async_16(sRows + (stage * BM + tid * 4) * 4, lse_log2 + values + tid * 4, true);
          } else if (tid < BM / 2) {
            const int c = tid - BM / 4;
            cp_async_16(sRows + ((2 + stage) * BM + c * 4) * 4, delta + values + c * 4, true);
          } else if (FIXED && tid < BM / 2 + BM / 16) {
            const int c = tid - BM / 2;
            cp_async_16(sRows + 4 * BM * 4 + stage * BM + c * 16, dq_exp + values + c * 16, true);
          }
          const int4 here = describe(row0);
          if (MASK == MASK_BITS && BITS > 0 && here.w >= 0) {
            for (int c = tid; c < BITS / 16; c += 128) {
              cp_async_16(sBits + stage * BITS + c * 16, step_bits(here.w, row0) + c * 4, true);
            }
          }
          if (tid == 0) steps[stage] = here;
        } else if (tid == 0) {
          steps[stage] = end_of_walk;
        }
        cp_async_arrive(barrier(FULL + stage));
        if (tid == 0) mbarrier_arrive(barrier(FULL + stage));  // releases its write of steps[stage]
        if (!have) break;
      }
      cp_async_wait_all();  // the copying threads stay until their copies have landed
    } else if (tid == 0) {  // tiles of consecutive rows: the copy engine, one thread, which never waits for its copies
      mbarrier_arrive_expect_tx(barrier(KV_FULL), 2 * KV);
      tma_load_tile<KB, D>(sK, &k_map, key0, kv_head, b, barrier(KV_FULL));
      tma_load_tile<KB, D>(sV, &v_map, key0, kv_head, b, barrier(KV_FULL));
#pragma unroll 1
      for (int i = 0;; ++i) {
        const int stage = i & 1;
        const unsigned full = barrier(FULL + stage);
        if (i >= 2) mbarrier_wait(barrier(EMPTY + stage), ((i >> 1) & 1) ^ 1);  // the release of step i - 2
        if (!advance()) {
          steps[stage] = end_of_walk;
          mbarrier_arrive(full);
          break;
        }
        const int h = h_first + head;
        const int row0 = R ? run_row : m_block * TILE_M + step * BM;
        const int4 here = describe(row0);
        steps[stage] = here;
        const bool bits = MASK == MASK_BITS && BITS > 0 && here.w >= 0;
        const int value_rows = R ? run_rows : BM;  // LSE and delta (RUNS: the step's rows; the others' are masked)
        mbarrier_arrive_expect_tx(full, 2 * STEP + 2 * value_rows * 4 + (FIXED ? BM : 0) + (bits ? BITS : 0));
        tma_load_tile<BM, D>(sQ + stage * STEP, &q_map, row0, h, b, full);
        tma_load_tile<BM, D>(sdO + stage * STEP, &do_map, row0, h, b, full);
        const long long values = row_values(row0);
        bulk_load(sRows + stage * BM * 4, lse_log2 + values, value_rows * 4, full);
        bulk_load(sRows + (2 + stage) * BM * 4, delta + values, value_rows * 4, full);
        if (FIXED) bulk_load(sRows + 4 * BM * 4 + stage * BM, dq_exp + values, BM, full);
        if (bits) bulk_load(sBits + stage * BITS, step_bits(here.w, row0), BITS, full);
      }
    } else if (WRITER && tid == 32) {
      // the dQ writer: each consumer's chunk, once the consumer has staged it (DQ_FULL), into dq_accum by one bulk
      // reduction (RUNS: both consumers' rows by one, once both have staged); its staging is handed back (DQ_EMPTY)
      // once the copy engine has read it. A chunk index < 0 ends. Both consumers stage a chunk at every step they do
      // not skip (the same steps).
#pragma unroll 1
      for (int n = 0;; ++n) {
        bool end = false;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          mbarrier_wait(barrier(DQ_FULL + c), n & 1);
          const long long chunk = dq_slots[c];
          if (chunk < 0) {
            end = true;
          } else if (!R || c == 1) {
            bulk_reduce_add(accum_chunk(chunk, c), sdQ + (R ? 0 : c * DQB), R ? dq_slots[3] * DS * 4 : DQB);
            bulk_commit();
          }
        }
        if (end) break;
        bulk_wait_read<R ? 0 : 1>();  // (RUNS: the one reduction's read frees both)
        mbarrier_arrive(barrier(DQ_EMPTY));
        bulk_wait_read<0>();
        mbarrier_arrive(barrier(DQ_EMPTY + 1));
      }
      bulk_wait<0>();
    }
    return;
  }

  setmaxnreg_inc<CONSUMER_REGS<PERM>>();
  const Where at = where();
  const int b = at.b, kv_head = at.kv_head, n_block = at.n_block, key0 = at.key0;
  // Up to D = 128 consumer c takes keys [64 c, 64 c + 64) of the block's 128, all BM queries of a step and every
  // column of dK and dV. Wide (D = 192, 256) both take the block's 64 keys: consumer c computes the step's S^T and
  // dP^T for queries [32 c, 32 c + 32), writes P^T and dS^T to shared memory, and once both have, accumulates its
  // columns (HalfColumns) of dK and dV over all BM queries (and of dQ over the 64 keys): every product reads both
  // operands from shared memory.
  // broadcast from lane 0 so that the compilers know it is the same in every lane (CUTLASS's
  // canonical_warp_group_idx): the wgmma descriptors built from it live in uniform registers (57 -> 8 R2UR at
  // D = 128, 1-2% faster on the H100, performance.md 2026-11-28; the forward takes it at its 192-row tile only,
  // fwd_sm90.cu)
  const int consumer = __shfl_sync(0xffffffffu, warpgroup, 0) - 1;
  const int key_lo = W ? 0 : 64 * consumer, query_lo = W ? 32 * consumer : 0;
  const int ctid = tid % 128, warp = ctid / 32, lane = tid % 32;
  const int g_lane = lane / 4, t_lane = lane % 4;
  const int tile_key = key_lo + 16 * warp + g_lane;  // this thread's keys inside the block: tile_key (+ 8)
  const int key = key0 + tile_key;
  const bool past_keys = key0 + KB > n_k;

  // descriptors at stage 0 and k step 0. K-major (S^T, dP^T): a k step moves 32 bytes inside a 64-column block,
  // then a block; N-major (dV, dK: Q and dO transposed): a k step moves 16 rows, 64-column blocks BM rows apart.
  const unsigned long long k_desc = sw128_desc(sK + key_lo * SW128_BYTES, 16, 8 * SW128_BYTES);
  const unsigned long long v_desc = sw128_desc(sV + key_lo * SW128_BYTES, 16, 8 * SW128_BYTES);
  const unsigned long long q_desc = sw128_desc(sQ + query_lo * SW128_BYTES, 16, 8 * SW128_BYTES);
  const unsigned long long do_desc = sw128_desc(sdO + query_lo * SW128_BYTES, 16, 8 * SW128_BYTES);
  const unsigned long long qt_desc = sw128_desc(sQ, BM * SW128_BYTES, 8 * SW128_BYTES);
  const unsigned long long dot_desc = sw128_desc(sdO, BM * SW128_BYTES, 8 * SW128_BYTES);
  auto kt_step = [](int stage, int kk) { return (unsigned)(stage * STEP + kk * 16 * SW128_BYTES) >> 4; };
  // dQ (this consumer's DQ_COLUMNS of the step's rows, or its 64 rows) = dS K over the block's keys, with
  // dS^T (keys in rows, M contiguous; in this turn's buffer, 64 queries a swizzle block) and K (N contiguous) read
  // transposed; a k step moves 16 keys.
  // RUNS: dQ^T (this consumer's 64 columns x the step's BM rows) = K^T dS^T, with K^T (M contiguous) the consumer's
  // 64-column block of sK and dS (queries in rows, keys contiguous: K-major) from this turn's buffer.
  constexpr int DQ_FRAGMENTS = R ? BM / 8 : DQ_COLUMNS<D> / 8;
  const unsigned long long dst_desc = sw128_desc(sdS, KB * SW128_BYTES, 8 * SW128_BYTES);
  const unsigned long long kt_desc = sw128_desc(sK, KB * SW128_BYTES, 8 * SW128_BYTES);
  const unsigned long long ds_desc = sw128_desc(sdS, 16, 8 * SW128_BYTES);
  auto dq_products = [&](float(&acc_dq)[DQ_FRAGMENTS][4], unsigned buffer) {
    const unsigned rows = DQ_BY_ROWS<D> ? (unsigned)(consumer * KB * SW128_BYTES) >> 4 : 0;
#pragma unroll
    for (int kk = 0; kk < KB / 16; ++kk) {
      const unsigned key_step = (unsigned)(kk * 16 * SW128_BYTES) >> 4;
      const unsigned long long a = dst_desc + ((buffer >> 4) + rows + key_step);
      if constexpr (R) {
        wgmma_ss<T, 1, 0>(acc_dq, kt_desc + ((unsigned)(consumer * KB * SW128_BYTES) >> 4) + key_step,
                          ds_desc + (buffer >> 4) + sw128_k_step<BM>(kk), kk > 0);
      } else if constexpr (DQ_BY_ROWS<D>) {
        wgmma_ss<T, 1, 1>(acc_dq, a, kt_desc + key_step, kk > 0);
      } else {
        wgmma_ss_columns<T, 1, DS>(acc_dq, a, kt_desc, key_step, KB, consumer, kk > 0);
      }
    }
  };
  // wide: P^T (and dS^T) as K-major A operands, queries along k
  const unsigned long long pt_desc = sw128_desc(sP, 16, 8 * SW128_BYTES);
  const unsigned long long dst_k_desc = sw128_desc(sdS, 16, 8 * SW128_BYTES);
  // where a consumer stages its chunk of dQ (DQ_IN_STEP: in its own columns of the step's Q, then dO)
  constexpr int PIECES = IN_STEP ? 2 : 1;
  constexpr int PIECE_BYTES = DQB / PIECES;
  auto staging = [&](int stage, int piece) {
    return IN_STEP ? (piece ? sdO : sQ) + stage * STEP + consumer * PIECE_BYTES
                   : sdQ + consumer * DQB + piece * PIECE_BYTES;
  };
  // a consumer's own staging buffer (!DQ_IN_STEP) is free again once its last bulk reduction has read it: where the
  // consumers issue their own (node orders), waited for before DS_READY, which every thread of both consumers passes
  // before it writes its next chunk (the reduction had the step's products and exponentials to finish). Every thread
  // waits, though only the one that issued the reductions has any: a branch on the thread here, between products in
  // flight, makes ptxas serialize them (warning C7519, "warpgroup.arrive is injected").
  auto dq_staging_free = [&]() {
    if constexpr (!IN_STEP && !WRITER) bulk_wait_read<0>();
  };
  // WRITER: before a consumer stages its chunk `chunk` (counted from 0), the writer has seen the one before read
  // (phase chunk - 1 of DQ_EMPTY; a new mbarrier's phase "-1" counts as completed)
  auto writer_read_last = [&](int chunk) { mbarrier_wait(barrier(DQ_EMPTY + consumer), (chunk & 1) ^ 1); };

  float acc_dk[DB][4], acc_dv[DB][4];
#pragma unroll
  for (int j = 0; j < DB; ++j) {
#pragma unroll
    for (int c = 0; c < 4; ++c) acc_dk[j][c] = acc_dv[j][c] = 0.f;
  }
  float s[NQ][4], dp[NQ][4];
  unsigned p[NQ / 2][4], ds[NQ / 2][4];
  const float* lse_s = reinterpret_cast<const float*>(generic(sRows));
  const float* delta_s = lse_s + 2 * BM;
  int ds_turn = 0;  // steps that wrote dS^T so far: its buffers (and P^T's) alternate
  // DQ_IN_STEP: the stage whose tiles the last dQ reductions read, released once they have: in the next step, under
  // its S^T and dP^T products; -1: none
  int held = -1;
  auto release_held = [&]() {
    if (IN_STEP && held >= 0) {
      if (ctid == 0) bulk_wait_read<0>();
      mbarrier_arrive(barrier(EMPTY + held));
      held = -1;
    }
  };

  mbarrier_wait(barrier(KV_FULL), 0);
#pragma unroll 1
  for (int i = 0;; ++i) {
    const int stage = i & 1;
    mbarrier_wait(barrier(FULL + stage), (i >> 1) & 1);
    if constexpr (PERM) fence_proxy_async();  // gathered tiles (K and V's too) are fenced by their readers
    const int4 here = steps[stage];
    if (here.x < 0) break;
    const int row0 = here.x, group = here.z, payload = here.w;
    const int rows = R ? abs(payload) : BM;  // the step's rows (RUNS: a run's last step may hold fewer)
    // this thread's first query column's LSE and delta (lse_s[values], delta_s[values])
    auto values = [&]() { return stage * BM + query_lo + 2 * t_lane; };
    // LSE into registers before the products, so that its latency is not paid after S^T's wait (2 NQ registers);
    // read after it at 128-row steps (NQ = 16: 32 registers more spill beside S^T and dP^T) and with a node order
    // (there the consumers hold 232 registers, at which it spilled: the producers gather)
    constexpr bool LSE_AHEAD = !PERM && NQ <= 8;
    float2 lse[NQ];
    if constexpr (LSE_AHEAD) load_cols_t(lse, ColumnValues{lse_s + values()});
    const bool partial = MASK != MASK_NONE && (R ? payload < 0 : payload >= 0);
    const int* block_minmax = interval_minmax + ((long long)group * n_nblocks + n_block) * 8;
    // interval tiles can hold BM-row steps that no key of the block sees
    const bool skip = MASK == MASK_INTERVALS && partial && interval_covers(block_minmax, row0, rows);
    if (!skip) {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wgmma_ss<T, 0, 0>(s, k_desc + sw128_k_step<KB>(kk), q_desc + ((stage * STEP) >> 4) + sw128_k_step<BM>(kk),
                          kk > 0);
      }
      wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wgmma_ss<T, 0, 0>(dp, v_desc + sw128_k_step<KB>(kk), do_desc + ((stage * STEP) >> 4) + sw128_k_step<BM>(kk),
                          kk > 0);
      }
      wgmma_commit();
      release_held();
      wgmma_wait<1>();
      pin_registers(s);

      const int query = row0 + query_lo + 2 * t_lane;  // this thread's first query column
      if constexpr (MASK == MASK_INTERVALS) {
        if (partial) {
          const IntervalReach reach = interval_reach(block_minmax, row0, rows);
          const int2* bounds = reinterpret_cast<const int2*>(intervals) + (long long)group * n_k * 2;
          if (reach.lower) mask_interval_t(s, bounds, key, n_k, query);
          if (reach.upper) mask_interval_t(s, bounds + 1, key, n_k, query);
        }
      }  // bit tiles mask the packed operands below
      if (past_keys) mask_keys_t(s, key, n_k);

      if constexpr (!LSE_AHEAD) {  // P^T
        probabilities_t(s, ColumnValues{lse_s + values()}, scale_log2);
      } else {
        probabilities_t(s, [&](int j) { return lse[j]; }, scale_log2);
      }
      wgmma_wait<0>();
      pin_registers(dp);

      score_grads_t(dp, s, ColumnValues{delta_s + values()});  // dS^T = P^T (dP^T - delta)

      // P^T and dS^T packed to 16 bits: the float ones are dead by then
      pack_a_operand<T>(p, s);
      pack_a_operand<T>(ds, dp);
      if constexpr (R) {  // a step cut at a run's end (rows: 16 k): its columns past the rows, whose row values are
        if (rows < BM) {  // stale, to 0
#pragma unroll
          for (int kk = 0; kk < KS; ++kk) {
            if (16 * kk >= rows) {
#pragma unroll
              for (int c = 0; c < 4; ++c) p[kk][c] = ds[kk][c] = 0u;
            }
          }
        }
      }
      if (MASK == MASK_BITS && partial) {
        const unsigned* tile_bits = BITS_STAGED<D>
                                        ? reinterpret_cast<const unsigned*>(generic(sBits + stage * BITS))
                                        : step_bits(payload, row0);
        mask_bits_packed_t<KB>(p, ds, tile_bits, query_lo + 2 * t_lane, tile_key);
      }
      float acc_dq[DQ_FRAGMENTS][4];
      const unsigned buffer = (ds_turn & 1) * DSB;  // the other consumer may still read the previous turn's
      if constexpr (!W) {
        // dV += P^T dO and dK += dS^T Q (scaled in the epilogue) from registers
        auto dk_products = [&]() {
#pragma unroll
          for (int kk = 0; kk < KS; ++kk) wgmma_rs_tnsp<T>(acc_dk, ds[kk], qt_desc + kt_step(stage, kk));
        };
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) wgmma_rs_tnsp<T>(acc_dv, p[kk], dot_desc + kt_step(stage, kk));
        wgmma_commit();
        // dS^T into this turn's buffer, then dQ's part, then dK's product, which runs while dQ is staged below
        // (FlashAttention-4's order)
        if constexpr (R) {
          store_packed_transposed_sw128<BM>(sdS + buffer, ds, key_lo + 16 * warp);
        } else {
          store_packed_sw128<KB>(generic(sdS + buffer), ds, tile_key, lane);
        }
        fence_proxy_async();
        dq_staging_free();
        named_barrier_sync(DS_READY, 256);
        dq_products(acc_dq, buffer);
        wgmma_commit();
        dk_products();
        wgmma_commit();
      } else {
        // P^T and dS^T of this consumer's queries into the turn's buffers; once both consumers' are there, dV += P^T
        // dO, dK += dS^T Q and dQ = dS K over this consumer's columns, in pieces (HalfColumns)
        store_packed_sw128<KB>(generic(sP + buffer), p, tile_key, lane, query_lo / 8);
        store_packed_sw128<KB>(generic(sdS + buffer), ds, tile_key, lane, query_lo / 8);
        fence_proxy_async();
        dq_staging_free();
        named_barrier_sync(DS_READY, 256);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
          wgmma_ss_columns<T, 0, DS>(acc_dv, pt_desc + (buffer >> 4) + sw128_k_step<KB>(kk),
                                     dot_desc, kt_step(stage, kk), BM, consumer, 1);
        }
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
          wgmma_ss_columns<T, 0, DS>(acc_dk, dst_k_desc + (buffer >> 4) + sw128_k_step<KB>(kk),
                                     qt_desc, kt_step(stage, kk), BM, consumer, 1);
        }
        dq_products(acc_dq, buffer);
        wgmma_commit();
      }
      ++ds_turn;
      constexpr bool DK_UNDER_STAGING = !W;  // the dK product still runs: the last commit group
      wgmma_wait<DK_UNDER_STAGING ? 1 : 0>();
      pin_registers(acc_dv);
      pin_registers(acc_dq);
      // the chunk to shared memory (its staging was free by DS_READY, or, WRITER, once the writer has seen the last
      // chunk read; DQ_IN_STEP: the stage's last reductions were read before it was refilled, and its tiles are free
      // once the whole consumer is past its products), then bulk reductions into dq_accum
      if constexpr (IN_STEP) named_barrier_sync(1 + consumer, 128);
      constexpr int PIECE_FRAGMENTS = DQ_FRAGMENTS / PIECES;
      // FIXED: the fragment's rows (16 warp + g_lane and 8 more of the consumer's 64) scaled by their 2^e and
      // rounded to integers (bwd_common.cuh's dq_fixed_exponent)
      float2 to_fixed = make_float2(1.f, 1.f);
      if constexpr (FIXED) {
        const signed char* exp_s = reinterpret_cast<const signed char*>(lse_s + 4 * BM) + stage * BM +
                                   (DQ_BY_ROWS<D> ? 64 * consumer : 0) + 16 * warp + g_lane;
        to_fixed = make_float2(exp2_int(exp_s[0]), exp2_int(exp_s[8]));
      }
      if constexpr (WRITER) writer_read_last(ds_turn - 1);
      if constexpr (R) {  // dQ^T's fragment j: rows 8 j + 2 t and one more (DqRows)
        float* staged = reinterpret_cast<float*>(generic(sdQ));
        // column 16 warp + g_lane of the consumer's 64 (and the + 8 beside it), at the same offset in every row 8 j +
        // 2 t_lane and the next
        const int at = DqRows::offset(2 * t_lane, 64 * consumer + 16 * warp + g_lane);
#pragma unroll
        for (int j = 0; j < DQ_FRAGMENTS; ++j) {
          const int row = 8 * j + 2 * t_lane;
          *reinterpret_cast<float2*>(staged + row * DS + at) = make_float2(acc_dq[j][0], acc_dq[j][2]);
          *reinterpret_cast<float2*>(staged + (row + 1) * DS + at) = make_float2(acc_dq[j][1], acc_dq[j][3]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < DQ_FRAGMENTS; ++j) {
          auto* staged = reinterpret_cast<typename Dq::vec4*>(generic(staging(stage, j / PIECE_FRAGMENTS)));
          staged[128 * (j % PIECE_FRAGMENTS) + ctid] = Dq::staged(acc_dq[j], to_fixed);
        }
      }
      fence_proxy_async();
      if constexpr (WRITER) {
        if (ctid == 0) {
          dq_slots[consumer] = here.y;
          if (R) dq_slots[2 + consumer] = rows;  // both write, unpredicated: consumer 1 only read 1.012x (l)
        }
        mbarrier_arrive(barrier(DQ_FULL + consumer));
      } else {
        named_barrier_sync(1 + consumer, 128);
        if (ctid == 0) {
#pragma unroll
          for (int piece = 0; piece < PIECES; ++piece) {
            bulk_reduce_add(accum_chunk(here.y, consumer) + piece * (PIECE_BYTES / 4), staging(stage, piece),
                            PIECE_BYTES);
          }
          bulk_commit();
        }
      }
      if constexpr (DK_UNDER_STAGING) wgmma_wait<0>();
      pin_registers(acc_dk);
      if constexpr (!W) {  // the register A operands
        pin_registers(p);
        pin_registers(ds);
      }
    }
    if (skip) release_held();
    if (IN_STEP && !skip) {
      held = stage;
    } else {
      mbarrier_arrive(barrier(EMPTY + stage));
    }
  }
  if constexpr (WRITER) {  // the end of the walk, to the writer
    writer_read_last(ds_turn);
    if (ctid == 0) dq_slots[consumer] = -1;
    mbarrier_arrive(barrier(DQ_FULL + consumer));
  } else if (ctid == 0) {
    bulk_wait<0>();
  }

  // A split CTA (split_cta): its scaled dK and its dV in float32 from registers to its piece of the partials,
  // part_offset floats past dq_accum ([piece][dK, dV][KB rows][D]), which bwd_dkdv_merge_sm90_kernel adds up.
  if (const int piece = SPLITS<D, MASK> ? split_piece(split_from) : -1; piece >= 0) {
    float* const part = reinterpret_cast<float*>(dq_accum) + part_offset + (long long)piece * 2 * KB * D;
    if constexpr (!W) {
      store_fragments_f32<D>(part, acc_dk, tile_key, lane, scale);
      store_fragments_f32<D>(part + KB * D, acc_dv, tile_key, lane, 1.f);
    } else {
      constexpr int F0 = Cols::N0 / 8, F1 = Cols::N1 / 8;
      const int chunk0 = Cols::first(0, consumer) / 8, chunk1 = Cols::first(1, consumer) / 8;
      store_fragments_f32<D>(part, fragments<0, F0>(acc_dk), tile_key, lane, scale, chunk0);
      store_fragments_f32<D>(part + KB * D, fragments<0, F0>(acc_dv), tile_key, lane, 1.f, chunk0);
      if constexpr (F1 > 0) {
        store_fragments_f32<D>(part, fragments<F0, F1>(acc_dk), tile_key, lane, scale, chunk1);
        store_fragments_f32<D>(part + KB * D, fragments<F0, F1>(acc_dv), tile_key, lane, 1.f, chunk1);
      }
    }
    return;
  }

  // Epilogue: dK = scale * acc_dk and dV through sK and sV (swizzled: conflict-free for the fragment writes and the
  // row reads), then 16-byte stores. Up to D = 128 each consumer writes and stores its own rows; wide ones their
  // columns of every row, then consumer 0 stores dK and consumer 1 dV. Every wgmma reading sK or sV must have
  // completed: the other consumer's too where they read all of K (dQ's product, wide S^T and dP^T).
  // With a node order the block's key rows are looked up once each, into the row table (the producer has finished
  // with it: the walk's end was announced after its last lookup), not once a stored chunk.
  unsigned char* sdK = generic(sK);
  unsigned char* sdV = generic(sV);
  if constexpr (PERM) {
    const int t = tid - 128;
    if (t < KB) row_table[t] = t < n_k - key0 ? caller_token(perm, key0 + t) : 0;
  }
  named_barrier_sync(DS_READY, 256);
  // where the block's key r goes in dK (dV: dv_sn)
  auto key_rows = [&](long long s_n) {
    if constexpr (PERM) {
      return TableRows{row_table, (int)s_n};
    } else {
      return TokenRows{perm, s_n, key0};
    }
  };
  if constexpr (!W) {
    store_fragments_sw128<KB, T>(sdK, acc_dk, tile_key, lane, scale, scale);
    store_fragments_sw128<KB, T>(sdV, acc_dv, tile_key, lane, 1.f, 1.f);
    named_barrier_sync(1 + consumer, 128);
    store_rows_sw128<KB, D>(dk + b * dk_sb + kv_head * dk_sh, key_rows(dk_sn), sdK, key_lo, n_k - key0, ctid);
    store_rows_sw128<KB, D>(dv + b * dv_sb + kv_head * dv_sh, key_rows(dv_sn), sdV, key_lo, n_k - key0, ctid);
  } else {
    constexpr int F0 = Cols::N0 / 8, F1 = Cols::N1 / 8;
    const int chunk0 = Cols::first(0, consumer) / 8, chunk1 = Cols::first(1, consumer) / 8;
    store_fragments_sw128<KB, T>(sdK, fragments<0, F0>(acc_dk), tile_key, lane, scale, scale, chunk0);
    store_fragments_sw128<KB, T>(sdV, fragments<0, F0>(acc_dv), tile_key, lane, 1.f, 1.f, chunk0);
    if constexpr (F1 > 0) {
      store_fragments_sw128<KB, T>(sdK, fragments<F0, F1>(acc_dk), tile_key, lane, scale, scale, chunk1);
      store_fragments_sw128<KB, T>(sdV, fragments<F0, F1>(acc_dv), tile_key, lane, 1.f, 1.f, chunk1);
    }
    named_barrier_sync(DS_READY, 256);
    if (consumer == 0) {
      store_rows_sw128<KB, D>(dk + b * dk_sb + kv_head * dk_sh, key_rows(dk_sn), sdK, 0, n_k - key0, ctid);
    } else {
      store_rows_sw128<KB, D>(dv + b * dv_sb + kv_head * dv_sh, key_rows(dv_sn), sdV, 0, n_k - key0, ctid);
    }
  }
}

// dQ = scale * the one-pass kernel's accumulator (DqChunk order; FIXED: integers, times 2^-dq_exp of the row; R, the
// kernel's RUNS: rows, DqRows order), in the input dtype and the caller's row order: one thread per 8 elements of a
// row, which lie in four threads' fragments of one chunk.
template <typename T, int D, bool FIXED, bool R>
__global__ void __launch_bounds__(CONVERT_THREADS) bwd_dq_convert_sm90_kernel(
    const float* __restrict__ dq_accum, const signed char* __restrict__ dq_exp, T* __restrict__ dq, long long dq_sb,
    long long dq_sh, long long dq_sn, int heads, int n_q, int n_q_pad, float scale, const int* __restrict__ perm) {
  using namespace sm90_bwd;
  constexpr int CHUNKS = D / 8;  // of 8 elements, per row
  constexpr int DS = SW128_COLUMNS<D>;  // the accumulator's columns
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const long long idx = (long long)blockIdx.x * CONVERT_THREADS + threadIdx.x;
  const int row = idx / CHUNKS, col = idx % CHUNKS * 8;
  if (row >= n_q) return;
  const float unit = FIXED ? scale * exp2_int(-dq_exp[(long long)bh * n_q_pad + row]) : scale;
  unsigned packed[4];
  if constexpr (R) {
    const float* accum_row = dq_accum + ((long long)bh * n_q_pad + row) * DS;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      packed[t] = Dtype<T>::pack(accum_row[DqRows::offset(row, col + 2 * t)] * unit,
                                 accum_row[DqRows::offset(row, col + 2 * t + 1)] * unit);
    }
  } else {
    constexpr int BM = STEP_ROWS<D>;
    const long long step = (long long)bh * (n_q_pad / BM) + row / BM;
    // (consumer, its row, its column) of 8 columns of the row: of one piece of the columns where DQ_BY_ROWS is false
    const int2 at = DQ_BY_ROWS<D> ? make_int2(row % BM / 64, col) : HalfColumns<DS>::of(col);
    const long long src = DqChunk<DQ_COLUMNS<D>>::offset(2 * step + at.x, row % 64, at.y);
    using Dq = DqElement<FIXED>;
#pragma unroll
    for (int t = 0; t < 4; ++t) {  // columns col + 2 t, + 1: the next thread of the fragment row, 4 values on
      const float2 x = Dq::value2(reinterpret_cast<const typename Dq::type*>(dq_accum) + src + 4 * t);
      packed[t] = Dtype<T>::pack(x.x * unit, x.y * unit);
    }
  }
  *reinterpret_cast<uint4*>(dq + b * dq_sb + h * dq_sh + caller_token(perm, row) * dq_sn + col) =
      make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

// Adds up the split CTAs' dK and dV (bwd_dkdv_sm90_kernel's partials, part_offset floats past dq_accum: [split s]
// [tail CTA t][dK, dV][KB rows][D]) in split order, so deterministically, into dK and dV: a thread takes 4 columns of
// a key row, placed through the plan's CTA order (n_order, n_levels) and node order as the dK/dV kernel places them.
template <typename T, int D>
__global__ void __launch_bounds__(CONVERT_THREADS) bwd_dkdv_merge_sm90_kernel(
    const float* __restrict__ dq_accum, T* __restrict__ dk, T* __restrict__ dv, long long part_offset, long long dk_sb,
    long long dk_sh, long long dk_sn, long long dv_sb, long long dv_sh, long long dv_sn, int kv_heads,
    int heads_per_kv, int n_k, int group_sb, int group_sh, int n_nblocks, int split_from, int tail, int num_splits,
    const int* __restrict__ n_order, const int2* __restrict__ n_levels, const int* __restrict__ perm) {
  using namespace sm90_bwd;
  constexpr int KB = KEY_BLOCK<D>, QUADS = D / 4;
  const long long idx = (long long)blockIdx.x * CONVERT_THREADS + threadIdx.x;
  if (idx >= (long long)tail * KB * QUADS) return;
  const int t = (int)(idx / (KB * QUADS)), r = (int)(idx / QUADS % KB), c = (int)(idx % QUADS) * 4;
  const PlanCta cta = plan_cta(split_from + t, (split_from + tail) / n_nblocks, n_levels);
  const int b = cta.head_group / kv_heads, kv_head = cta.head_group % kv_heads;
  const int group = b * group_sb + kv_head * heads_per_kv * group_sh;
  const int key = n_order[(long long)group * n_nblocks + cta.rank] * KB + r;
  if (key >= n_k) return;
  const float* part = dq_accum + part_offset + ((long long)t * 2 * KB + r) * D + c;
  const long long split_stride = (long long)tail * 2 * KB * D;
  float4 sk = make_float4(0.f, 0.f, 0.f, 0.f), sv = sk;
#pragma unroll 1  // unrolled, ptxas spilled 8 bytes
  for (int s = 0; s < num_splits; ++s) {
    const float4 x = *reinterpret_cast<const float4*>(part + s * split_stride);
    const float4 y = *reinterpret_cast<const float4*>(part + s * split_stride + KB * D);
    sk = make_float4(sk.x + x.x, sk.y + x.y, sk.z + x.z, sk.w + x.w);
    sv = make_float4(sv.x + y.x, sv.y + y.y, sv.z + y.z, sv.w + y.w);
  }
  const long long token = caller_token(perm, key);
  *reinterpret_cast<uint2*>(dk + b * dk_sb + kv_head * dk_sh + token * dk_sn + c) =
      make_uint2(Dtype<T>::pack(sk.x, sk.y), Dtype<T>::pack(sk.z, sk.w));
  *reinterpret_cast<uint2*>(dv + b * dv_sb + kv_head * dv_sh + token * dv_sn + c) =
      make_uint2(Dtype<T>::pack(sv.x, sv.y), Dtype<T>::pack(sv.z, sv.w));
}

}  // namespace maskattn

#ifdef MASKATTN_INSTANTIATE
// Compiled alone (nvcc -c -DMASKATTN_INSTANTIATE): the kernels of the configuration the knobs above name, the dK/dV
// kernel, its conversion and the merge of split CTAs' dK and dV, for resource reports.
void* maskattn_bwd_sm90_instances[] = {
    reinterpret_cast<void*>(&maskattn::bwd_dkdv_sm90_kernel<maskattn::MASKATTN_DTYPE, MASKATTN_HEAD_DIM,
                                                            maskattn::MASKATTN_MASK, MASKATTN_PERM, MASKATTN_FIXED>),
    reinterpret_cast<void*>(
        &maskattn::bwd_dq_convert_sm90_kernel<maskattn::MASKATTN_DTYPE, MASKATTN_HEAD_DIM, MASKATTN_FIXED,
                                              maskattn::sm90_bwd::RUNS<MASKATTN_HEAD_DIM, maskattn::MASKATTN_MASK,
                                                                       MASKATTN_PERM, MASKATTN_FIXED>>),
    reinterpret_cast<void*>(&maskattn::bwd_dkdv_merge_sm90_kernel<maskattn::MASKATTN_DTYPE, MASKATTN_HEAD_DIM>),
};
#endif
