// The FA3 mainloop: a producer warp streams Q once and K/V blocks through a `stages`-deep mbarrier
// ring by TMA; each consumer warpgroup computes S = Q.K^T (wgmma, both operands in shared memory), masks,
// runs the online softmax, and accumulates O += P.V (wgmma with P from registers, or with p_in_smem from shared
// memory, V from shared memory).
// With paged_gather the producer warps copy K/V rows with cp.async instead (page sizes no TMA box fits).
// KV blocks are visited from the last to the first, so the masked blocks (seqlen_k tail, causal diagonal)
// come first and the steady state runs mask-free; a sliding window's left edge comes last, masked again (FA3
// paper §3; docs/kernel-design.md §6).
//
// Operand layouts (docs/kernel-design.md §2, verified on an H200):
//   Q, K: K-major, 128B swizzle, SBO = 1024; a k16 step inside a 64-column block adds 32 bytes to the
//         start address, the next 64-column block starts rows*128 bytes further.
//   V:    MN-major for P.V (head_dim contiguous), trans-b = 1; SBO = 1024 (8 kv rows), LBO = block_n*128
//         (next 64-column block of head_dim_v), a k16 step adds 16 rows = 2048 bytes.
//   P:    the fp32 S accumulator maps onto the 16-bit A-register fragment directly: for k-step g,
//         a0..a3 = pack(s[8g..8g+1]), pack(s[8g+2..8g+3]), pack(s[8g+4..8g+5]), pack(s[8g+6..8g+7]).
// e4m3 (FA3 paper §3.3): both GEMMs step over 32 keys/channels (k32) and take K-major operands only. Q and K are
// K-major already; the producer warpgroup transposes each V stage (device/transpose_v.cuh) into head_dim_v rows
// of keys, K-major, in column blocks of 128 keys (a k32 step adds 32 bytes; the next column block starts
// head_dim_v * 128 bytes further). With v_layout d_major V comes transposed and TMA writes it as one 32-byte
// swizzled box of head_dim_v rows x 32 keys per k32 step (load_v_d_major), which P.V reads with SBO = 256. P is packed from the S accumulator without moving data between lanes: per 32
// columns, a0..a3 = e4m3(s[16j+0,1,4,5]), (s[16j+2,3,6,7]), (s[16j+8,9,12,13]), (s[16j+10,11,14,15]), which
// relabels the keys inside every 16; the V transpose stores V's keys in the same order.
// Scales: softmax_step takes the block's scale in log2 units, c = softmax_scale * log2(e) [* q descale * k
// descale for e4m3], so per-(M tile, N block) descales cost one multiply per block (device/descale.cuh).
// Which element a register of S or O holds: hopper/fragment.cuh. What happens to a score block between the two
// GEMMs (key-block range, softcap, masks, sinks): variant.cuh, then softmax.cuh.
#pragma once

#include "hopper/cluster.cuh"
#include "hopper/cp_async.cuh"
#include "hopper/fragment.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/swizzle.cuh"
#include "hopper/tma.cuh"
#include "hopper/warpgroup.cuh"
#include "hopper/wgmma.cuh"
#include "kernels/attention_fwd/device/scheduler.cuh"
#include "kernels/attention_fwd/device/seqlen.cuh"
#include "kernels/attention_fwd/device/smem_layout.cuh"
#include "hopper/smem_matrix.cuh"
#include "kernels/attention_fwd/device/descale.cuh"
#include "kernels/attention_fwd/device/softmax.cuh"
#include "kernels/attention_fwd/device/transpose_v.cuh"
#include "kernels/attention_fwd/device/variant.cuh"

namespace fa3jit::attention_fwd {

template <class Cfg>
struct Mainloop {
  using Smem = SmemLayout<Cfg>;
  using Variant = AttentionVariant<Cfg>;
  using ScoreFrag = AccFragment<Cfg::kBlockN>;  // S and P: 64 x block_n per consumer warpgroup
  using OutFrag = AccFragment<Cfg::kHeadDimV>;  // O: 64 x head_dim_v per consumer warpgroup
  static constexpr bool kFp8 = Cfg::kElemBytes == 1;
  using Softmax = OnlineSoftmax<Cfg::kBlockN, kFp8 ? 8 : 0, Cfg::kLazyRescale>;
  // One wgmma k-step reads 32 bytes of K per row: k16 for 16-bit inputs, k32 for e4m3.
  // k-steps of S = Q.K^T; a head_dim that ends inside a step (a multiple of 8 that is not one of 16, of 16 for
  // e4m3 that is not one of 32) reads the zeros TMA wrote past the last column into the step's tail.
  static constexpr int kQkSteps = (Cfg::kHeadDim * Cfg::kElemBytes + 31) / 32;
  static constexpr int kPvSteps = Cfg::kBlockN * Cfg::kElemBytes / 32;   // k-steps of O += P.V
  static constexpr int kPRegs = Cfg::kBlockN * Cfg::kElemBytes / 8;      // 32-bit registers of P per thread
  // Registers that hold P from its softmax until its P.V has completed: none with p_in_smem, whose P waits in shared
  // memory (one register, never written: arrays have no size 0).
  static constexpr int kPHeld = Cfg::kPInSmem ? 1 : kPRegs;
  static constexpr int kRowBytes = kSwizzleRowBytes;                      // one swizzled row of a column block
  // Spec field l2_evict_hints: K and V boxes (read again by every row block of the head) evict_last, Q boxes (read
  // once) evict_first (hopper/tma.cuh: L2Hint; FlashAttention-3's hints).
  static constexpr L2Hint kKvHint = Cfg::kL2EvictHints ? L2Hint::kEvictLast : L2Hint::kNormal;
  static constexpr L2Hint kQHint = Cfg::kL2EvictHints ? L2Hint::kEvictFirst : L2Hint::kNormal;
  static constexpr int kVRows = transposed_v_rows(Cfg::kHeadDimV);        // e4m3: rows (channels) of a V stage
  static constexpr int kPvChunks = Cfg::kHeadDimV / Cfg::kPvChunkN;     // P.V passes (two-level accumulation)
  // The fresh accumulator of two-level accumulation (one register when unused: arrays have no size 0).
  static constexpr int kAccRegs = Cfg::kTwoLevelAccum ? Cfg::kPvChunkN / 2 : 1;
  // A stage is free once every consumer warp of every CTA that reads it has released it (one arrival per warp and
  // CTA, release()): with cluster_m = 2 the peer CTA's consumers release it too (its producer multicasts into our
  // stage).
  static constexpr uint32_t kConsumerWarps = 4 * Cfg::kConsumerWarpgroups;
  static constexpr uint32_t kEmptyArrivals = kConsumerWarps * Cfg::kClusterM;
  // Persistent grid: q_empty counts this CTA's consumer warps (release_q; Q is never multicast), o_empty the consumer
  // warpgroups of every CTA of the cluster (epilogue.cuh): the peer's producer multicasts the next tile's V into this
  // CTA's V stages, over which O is staged.
  static constexpr uint32_t kOEmptyArrivals = Cfg::kConsumerWarpgroups * Cfg::kClusterM;

  /// Initialises the barriers (one thread); the caller fences and synchronises the CTA afterwards.
  static __device__ __forceinline__ void init_barriers(const Smem& sm) {
    // A loaded stage is full after lane 0's arrive_expect_tx and the TMA bytes, or, with paged_gather, once each
    // thread of the gather warps has arrived after its own copies (GatherSignal).
    constexpr uint32_t kLoadArrivals = Cfg::kPagedGather ? 32 * kGatherWarps : 1;
    mbarrier_init(sm.q_full(), 1);
#pragma unroll
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbarrier_init(sm.k_full(s), kLoadArrivals);
      // e4m3 seq_major: a V stage is full once every thread of the producer warpgroup has transposed its part.
      mbarrier_init(sm.v_full(s), Smem::kTransposeV ? TransposeV<Cfg>::kThreads : kLoadArrivals);
      mbarrier_init(sm.k_empty(s), kEmptyArrivals);
      mbarrier_init(sm.v_empty(s), kEmptyArrivals);
      if constexpr (Smem::kTransposeV) {
        mbarrier_init(sm.v_load_full(s), kLoadArrivals);
        mbarrier_init(sm.v_load_empty(s), TransposeV<Cfg>::kThreads);
      }
    }
    if constexpr (!Smem::kTransposeV) mbarrier_init(sm.v_tail(), 1);  // lane 0's arrive_expect_tx + the TMA bytes
    if constexpr (Cfg::kPersistent) {
      mbarrier_init(sm.q_empty(), kConsumerWarps);   // lane 0 of every consumer warp (release_q)
      mbarrier_init(sm.o_empty(), kOEmptyArrivals);  // thread 0 of every consumer warpgroup (epilogue.cuh)
      for (int slot = 0; slot < 2; ++slot) {
        mbarrier_init(sm.tile_full(slot), 1);                                 // the producer's lane 0
        mbarrier_init(sm.tile_empty(slot), 128 * Cfg::kConsumerWarpgroups);  // every consumer thread
      }
    }
  }

  /// Loads K or V block n_block of the tile's sequence into a stage.
  ///  - dense / varlen_k: one box of block_n rows per 128-byte column block at row k_row0 + n_block * block_n.
  ///    With cluster_m = 2 each CTA loads half the rows and multicasts them to both CTAs, so every CTA's stage
  ///    still receives the full block and its full barrier the full byte count (FA3's 2x1 cluster; PTX ISA
  ///    cp.async.bulk.tensor .multicast::cluster).
  ///  - paged_kv: boxes of page_box_rows = gcd(page_size, block_n) rows, each inside one page: key j of the
  ///    sequence is row j % page_size of page page_table[batch][j / page_size]. A box row count that is a multiple
  ///    of 8 keeps every box on a 1024-byte swizzle atom. Page slots past max_pages and page indices outside
  ///    [0, num_pages) are clamped (the keys they hold past seqlen_k are masked anyway).
  /// paged_kv: the page of box `lane` of key block n_block (boxes of page_box_rows keys; lane < 32, and a block has
  /// at most block_n / 8 <= 32 boxes). Each lane of the producer warp looks up its own box's page, so a block's
  /// page-table reads are in flight together instead of one after the other; K and V share them.
  static __device__ __forceinline__ int box_page(int n_block, int lane, const TileWork& w, const Params& p) {
    if constexpr (Cfg::kPagedKv && !Cfg::kPagedGather) {
      const int key = n_block * Cfg::kBlockN + lane * p.page_box_rows;
      if (lane * p.page_box_rows >= Cfg::kBlockN) return 0;
      const int* pages = p.page_table + static_cast<int64_t>(w.tile.batch) * p.page_table_stride;
      const int slot = min(key / p.page_size, p.max_pages - 1);
      return clamp_int(pages[slot], 0, p.num_pages - 1);
    } else {
      return 0;
    }
  }

  /// Loads K or V block n_block of the tile's sequence into a stage; called by every lane of the producer warp,
  /// after lane 0 armed the full barrier.
  ///  - dense / varlen_k: lane 0 loads one box of block_n rows per 128-byte column block at row k_row0 + n_block *
  ///    block_n. With cluster_m = 2 each CTA loads half the rows and multicasts them to both CTAs, so every CTA's
  ///    stage still receives the full block and its full barrier the full byte count (FA3's 2x1 cluster; PTX ISA
  ///    cp.async.bulk.tensor .multicast::cluster).
  ///  - paged_kv: lane b loads box b, page_box_rows = gcd(page_size, block_n) rows inside one page (`page`, from
  ///    box_page): key j of the sequence is row j % page_size of page page_table[batch][j / page_size]. A box row
  ///    count that is a multiple of 8 keeps every box on a 1024-byte swizzle atom. Page slots past max_pages and
  ///    page indices outside [0, num_pages) are clamped (the keys they hold past seqlen_k are masked anyway).
  template <int kCols>
  static __device__ __forceinline__ void load_kv_block(uint32_t dst, const TmaDesc* desc, uint32_t bar, int n_block,
                                                       const TileWork& w, const Params& p, int lane, int page) {
    constexpr int kBlockCols = kRowBytes / Cfg::kElemBytes;
    constexpr int kColBlocks = (kCols + kBlockCols - 1) / kBlockCols;
    if constexpr (Cfg::kPagedKv) {
      const int r = lane * p.page_box_rows;
      if (r < Cfg::kBlockN) {
        const int key = n_block * Cfg::kBlockN + r;
        const int row = key - (key / p.page_size) * p.page_size;
#pragma unroll
        for (int j = 0; j < kColBlocks; ++j)
          tma_load_4d<kKvHint>(dst + j * Cfg::kBlockN * kRowBytes + r * kRowBytes, desc, bar, kBlockCols * j, row,
                      w.tile.kv_head, page);
      }
    } else if (lane == 0) {
      if constexpr (Cfg::kClusterM == 1) {
        load_tile<Cfg::kBlockN, kCols, kKvHint>(dst, desc, bar, w.seq.k_row0 + n_block * Cfg::kBlockN,
                                                w.tile.kv_head, w.seq.k_batch);
      } else {
        constexpr int kHalf = Cfg::kBlockN / 2;
        const int row = n_block * Cfg::kBlockN;
        const int rank = static_cast<int>(cluster_ctarank());
#pragma unroll
        for (int j = 0; j < kColBlocks; ++j)
          tma_load_4d_multicast<kKvHint>(dst + j * Cfg::kBlockN * kRowBytes + rank * kHalf * kRowBytes, desc, bar,
                                kBlockCols * j, row + rank * kHalf, w.tile.kv_head, w.tile.batch,
                                static_cast<uint16_t>(0x3));
      }
    }
  }

  /// Loads the tile's Q and arms q_full with its bytes. Without pack_gqa: block_m rows of one head (4-D map). With
  /// pack_gqa: a 5-D box {128 bytes, head_group, pack_rows} of the map {d, head_group, seqlen, num_heads_kv, batch}
  /// per column block, whose rows land in the order r = query * head_group + g (seqlen.cuh: RowMap); the rows past
  /// pack_rows * head_group are left as they are (never stored).
  static __device__ __forceinline__ void load_q(const Smem& sm, const TmaDesc* tm_q, const TileWork& w,
                                                const Params& p) {
    constexpr int kBlockCols = kRowBytes / Cfg::kElemBytes;
    constexpr int kColBlocks = (Cfg::kHeadDim + kBlockCols - 1) / kBlockCols;
    const int row = w.seq.q_row0 + w.q_first;
    if constexpr (Cfg::kPackGqa) {
      mbarrier_arrive_expect_tx(sm.q_full(), kColBlocks * kRowBytes * p.pack_rows * p.head_group);
#pragma unroll
      for (int j = 0; j < kColBlocks; ++j)
        tma_load_5d<kQHint>(sm.q() + j * Cfg::kBlockM * kRowBytes, tm_q, sm.q_full(), kBlockCols * j, 0, row,
                            w.tile.kv_head, w.seq.q_batch);
    } else {
      mbarrier_arrive_expect_tx(sm.q_full(), Smem::kQBytes);
      load_tile<Cfg::kBlockM, Cfg::kHeadDim, kQHint>(sm.q(), tm_q, sm.q_full(), row, w.tile.head, w.seq.q_batch);
    }
  }

  /// Releases a K or V stage: this warp's arrival on the empty barrier of every CTA that loads into it. Called by the
  /// whole warp, converged, once its wgmma reads of the stage have completed: lane r arrives on CTA r's barrier (the
  /// cluster's arrivals side by side); called under `if (lane == 0)` a peer CTA would never get its arrival.
  static __device__ __forceinline__ void release(uint32_t empty_bar) {
    const uint32_t lane = threadIdx.x % 32;
    if constexpr (Cfg::kClusterM == 1) {
      if (lane == 0) mbarrier_arrive(empty_bar);
    } else {
      if (lane < Cfg::kClusterM) mbarrier_arrive_cluster(empty_bar, lane);
    }
  }

  /// Loads a rows x kCols tile as boxes of {128 bytes, rows} into consecutive column blocks (the last one padded
  /// with zeros by TMA when kCols does not fill it: e4m3 head_dim 64).
  template <int kRows, int kCols, L2Hint kHint>
  static __device__ __forceinline__ void load_tile(uint32_t dst, const TmaDesc* desc, uint32_t bar, int row,
                                                   int head, int batch) {
    constexpr int kBlockCols = kRowBytes / Cfg::kElemBytes;
#pragma unroll
    for (int j = 0; j < (kCols + kBlockCols - 1) / kBlockCols; ++j)
      tma_load_4d<kHint>(dst + j * kRows * kRowBytes, desc, bar, kBlockCols * j, row, head, batch);
  }

  /// paged_gather: the threads that copy K/V rows, whole warps of the producer warpgroup: all four for 16-bit inputs
  /// (whose producer is otherwise one warp; one warp copies ~650 GB/s of pages of one key on an H200), warp 0 for
  /// e4m3 (whose four warps transpose V) and beside three consumer warpgroups (whose 32 producer registers spilled
  /// with four). Each arrives on a stage's full barrier once its copies are done (GatherSignal).
  static constexpr int kGatherWarps = kFp8 || Cfg::kConsumerWarpgroups == 3 ? 1 : 4;
  /// Lanes per copied row: 4 in the 16-bit decode kernels (one consumer warpgroup; each lane copies two 16-byte
  /// chunks of every 128-byte column block, so a row's page shuffle, address and carried slot serve twice the bytes),
  /// else 8: the prefill and e4m3 producers have no registers to spare (4 lanes spilled 8-40 bytes there, ptxas).
  static constexpr int kLanesPerRow =
      !kFp8 && Cfg::kConsumerWarpgroups == 1 && (Cfg::kBlockN / kGatherWarps) % 8 == 0 ? 4 : 8;
  static constexpr int kRowsPerWarpStep = 32 / kLanesPerRow;
  static constexpr int kGatherRowsPerStep = kRowsPerWarpStep * kGatherWarps;
  // Warp w copies rows kGatherRowsPerStep * i + kRowsPerWarpStep * w + k (k = lane / kLanesPerRow) of a block:
  // kBlockN / kGatherWarps rows, whose pages its lanes look up, 32 per register.
  static constexpr int kPageRegs = Cfg::kPagedGather ? (Cfg::kBlockN / kGatherWarps + 31) / 32 : 1;
  static_assert(!Cfg::kPagedGather || Cfg::kBlockN % kGatherRowsPerStep == 0, "whole gather steps per block");

  /// The pages of one key block, looked up once for K and V: with TMA boxes the page of the lane's own box
  /// (box_page); with paged_gather the page of the warp's own row number lane + 32 j (gather_row) in page[j], so that
  /// a block's page-table reads are in flight together, and gather_kv_block takes a row's page from its lane by a
  /// shuffle.
  struct BlockPages {
    int page[kPageRegs];
  };
  /// paged_gather: the block row of warp `warp`'s row number `n` (its rows in the order it copies them).
  static __device__ __forceinline__ int gather_row(int n, int warp) {
    return n / kRowsPerWarpStep * kGatherRowsPerStep + kRowsPerWarpStep * warp + n % kRowsPerWarpStep;
  }
  static __device__ __forceinline__ BlockPages block_pages(int n_block, int lane, const TileWork& w, const Params& p) {
    BlockPages b;
    if constexpr (Cfg::kPagedGather) {
      const int warp = kGatherWarps == 1 ? 0 : static_cast<int>(threadIdx.x % 128) / 32;
      const int* pages = p.page_table + static_cast<int64_t>(w.tile.batch) * p.page_table_stride;
#pragma unroll
      for (int j = 0; j < kPageRegs; ++j) {
        const int key = n_block * Cfg::kBlockN + gather_row(32 * j + lane, warp);
        // Keys at or past seqlen_k are never read (gather_kv_block writes zeros): no lookup for them; nor for row
        // numbers past the warp's kBlockN / kGatherWarps rows (their key is past the block, so possibly valid).
        b.page[j] = key < w.seq.seqlen_k && 32 * j + lane < Cfg::kBlockN / kGatherWarps
                        ? clamp_int(pages[min(key / p.page_size, p.max_pages - 1)], 0, p.num_pages - 1)
                        : 0;
      }
    } else {
      b.page[0] = box_page(n_block, lane, w, p);
    }
    return b;
  }

  /// paged_gather: the gather warps copy K or V block n_block row by row with cp.async, kLanesPerRow lanes per row
  /// (lane % kLanesPerRow + kLanesPerRow q are its 16-byte chunks in each 128-byte column block), kGatherRowsPerStep
  /// rows per step, into the layout TMA writes:
  /// column block c at dst + c * block_n * 128, row r at r * 128, chunk k at ((k ^ (r & 7)) << 4) (128-byte swizzle;
  /// hopper/swizzle.cuh), zeros past the row's kCols columns. Key j of the sequence is row j % page_size of page
  /// page_table[batch][j / page_size] (`pages`: block_pages, which clamps the slot to max_pages and the page into
  /// [0, num_pages) as box_page does); keys at or past seqlen_k are zeros that read nothing, so no copy leaves the
  /// tensor. `base` points at the tensor's first byte; the strides are bytes (Params).
  template <int kCols>
  static __device__ __forceinline__ void gather_kv_block(uint32_t dst, const char* base, long long stride_page,
                                                         long long stride_row, long long head_offset, int n_block,
                                                         const BlockPages& pages, const TileWork& w, const Params& p,
                                                         int lane) {
    constexpr int kRowBytesUsed = kCols * Cfg::kElemBytes;
    constexpr int kColBlocks = (kRowBytesUsed + kRowBytes - 1) / kRowBytes;
    constexpr int kChunksPerLane = 8 / kLanesPerRow;  // of each column block
    const int chunk = lane % kLanesPerRow;
    const int warp = kGatherWarps == 1 ? 0 : static_cast<int>(threadIdx.x % 128) / 32;
    // A lane's rows are gather_row(n, warp) for n = lane / kLanesPerRow + kRowsPerWarpStep m, m = 0, 1, ... (over j
    // and i): key first_key + kGatherRowsPerStep m. In the decode kernels its row in the page (key % page_size) is
    // therefore carried from row to row by adding kGatherRowsPerStep % page_size and subtracting page_size on
    // overflow: two divisions per call instead of one per row (a runtime division is ~20 instructions; unsigned:
    // slot + step < 2 page_size). The prefill producers (32 or 40 registers) divide per row: the carried values
    // spilled 4-20 bytes there (ptxas).
    constexpr bool kCarrySlot = Cfg::kConsumerWarpgroups == 1;
    const uint32_t page_size = static_cast<uint32_t>(p.page_size);
    const uint32_t step = kCarrySlot ? static_cast<uint32_t>(kGatherRowsPerStep) % page_size : 0u;
    uint32_t slot =
        kCarrySlot ? static_cast<uint32_t>(n_block * Cfg::kBlockN + gather_row(lane / kLanesPerRow, warp)) % page_size
                   : 0u;
#pragma unroll
    for (int j = 0; j < kPageRegs; ++j) {
#pragma unroll 1
      for (int i = 0; i < 32 / kRowsPerWarpStep; ++i) {
        // The warp's row number: its page is in lane n % 32, register j.
        const int n = 32 * j + kRowsPerWarpStep * i + lane / kLanesPerRow;
        // The same for every lane, and once true true for every later row: the carried slot stays in step.
        if (32 * j + kRowsPerWarpStep * i >= Cfg::kBlockN / kGatherWarps) break;
        // In [0, num_pages) (block_pages): unsigned, so its 64-bit product needs no sign extension.
        const uint32_t page = static_cast<uint32_t>(__shfl_sync(0xffffffffu, pages.page[j], n % 32));
        const int r = gather_row(n, warp);
        const int key = n_block * Cfg::kBlockN + r;
        const bool valid = key < w.seq.seqlen_k;
        if constexpr (!kCarrySlot) slot = static_cast<uint32_t>(key) % page_size;
        const char* row = valid ? base + static_cast<long long>(page) * stride_page +
                                      static_cast<long long>(slot) * stride_row + head_offset
                                : base;
        if constexpr (kCarrySlot) {
          slot += step;
          if (slot >= page_size) slot -= page_size;
        }
#pragma unroll
        for (int q = 0; q < kChunksPerLane; ++q) {
          const int k = chunk + kLanesPerRow * q;
          const uint32_t row_dst = dst + r * kRowBytes + ((k ^ (r & 7)) << 4);
#pragma unroll
          for (int c = 0; c < kColBlocks; ++c) {
            const int byte = c * kRowBytes + k * 16;
            const bool copy = valid && byte < kRowBytesUsed;
            cp_async_16(row_dst + c * Cfg::kBlockN * kRowBytes, copy ? row + byte : base, copy ? 16u : 0u);
          }
        }
      }
    }
  }

  /// paged_gather: signals a stage full once this lane's copies into it are complete, one group late, so that the
  /// copies of two stages are in flight: issued() closes the group just issued and signals the one before it
  /// (cp.async.wait_group 1), flush() signals the last. Each signal is the writing lane's proxy fence (wgmma reads
  /// through the async proxy what cp.async wrote through the generic one) and its arrival (32 x kGatherWarps per stage).
  struct GatherSignal {
    uint32_t pending = 0;
    bool any = false;
    __device__ __forceinline__ void issued(uint32_t full_bar) {
      cp_async_commit_group();
      if (any) {
        cp_async_wait_group<1>();
        fence_proxy_async_smem();
        mbarrier_arrive(pending);
      }
      pending = full_bar;
      any = true;
    }
    __device__ __forceinline__ void flush() {
      if (any) {
        cp_async_wait_group<0>();
        fence_proxy_async_smem();
        mbarrier_arrive(pending);
        any = false;
      }
    }
  };

  /// v_layout d_major: V block n_block, given transposed (launch.h: ForwardArgs::v), straight into the K-major V
  /// stage: box g of {32 keys, kVRows channels} (32-byte swizzle; params.h kVStageDMajor) holds the keys of P.V's
  /// k-step g, in the order convert_p packs them (the layout's order). Channels past head_dim_v and keys past the
  /// tensor's padded seqlen_k are TMA's zero fill. Lane 0 of the producer warp issues them.
  static __device__ __forceinline__ void load_v_d_major(uint32_t dst, uint32_t bar, int n_block, const TileWork& w,
                                                        const Params& p) {
#pragma unroll
    for (int g = 0; g < Cfg::kBlockN / kDMajorBoxKeys; ++g)
      tma_load_4d<kKvHint>(dst + g * kVRows * kDMajorBoxKeys, &p.tm_v, bar,
                  w.seq.k_row0 + n_block * Cfg::kBlockN + g * kDMajorBoxKeys, 0, w.tile.kv_head, w.seq.k_batch);
  }

  /// K or V block n_block into a stage by the producer warp: TMA boxes (after lane 0 armed `bar` with the bytes)
  /// or, with paged_gather, cp.async rows signalled through `signal`.
  template <int kCols>
  static __device__ __forceinline__ void load_block(uint32_t dst, bool is_k, uint32_t bar, int n_block,
                                                    const TileWork& w, const Params& p, int lane,
                                                    const BlockPages& pages, GatherSignal& signal) {
    if constexpr (Smem::kVDMajor) {
      if (!is_k) {
        if (lane == 0) load_v_d_major(dst, bar, n_block, w, p);
        return;
      }
    }
    if constexpr (Cfg::kPagedGather) {
      if (is_k) {
        gather_kv_block<kCols>(dst, p.k_data, p.k_stride_page, p.k_stride_row, w.tile.kv_head * p.k_stride_head,
                               n_block, pages, w, p, lane);
      } else {
        gather_kv_block<kCols>(dst, p.v_data, p.v_stride_page, p.v_stride_row, w.tile.kv_head * p.v_stride_head,
                               n_block, pages, w, p, lane);
      }
      signal.issued(bar);
    } else {
      load_kv_block<kCols>(dst, is_k ? &p.tm_k : &p.tm_v, bar, n_block, w, p, lane, pages.page[0]);
    }
  }

  /// Keys of the sequence in the tile's first visited key block (n_block_max - 1) when the rest of that block lies
  /// inside the K/V tensors and so holds whatever is there: another sequence's keys, or cache slots nobody wrote
  /// (NaN from torch.empty) with packed or paged K/V or a seqused_k shorter than the tensor. Their scores are masked
  /// to -inf, so P is 0 there, but 0 x NaN in P.V is NaN: V's rows past seqlen_k are zeroed before P.V reads them
  /// (load_v_zeroing_tail; e4m3 with its V transpose: TransposeV's key mask). K's need nothing: the mask selects
  /// -inf whatever the score. block_n where nothing is to be zeroed: a full block, TMA's zero fill past a dense
  /// tensor's seqlen_k, the gather copies' own zeros; v_layout d_major takes no seqused_k and no packed or paged
  /// K/V (launch.cpp). With cluster_m 2 (dense, non-causal) both CTAs of a cluster see the same sequence and key
  /// range, so both take load_v_zeroing_tail for the same block and each other's multicast halves complete v_tail.
  static __device__ __forceinline__ int first_block_keys(const TileWork& w, const Params& p) {
    if constexpr (Cfg::kPagedGather || Smem::kVDMajor) {
      return Cfg::kBlockN;
    } else {
      if (!Cfg::kVarlenK && !Cfg::kPagedKv && p.seqused_k == nullptr) return Cfg::kBlockN;
      return min(Cfg::kBlockN, w.seq.seqlen_k - (w.range.n_block_max - 1) * Cfg::kBlockN);
    }
  }

  /// Zeroes rows [rows, block_n) of the 16-bit V stage at `dst` (column blocks of block_n rows x 128 bytes: whole
  /// 128-byte lines, so the swizzle inside a line does not matter), 16 bytes per lane and step.
  static __device__ __forceinline__ void zero_v_rows(uint32_t dst, int rows, int lane) {
    constexpr int kColBlocks = (Cfg::kHeadDimV * Cfg::kElemBytes + kRowBytes - 1) / kRowBytes;
    constexpr uint32_t kColBlockBytes = Cfg::kBlockN * kRowBytes;
#pragma unroll 1
    for (uint32_t at = dst + static_cast<uint32_t>(rows * kRowBytes + 16 * lane); at < dst + kColBlockBytes;
         at += 32 * 16) {
#pragma unroll
      for (int j = 0; j < kColBlocks; ++j) st_shared_zero_16(at + j * kColBlockBytes);
    }
  }

  /// V block n_block, of which only the first `keys` rows are the sequence's (first_block_keys): its TMA loads
  /// complete v_tail instead of the stage's v_full; the producer warp waits for them, zeroes the other rows, makes
  /// its stores visible to wgmma (fence.proxy.async by every writing lane; __syncwarp orders them before lane 0's
  /// arrive, bar.warp.sync's memory ordering) and then completes v_full with an arrival and no bytes. The wait costs
  /// the producer one load latency at the tile's first V block, which the consumers wait for anyway. The producer
  /// alone waits on v_tail, every phase before the next starts, so the phase to wait for is read from the barrier
  /// (mbarrier_current_parity) rather than carried in a register (the producer has 24).
  static __device__ __forceinline__ void load_v_zeroing_tail(const Smem& sm, const PipelineState<Cfg::kStages>& at,
                                                             int n_block, int keys, const TileWork& w,
                                                             const Params& p, int lane, const BlockPages& pages,
                                                             GatherSignal& signal) {
    const uint32_t parity = mbarrier_current_parity(sm.v_tail());
    if (lane == 0) {
      mbarrier_wait(sm.v_empty(at.stage), at.phase ^ 1u);
      mbarrier_arrive_expect_tx(sm.v_tail(), Smem::kVStageBytes);
    }
    __syncwarp();
    load_block<Cfg::kHeadDimV>(sm.v(at.stage), false, sm.v_tail(), n_block, w, p, lane, pages, signal);
    mbarrier_wait(sm.v_tail(), parity);
    zero_v_rows(sm.v(at.stage), keys, lane);
    fence_proxy_async_smem();
    __syncwarp();
    if (lane == 0) mbarrier_arrive(sm.v_full(at.stage));
  }

  /// Lane 0's wait for a free stage (of each gather warp with paged_gather), and with TMA its arming of the full
  /// barrier with the stage's bytes.
  static __device__ __forceinline__ void acquire_stage(uint32_t empty_bar, uint32_t phase, uint32_t full_bar,
                                                       uint32_t bytes, int lane) {
    if (lane == 0) {
      mbarrier_wait(empty_bar, phase ^ 1u);
      if constexpr (!Cfg::kPagedGather) mbarrier_arrive_expect_tx(full_bar, bytes);
    }
    __syncwarp();
  }

  /// Producer: one warp (lane 0 waits, arms the barriers and issues the loads; with paged_kv every lane loads the
  /// boxes of its own page), or with paged_gather the kGatherWarps warps of the producer warpgroup, every lane of
  /// which copies rows. Q once, then K and V of every visited block, last block first, into the ring at `pipe`:
  /// K_j then V_j, or with kLoadKAhead (FA3's load order under intra-warpgroup overlap) K_{j-1} before V_j, so the
  /// K block a Q.K^T waits for is not queued behind a V stage, which the consumers free only once their P.V has
  /// completed. Step j of the overlapped schedule reads K_j and V_{j+1}: that is the order it needs them in.
  /// `loaded`: the tiles with key blocks this CTA ran before (persistent grid; 0 otherwise). After the first, the
  /// tile's Q waits for q_empty after its first K block, which loads under the previous tile's end, and its first V
  /// waits for o_empty (the previous tile's O staged over the V stages).
  static __device__ __forceinline__ void produce(const Smem& sm, const Params& p, const TileWork& w,
                                                 PipelineState<Cfg::kStages>& pipe, int loaded) {
    if (w.range.empty()) return;
    const int lane = threadIdx.x % 32;
    if (loaded == 0 && threadIdx.x % 128 == 0) load_q(sm, &p.tm_q, w, p);
    GatherSignal gathered;
    const int n_first = w.range.n_block_max - 1;
    auto load_k = [&](int n_block, const PipelineState<Cfg::kStages>& at, const BlockPages& page) {
      acquire_stage(sm.k_empty(at.stage), at.phase, sm.k_full(at.stage), Smem::kKStageBytes, lane);
      load_block<Cfg::kHeadDim>(sm.k(at.stage), true, sm.k_full(at.stage), n_block, w, p, lane, page, gathered);
      if constexpr (Cfg::kPersistent) {
        if (loaded > 0 && n_block == n_first) {
          if (lane == 0) {
            mbarrier_wait(sm.q_empty(), static_cast<uint32_t>(loaded - 1) & 1u);
            load_q(sm, &p.tm_q, w, p);
          }
          __syncwarp();
        }
      }
    };
    // keys: first_block_keys for the tile's first block, else block_n (the zeroing compiled out).
    auto load_v = [&](int n_block, const PipelineState<Cfg::kStages>& at, const BlockPages& page, int keys) {
      if constexpr (Cfg::kPersistent) {
        if (loaded > 0 && n_block == n_first) {
          if (lane == 0) mbarrier_wait(sm.o_empty(), static_cast<uint32_t>(loaded - 1) & 1u);
          __syncwarp();
        }
      }
      if (keys < Cfg::kBlockN) {
        load_v_zeroing_tail(sm, at, n_block, keys, w, p, lane, page, gathered);
        return;
      }
      acquire_stage(sm.v_empty(at.stage), at.phase, sm.v_full(at.stage), Smem::kVStageBytes, lane);
      load_block<Cfg::kHeadDimV>(sm.v(at.stage), false, sm.v_full(at.stage), n_block, w, p, lane, page, gathered);
    };
    // Where the tile's first block may need V rows zeroed, it is peeled off the loops: the zeroing's registers fit
    // the producer's 24 outside the loop only (inside, ptxas spilled the persistent tile counter). The gather kernels
    // (their copies write zeros) keep the loops whole: peeled, their 32-register producers spilled.
    constexpr bool kPeelFirst = !Cfg::kPagedGather && !Smem::kVDMajor;
    int n_block = n_first;
    if constexpr (Cfg::kLoadKAhead) {
      // The next block's stage is derived and its pages looked up again for V (an L1 hit) rather than carried: the
      // producer runs in 24 registers.
      auto load_k_next = [&](int n) {
        if (n > w.range.n_block_min) {
          PipelineState<Cfg::kStages> k_at = pipe;
          k_at.advance();
          load_k(n - 1, k_at, block_pages(n - 1, lane, w, p));
        }
      };
      load_k(n_first, pipe, block_pages(n_first, lane, w, p));
      if constexpr (kPeelFirst) {
        load_k_next(n_first);
        load_v(n_first, pipe, block_pages(n_first, lane, w, p), first_block_keys(w, p));
        pipe.advance();
        --n_block;
      }
      for (; n_block >= w.range.n_block_min; --n_block) {
        load_k_next(n_block);
        load_v(n_block, pipe, block_pages(n_block, lane, w, p), Cfg::kBlockN);
        pipe.advance();
      }
    } else {
      auto load_kv = [&](int n, int keys) {
        const BlockPages page = block_pages(n, lane, w, p);
        load_k(n, pipe, page);
        load_v(n, pipe, page, keys);
        pipe.advance();
      };
      if constexpr (kPeelFirst) {
        load_kv(n_first, first_block_keys(w, p));
        --n_block;
      }
      for (; n_block >= w.range.n_block_min; --n_block) load_kv(n_block, Cfg::kBlockN);
    }
    gathered.flush();
  }

  /// e4m3 producer: the whole warpgroup. Thread 0 streams Q once and K and V (into the V load stages) of every
  /// visited block, last block first; all four warps transpose each V load stage into a V stage one block behind
  /// the loads (device/transpose_v.cuh), so a block's transpose overlaps the next block's TMA.
  static __device__ __forceinline__ void produce_transposing(const Smem& sm, const Params& p, const TileWork& w) {
    if (w.range.empty()) return;
    const int tid = threadIdx.x % 128;
    const int warp = tid / 32, lane = tid % 32;
    if (tid == 0) load_q(sm, &p.tm_q, w, p);
    int transpose_keys = first_block_keys(w, p);  // of the first block transposed, then block_n
    PipelineState<Cfg::kStages> load_pipe, transpose_pipe;
    GatherSignal gathered;  // paged_gather: warp 0's copies
    for (int n_block = w.range.n_block_max - 1; n_block >= w.range.n_block_min; --n_block) {
      if (warp == 0) {  // warp 0 loads (produce() says how); all four warps transpose
        const BlockPages page = block_pages(n_block, lane, w, p);
        acquire_stage(sm.k_empty(load_pipe.stage), load_pipe.phase, sm.k_full(load_pipe.stage), Smem::kKStageBytes,
                      lane);
        load_block<Cfg::kHeadDim>(sm.k(load_pipe.stage), true, sm.k_full(load_pipe.stage), n_block, w, p, lane, page,
                                  gathered);
        acquire_stage(sm.v_load_empty(load_pipe.stage), load_pipe.phase, sm.v_load_full(load_pipe.stage),
                      Smem::kVLoadStageBytes, lane);
        load_block<Cfg::kHeadDimV>(sm.v_load(load_pipe.stage), false, sm.v_load_full(load_pipe.stage), n_block, w,
                                   p, lane, page, gathered);
      }
      __syncwarp();
      if (n_block != w.range.n_block_max - 1) {
        transpose_stage(sm, transpose_pipe, warp, lane, transpose_keys);
        transpose_keys = Cfg::kBlockN;
        transpose_pipe.advance();
      }
      load_pipe.advance();
    }
    if (warp == 0) gathered.flush();
    transpose_stage(sm, transpose_pipe, warp, lane, transpose_keys);
  }

  /// Transposes the V load stage of `pipe` into its V stage: waits for the load and for the consumers to have
  /// released the V stage, rewrites it (the keys from `keys` on as zeros: first_block_keys), makes the generic-proxy
  /// stores visible to wgmma (async proxy), and arrives on the V stage's full barrier and the load stage's empty
  /// barrier. Every thread arrives (as FA3's V transpose
  /// pipeline does: 128 producer arrivals): an arrive releases the arriving thread's own prior accesses (PTX ISA,
  /// mbarrier.arrive: .release semantics), and every lane has executed the warp's collective ldmatrix and stmatrix
  /// before its own arrive, so whichever lane an access is counted against, its release covers it; no warp barrier
  /// is needed. (With lane 0 alone after a __syncwarp, which ptxas compiles to no instruction in a converged warp,
  /// compute-sanitizer racecheck saw no ordering between the other lanes' ldmatrix reads of the V load stage and the
  /// epilogue's O stores over it: bench/results/2026-12-02-racecheck-pingpong-off.log.)
  static __device__ __forceinline__ void transpose_stage(const Smem& sm, PipelineState<Cfg::kStages> pipe, int warp,
                                                         int lane, int keys) {
    mbarrier_wait(sm.v_load_full(pipe.stage), pipe.phase);
    mbarrier_wait(sm.v_empty(pipe.stage), pipe.phase ^ 1u);
    TransposeV<Cfg>::run(sm.v_load(pipe.stage), sm.v(pipe.stage), warp, lane, keys);
    fence_proxy_async_smem();
    mbarrier_arrive(sm.v_full(pipe.stage));
    mbarrier_arrive(sm.v_load_empty(pipe.stage));
  }

  /// Byte offset of k-step kk (32 bytes of every row) in a K-major, 128-byte-swizzled operand of `rows` rows: Q, K and
  /// P (p_in_smem). Four k-steps cover a 128-byte column block; the next column block starts rows * 128 bytes further.
  static __device__ __forceinline__ constexpr uint32_t kstep_offset(int kk, int rows) {
    return (kk / 4) * rows * kRowBytes + (kk % 4) * 32;
  }

  /// S = Q.K^T for this warpgroup's 64 rows and K stage `stage` (issued, committed, not waited).
  static __device__ __forceinline__ void issue_qk(float (&s)[ScoreFrag::kRegs], uint32_t q_rows, const Smem& sm,
                                                  int stage) {
    // The descriptors are stage 0's (loop-invariant) moved to the stage (one multiply-add) and by a constant per k-step
    // (one add each).
    const uint64_t q0 = make_smem_desc_sw128(q_rows, 16, 1024);
    const uint64_t k0 = desc_advance_16(make_smem_desc_sw128(sm.k(0), 16, 1024), stage * (Smem::kKStageBytes / 16));
#pragma unroll
    for (int kk = 0; kk < kQkSteps; ++kk)
      wgmma_qk(s, desc_advance(q0, kstep_offset(kk, Cfg::kBlockM)), desc_advance(k0, kstep_offset(kk, Cfg::kBlockN)),
               kk > 0 ? 1 : 0);
    wgmma_commit();
  }

  /// acc (+)= P.V for columns [chunk * kPvChunkN, +kPvChunkN) of V stage `stage` (issued, committed, not waited).
  /// kFresh: the first k-step overwrites acc (two-level accumulation's fresh accumulator). P: the registers p, or
  /// with p_in_smem consumer warpgroup wg's P tile (stage_p).
  template <bool kFresh, int kN>
  static __device__ __forceinline__ void issue_pv(float (&acc)[kN], const uint32_t (&p)[kPHeld], const Smem& sm,
                                                  int wg, int stage, int chunk = 0) {
    // Stage 0's descriptor (loop-invariant) moved to the stage (one multiply-add) and by a constant per k-step.
    const uint32_t v_tile = sm.v(0);
    uint64_t v0;
    if constexpr (Smem::kVDMajor) {
      v0 = make_smem_desc_sw32(v_tile, 16, 8 * kDMajorBoxKeys);
    } else if constexpr (kFp8) {
      v0 = make_smem_desc_sw128(v_tile, 16, 1024);
    } else {
      v0 = make_smem_desc_sw128(v_tile, Cfg::kBlockN * kRowBytes, 1024);
    }
    v0 = desc_advance_16(v0, stage * (Smem::kVStageBytes / 16));
#pragma unroll
    for (int g = 0; g < kPvSteps; ++g) {
      uint32_t offset;
      if constexpr (Smem::kVDMajor) {
        // V stage: one 32-byte swizzled box of kVRows rows x 32 keys per k-step; this chunk's rows start
        // chunk * kPvChunkN in (a multiple of 8 rows: on a 256-byte atom).
        offset = g * kVRows * kDMajorBoxKeys + chunk * Cfg::kPvChunkN * kDMajorBoxKeys;
      } else if constexpr (kFp8) {
        // V stage: head_dim_v rows of 128 keys per column block; rows of this chunk start chunk * kPvChunkN in.
        offset = (g / 4) * kVRows * kRowBytes + (g % 4) * 32 + chunk * Cfg::kPvChunkN * kRowBytes;
      } else {
        offset = g * 16 * kRowBytes;
      }
      if constexpr (Cfg::kPInSmem) {
        const uint64_t p0 = make_smem_desc_sw128(sm.p(wg), 16, 1024);
        wgmma_pv(acc, desc_advance(p0, kstep_offset(g, 64)), desc_advance(v0, offset), kFresh && g == 0 ? 0 : 1);
      } else {
        wgmma_pv(acc, p[4 * g], p[4 * g + 1], p[4 * g + 2], p[4 * g + 3], desc_advance(v0, offset),
                 kFresh && g == 0 ? 0 : 1);
      }
    }
    wgmma_commit();
  }

  /// Converts probabilities (S accumulator layout) into the A fragments of P.V: 16-bit pairs, or e4m3 quads
  /// relabelled as the V transpose expects (see the top of this file).
  static __device__ __forceinline__ void convert_p(const float (&s)[ScoreFrag::kRegs], uint32_t (&p)[kPRegs]) {
    if constexpr (kFp8) {
#pragma unroll
      for (int j = 0; j < Cfg::kBlockN / 32; ++j) {
        const float* x = s + 16 * j;
        p[4 * j + 0] = pack_e4m3x4(x[0], x[1], x[4], x[5]);
        p[4 * j + 1] = pack_e4m3x4(x[2], x[3], x[6], x[7]);
        p[4 * j + 2] = pack_e4m3x4(x[8], x[9], x[12], x[13]);
        p[4 * j + 3] = pack_e4m3x4(x[10], x[11], x[14], x[15]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kPRegs; ++i) p[i] = pack_half2<Cfg::kIsBf16>(s[2 * i], s[2 * i + 1]);
    }
  }

  /// p_in_smem: P (S accumulator layout) packed to 16 bits into consumer warpgroup wg's P tile, the A operand of
  /// P.V: 64 rows x block_n keys, K-major in column blocks of 64 rows x 128 bytes with the 128-byte swizzle (16-byte
  /// chunk c of row r at chunk c ^ (r % 8): the layout TMA gives Q). One stmatrix.x4 per k16 step: the thread's four
  /// registers of the step are the 8x8 matrices (row half, column half) = (0, 0), (1, 0), (0, 1), (1, 1), whose rows
  /// lanes 8i..8i+7 address (hopper/fragment.cuh, hopper/smem_matrix.cuh). Each warp writes the 16 rows whose
  /// products it accumulates and reads in P.V, so the fence for the async proxy and a __syncwarp order the writes
  /// before the warp's P.V (FA3 likewise); the caller has waited for the P.V that read the tile before.
  static __device__ __forceinline__ void stage_p(const float (&s)[ScoreFrag::kRegs], const Smem& sm, int wg) {
    const int lane = threadIdx.x % 32;
    const int row = ((threadIdx.x / 32) % 4) * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
    const uint32_t row_addr = sm.p(wg) + row * kRowBytes;
#pragma unroll
    for (int g = 0; g < kPvSteps; ++g) {
      // The 16-byte chunk of k-step g's column half (lane / 16) in the row, swizzled: kstep_offset's layout.
      const uint32_t step = kstep_offset(g, 64), chunk = (step % kRowBytes) / 16 + lane / 16;
      const float* x = s + 8 * g;
      stmatrix_x4(row_addr + (step - step % kRowBytes) + ((chunk ^ (row % 8)) << 4),
                  pack_half2<Cfg::kIsBf16>(x[0], x[1]), pack_half2<Cfg::kIsBf16>(x[2], x[3]),
                  pack_half2<Cfg::kIsBf16>(x[4], x[5]), pack_half2<Cfg::kIsBf16>(x[6], x[7]));
    }
    fence_proxy_async_smem();
    __syncwarp();
  }

  /// Spec field pin_pv_wait (spec.h), in the overlapped step: keeps the wait for P_{j-1}.V_{j-1}
  /// (wgmma.wait_group 0) behind the softmax of S_j, where the schedule puts it. Without it ptxas moves that wait up
  /// to the Q.K^T wait, above the exp2 (it moves a wait above arithmetic), so the softmax waits for P.V instead of
  /// running under it; it does not move a wait above a shared-memory store that precedes it (cuobjdump, nvcc 13.0).
  /// This is such a store: thread 0 of the warpgroup writes its second row sum, which depends on the block's exp2
  /// (ptxas interleaves the two row halves), into the warpgroup's own word, which nothing reads.
  static __device__ __forceinline__ void pin_pv_wait(const Smem& sm, const Softmax& softmax, int wg) {
    if (threadIdx.x % 128 == 0) st_shared_u32(sm.pin_word(wg), __float_as_uint(softmax.row_sum[1]));
  }

  /// P of a softmaxed score block to where its P.V reads it: the registers p, or consumer warpgroup wg's P tile.
  static __device__ __forceinline__ void pack_p(const float (&s)[ScoreFrag::kRegs], uint32_t (&p)[kPHeld],
                                                const Smem& sm, int wg) {
    if constexpr (Cfg::kPInSmem) {
      stage_p(s, sm, wg);
    } else {
      convert_p(s, p);
    }
  }

  /// Keeps the compiler from moving P's registers across the wgmma issue and wait that read them (none to keep with
  /// p_in_smem).
  static __device__ __forceinline__ void fence_p(uint32_t (&p)[kPHeld]) {
    if constexpr (!Cfg::kPInSmem) fence_operands(p);
  }

  /// Two-level accumulation: o[chunk] = (o[chunk] + acc) * o_scale, row half by row half (o_scale 1: a plain add).
  static __device__ __forceinline__ void add_chunk(float (&o)[OutFrag::kRegs], const float (&acc)[kAccRegs],
                                                   int chunk, const float (&o_scale)[2]) {
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) {
      const int r = chunk * kAccRegs + i;
      o[r] = (o[r] + acc[i]) * o_scale[OutFrag::row_half(r)];
    }
  }

  /// One score block through the variant and the online softmax: transform, mask, exponentiate. kMaybeMasked:
  /// the block may need the mask (checked at run time against w.first_masked); false for the blocks of the
  /// mask-free loop, whose code then holds no mask instruction at all. query[h]: the query index of the thread's
  /// row half h (seqlen.cuh: RowMap). o_scale receives the factor for the rows of O.
  /// kSoftmaxInMaskArms (spec field softmax_in_mask_arms, the overlapped step only): the softmax is emitted in both
  /// arms of the mask branch instead of after their join. ptxas schedules the caller's following wgmma.wait_group 0
  /// from the top of the basic block it falls in: after a join right behind the mask that is before the row maximum,
  /// and the softmax then waits for P.V instead of running under it (bench/NOTES.md, 2026-12-07).
  template <bool kMaybeMasked, bool kSoftmaxInMaskArms = false>
  static __device__ __forceinline__ void softmax_step(float (&s)[ScoreFrag::kRegs], int n_block, const TileWork& w,
                                                      const int (&query)[2], const Descale<Cfg>& descale,
                                                      Softmax& softmax, float (&o_scale)[2]) {
    const float c = descale.block_scale_log2(n_block);
    const float scale_log2 = Variant::softmax_scale_log2(w.softcap_log2, c);
    Variant::transform_scores(s, Variant::softcap_factor(w.inv_softcap_log2, c));
    if constexpr (kMaybeMasked && kSoftmaxInMaskArms) {
      if (Variant::needs_mask(n_block, w.first_masked, w.unmasked_min)) {
        Variant::apply_mask(s, n_block, query, w.seq.seqlen_q, w.seq.seqlen_k, w.window);
        softmax.update(s, scale_log2, o_scale);
      } else {
        softmax.update(s, scale_log2, o_scale);
      }
    } else {
      if constexpr (kMaybeMasked) {
        if (Variant::needs_mask(n_block, w.first_masked, w.unmasked_min))
          Variant::apply_mask(s, n_block, query, w.seq.seqlen_q, w.seq.seqlen_k, w.window);
      }
      softmax.update(s, scale_log2, o_scale);
    }
  }

  /// O *= o_scale, row half by row half. kLazyRescale (softmax.cuh): skipped, by the whole warp, when no row of it
  /// moved its reference maximum (every factor is then exactly 1); a warp-uniform branch, so the multiplies are not
  /// issued at all.
  static __device__ __forceinline__ void rescale_o(float (&o)[OutFrag::kRegs], const float (&o_scale)[2]) {
    if constexpr (Cfg::kLazyRescale) {
      if (!__any_sync(0xffffffffu, o_scale[0] != 1.f || o_scale[1] != 1.f)) return;
    }
#pragma unroll
    for (int i = 0; i < OutFrag::kRegs; ++i) o[i] *= o_scale[OutFrag::row_half(i)];
  }

  /// Pingpong between the consumer warpgroups (FA3 §3.1 "inter-warpgroup overlapping"): a warpgroup waits
  /// for its turn before issuing GEMMs and hands the turn to the next one (round robin) after issuing them,
  /// so one warpgroup's softmax runs under the others' GEMMs. Barrier (base + wg) collects the waiting
  /// warpgroup and the one handing over: 256 threads.
  static __device__ __forceinline__ void gemm_turn_begin(int wg) {
    if constexpr (Cfg::kPingpong) named_barrier_sync(kBarrierSchedulerBase + wg, 256);
  }
  static __device__ __forceinline__ void gemm_turn_end(int wg) {
    if constexpr (Cfg::kPingpong) {
      const int next = wg + 1 == Cfg::kConsumerWarpgroups ? 0 : wg + 1;
      named_barrier_arrive(kBarrierSchedulerBase + next, 256);
    }
  }

  /// Consumer warpgroup `wg` (0-based): runs the whole KV loop for its 64 rows; O and the softmax state
  /// stay in registers for the epilogue.
  /// `pipe`: where the K/V ring stands (it runs on across a persistent CTA's tiles); `loaded`: the tiles with key
  /// blocks this CTA ran before (the phase of q_full; 0 on a grid of one tile per CTA).
  static __device__ __forceinline__ void consume(const Smem& sm, int wg, const TileWork& w, const Params& params,
                                                 const Descale<Cfg>& descale, float (&o)[OutFrag::kRegs],
                                                 Softmax& softmax, PipelineState<Cfg::kStages>& pipe, int loaded) {
    if (w.range.empty()) return;
    const RowMap<Cfg> rows = RowMap<Cfg>::make(params, w.tile);
    const int r0 = ScoreFrag::row_base(wg * 64);  // tile row of the thread's row half 0
    const int query[2] = {rows.query(ScoreFrag::row(0, r0)), rows.query(ScoreFrag::row(1, r0))};
    const uint32_t q_rows = sm.q() + wg * 64 * kRowBytes;
    // Warpgroup 0 takes the first turn. Every warpgroup takes as many turns per tile, so on a persistent CTA the
    // last turn of a tile hands it back to warpgroup 0 for the next one.
    if constexpr (Cfg::kPingpong) {
      if (wg == 0 && loaded == 0) named_barrier_arrive(kBarrierSchedulerBase + 0, 256);
    }
    mbarrier_wait(sm.q_full(), static_cast<uint32_t>(loaded) & 1u);
    if constexpr (Cfg::kIntraWgOverlap) {
      consume_overlapped(sm, w, descale, o, softmax, query, q_rows, wg, pipe);
    } else {
      consume_sequential(sm, w, descale, o, softmax, query, q_rows, wg, pipe);
    }
  }

  /// Persistent grid: once this warp's S = Q.K^T of the tile's last block (n_block_min) has completed, lane 0
  /// releases Q to the producer for the next tile (q_empty). Nothing on a grid of one tile per CTA.
  static __device__ __forceinline__ void release_q(const Smem& sm, int n_block, const TileWork& w, int lane) {
    if constexpr (Cfg::kPersistent) {
      if (n_block == w.range.n_block_min && lane == 0) mbarrier_arrive(sm.q_empty());
    }
  }

  /// O += P.V of one V stage, waited: straight into O, or with two-level accumulation chunk by chunk through the
  /// fresh accumulator (o_scale already applied to O).
  static __device__ __forceinline__ void pv_waited(float (&o)[OutFrag::kRegs], uint32_t (&p)[kPHeld], const Smem& sm,
                                                   int wg, int stage) {
    if constexpr (Cfg::kTwoLevelAccum) {
      const float one[2] = {1.f, 1.f};
#pragma unroll
      for (int chunk = 0; chunk < kPvChunks; ++chunk) {
        float acc[kAccRegs];
        wgmma_fence();
        issue_pv<true>(acc, p, sm, wg, stage, chunk);
        wgmma_wait<0>();
        fence_operands(acc);
        add_chunk(o, acc, chunk, one);
      }
    } else {
      wgmma_fence();
      issue_pv<false>(o, p, sm, wg, stage);
      wgmma_wait<0>();
      fence_operands(o);
    }
    fence_p(p);
  }

  /// Per block: S = Q.K^T, wait, softmax, O += P.V, wait (FA2 order; GEMMs and softmax serialised
  /// inside the warpgroup).
  static __device__ __forceinline__ void consume_sequential(const Smem& sm, const TileWork& w,
                                                            const Descale<Cfg>& descale, float (&o)[OutFrag::kRegs],
                                                            Softmax& softmax, const int (&query)[2], uint32_t q_rows,
                                                            int wg, PipelineState<Cfg::kStages>& pipe) {
    int n_block = w.range.n_block_max - 1;
    if constexpr (!Cfg::kMaskFreeLoop) {  // one copy of the body: every block checks whether it needs the mask
      for (; n_block >= w.range.n_block_min; --n_block)
        sequential_step<true>(sm, w, descale, o, softmax, query, q_rows, wg, n_block, pipe);
    } else if constexpr (!Variant::kLocal) {  // masked blocks, then mask-free ones
      for (; n_block >= max(w.first_masked, w.range.n_block_min); --n_block)
        sequential_step<true>(sm, w, descale, o, softmax, query, q_rows, wg, n_block, pipe);
      for (; n_block >= w.range.n_block_min; --n_block)
        sequential_step<false>(sm, w, descale, o, softmax, query, q_rows, wg, n_block, pipe);
    } else {
      // A sliding window: a second round runs the blocks left of the window of the tile's last query through the
      // same masked code (one copy of it: a second one made ptxas spill).
      int masked_min = max(w.first_masked, w.range.n_block_min);
      for (;;) {
        for (; n_block >= masked_min; --n_block)
          sequential_step<true>(sm, w, descale, o, softmax, query, q_rows, wg, n_block, pipe);
        for (; n_block >= max(w.unmasked_min, w.range.n_block_min); --n_block)
          sequential_step<false>(sm, w, descale, o, softmax, query, q_rows, wg, n_block, pipe);
        if (n_block < w.range.n_block_min) break;
        masked_min = w.range.n_block_min;
      }
    }
  }

  template <bool kMaybeMasked>
  static __device__ __forceinline__ void sequential_step(const Smem& sm, const TileWork& w,
                                                         const Descale<Cfg>& descale, float (&o)[OutFrag::kRegs],
                                                         Softmax& softmax, const int (&query)[2], uint32_t q_rows,
                                                         int wg, int n_block, PipelineState<Cfg::kStages>& pipe) {
    const int lane = threadIdx.x % 32;
    float s[ScoreFrag::kRegs];
    mbarrier_wait(sm.k_full(pipe.stage), pipe.phase);
    wgmma_fence();
    issue_qk(s, q_rows, sm, pipe.stage);
    wgmma_wait<0>();
    fence_operands(s);
    release(sm.k_empty(pipe.stage));
    release_q(sm, n_block, w, lane);

    float o_scale[2];
    softmax_step<kMaybeMasked>(s, n_block, w, query, descale, softmax, o_scale);
    rescale_o(o, o_scale);
    uint32_t p[kPHeld];
    pack_p(s, p, sm, wg);

    mbarrier_wait(sm.v_full(pipe.stage), pipe.phase);
    pv_waited(o, p, sm, wg, pipe.stage);
    release(sm.v_empty(pipe.stage));
    pipe.advance();
  }

  /// FA3's intra-warpgroup overlap (paper §3.2, "2-stage pipelining"): at step j the warpgroup issues
  /// S_j = Q.K_j^T and O += P_{j-1}.V_{j-1} back to back, waits only for S_j, and runs the softmax of S_j
  /// while the P.V GEMM is still in flight; O is rescaled once that GEMM has completed. With two-level
  /// accumulation the P.V GEMM writes a fresh accumulator, added into O as O = (O + acc) * o_scale.
  /// kRescaleOBeforePv (FA3's RescaleOBeforeGemm): step j keeps S_j's factor in o_pending instead, and step j + 1
  /// multiplies O by it after issuing S_{j+1} = Q.K_{j+1}^T, while the tensor cores run that GEMM, just before
  /// O += P_j.V_j is issued: the rescale leaves the path from P.V's completion to the next turn.
  static __device__ __forceinline__ void consume_overlapped(const Smem& sm, const TileWork& w,
                                                            const Descale<Cfg>& descale, float (&o)[OutFrag::kRegs],
                                                            Softmax& softmax, const int (&query)[2], uint32_t q_rows,
                                                            int wg, PipelineState<Cfg::kStages>& pipe) {
    static_assert(!Cfg::kTwoLevelAccum || kPvChunks == 1, "the overlapped schedule takes P.V in one pass");
    const int lane = threadIdx.x % 32;
    uint32_t p[kPHeld];
    float acc[kAccRegs];
    float o_pending[2] = {1.f, 1.f};  // kRescaleOBeforePv: O's factor not applied yet (none after the first block)
    PipelineState<Cfg::kStages> v_pipe = pipe;  // V of the block whose P is pending
    if constexpr (!Cfg::kMaskFreeLoop) {
      // One copy of the body: every block, the first one included, checks whether it needs the mask; the first
      // block's step issues no P.V (there is no P yet). O and the fresh accumulator start at zero, so the
      // rescale and add of that step leave them at zero: the outputs are those of the peeled schedule below.
#pragma unroll
      for (int i = 0; i < kAccRegs; ++i) acc[i] = 0.f;
      for (int n_block = w.range.n_block_max - 1; n_block >= w.range.n_block_min; --n_block)
        overlapped_step<true, true>(sm, w, descale, o, softmax, query, q_rows, wg, n_block, pipe, v_pipe, p, acc,
                                    o_pending);
    } else {
      {  // first block: S, softmax, P (O is still zero, nothing to rescale)
        float s[ScoreFrag::kRegs];
        mbarrier_wait(sm.k_full(pipe.stage), pipe.phase);
        gemm_turn_begin(wg);
        wgmma_fence();
        issue_qk(s, q_rows, sm, pipe.stage);
        gemm_turn_end(wg);
        wgmma_wait<0>();
        fence_operands(s);
        release(sm.k_empty(pipe.stage));
        release_q(sm, w.range.n_block_max - 1, w, lane);
        float o_scale[2];
        softmax_step<true>(s, w.range.n_block_max - 1, w, query, descale, softmax, o_scale);
        pack_p(s, p, sm, wg);
      }
      v_pipe = pipe;
      pipe.advance();
      // The blocks that may need the mask come first (last block first); the rest run a loop without mask code.
      int n_block = w.range.n_block_max - 2;
      if constexpr (!Variant::kLocal) {
        for (; n_block >= max(w.first_masked, w.range.n_block_min); --n_block)
          overlapped_step<true, false>(sm, w, descale, o, softmax, query, q_rows, wg, n_block, pipe, v_pipe, p, acc,
                                       o_pending);
        for (; n_block >= w.range.n_block_min; --n_block)
          overlapped_step<false, false>(sm, w, descale, o, softmax, query, q_rows, wg, n_block, pipe, v_pipe, p, acc,
                                        o_pending);
      } else {
        // A sliding window's blocks left of the last query's window run in a second round of the masked loop, as
        // in consume_sequential.
        int masked_min = max(w.first_masked, w.range.n_block_min);
        for (;;) {
          for (; n_block >= masked_min; --n_block)
            overlapped_step<true, false>(sm, w, descale, o, softmax, query, q_rows, wg, n_block, pipe, v_pipe, p,
                                         acc, o_pending);
          for (; n_block >= max(w.unmasked_min, w.range.n_block_min); --n_block)
            overlapped_step<false, false>(sm, w, descale, o, softmax, query, q_rows, wg, n_block, pipe, v_pipe, p,
                                          acc, o_pending);
          if (n_block < w.range.n_block_min) break;
          masked_min = w.range.n_block_min;
        }
      }
    }
    // last P.V
    mbarrier_wait(sm.v_full(v_pipe.stage), v_pipe.phase);
    gemm_turn_begin(wg);
    if constexpr (Cfg::kRescaleOBeforePv) {
      rescale_o(o, o_pending);
      fence_operands(o);
    }
    wgmma_fence();
    if constexpr (Cfg::kTwoLevelAccum) {
      issue_pv<true>(acc, p, sm, wg, v_pipe.stage);
    } else {
      issue_pv<false>(o, p, sm, wg, v_pipe.stage);
    }
    gemm_turn_end(wg);
    wgmma_wait<0>();
    fence_p(p);
    release(sm.v_empty(v_pipe.stage));
    if constexpr (Cfg::kTwoLevelAccum) {
      fence_operands(acc);
      const float one[2] = {1.f, 1.f};
      add_chunk(o, acc, 0, one);
    } else {
      fence_operands(o);
    }
  }

  /// One step j of the overlapped schedule: S_j = Q.K_j^T and O (+)= P_{j-1}.V_{j-1} issued together, the softmax
  /// of S_j under the P.V GEMM, then O rescaled (or the fresh accumulator added) and P_j packed.
  /// kMaybeFirst: the step may be the tile's first (n_block = n_block_max - 1), which issues no P.V.
  template <bool kMaybeMasked, bool kMaybeFirst>
  static __device__ __forceinline__ void overlapped_step(const Smem& sm, const TileWork& w,
                                                         const Descale<Cfg>& descale, float (&o)[OutFrag::kRegs],
                                                         Softmax& softmax, const int (&query)[2], uint32_t q_rows, int wg,
                                                         int n_block, PipelineState<Cfg::kStages>& pipe,
                                                         PipelineState<Cfg::kStages>& v_pipe, uint32_t (&p)[kPHeld],
                                                         float (&acc)[kAccRegs], float (&o_pending)[2]) {
    const int lane = threadIdx.x % 32;
    const bool first = kMaybeFirst && n_block == w.range.n_block_max - 1;
    float s[ScoreFrag::kRegs];
    mbarrier_wait(sm.k_full(pipe.stage), pipe.phase);
    if (!first) mbarrier_wait(sm.v_full(v_pipe.stage), v_pipe.phase);
    gemm_turn_begin(wg);
    wgmma_fence();
    issue_qk(s, q_rows, sm, pipe.stage);
    if constexpr (Cfg::kRescaleOBeforePv) {
      // O is idle (the last P.V completed in the previous step). The operand fences pin the multiplies after the
      // Q.K^T issue and before wgmma.fence, which orders them before the P.V that reads O (PTX ISA, wgmma.fence).
      fence_operands(o);
      rescale_o(o, o_pending);
      fence_operands(o);
    }
    // Each branch starts with its own wgmma.fence (ptxas would otherwise inject one there; FA3 fences every GEMM).
    if (first) {
      // No P yet: an empty group in place of P.V's (PTX ISA, wgmma.commit_group), so every step waits on the same
      // counts. Branching on the issue alone, not on the waits, keeps ptxas from serialising the GEMMs.
      wgmma_fence();
      wgmma_commit();
    } else {
      wgmma_fence();
      if constexpr (Cfg::kTwoLevelAccum) {
        issue_pv<true>(acc, p, sm, wg, v_pipe.stage);
      } else {
        issue_pv<false>(o, p, sm, wg, v_pipe.stage);
      }
    }
    gemm_turn_end(wg);
    wgmma_wait<1>();  // S_j is ready; P_{j-1}.V_{j-1} may still run
    fence_operands(s);
    release(sm.k_empty(pipe.stage));
    release_q(sm, n_block, w, lane);
    float o_scale[2];
    softmax_step<kMaybeMasked, Cfg::kSoftmaxInMaskArms>(s, n_block, w, query, descale, softmax, o_scale);
    if constexpr (Cfg::kPinPvWait) pin_pv_wait(sm, softmax, wg);
    wgmma_wait<0>();
    fence_p(p);
    if (!first) release(sm.v_empty(v_pipe.stage));
    if constexpr (Cfg::kTwoLevelAccum) {
      fence_operands(acc);
      add_chunk(o, acc, 0, o_scale);
    } else if constexpr (Cfg::kRescaleOBeforePv) {
      fence_operands(o);
      o_pending[0] = o_scale[0];
      o_pending[1] = o_scale[1];
    } else {
      fence_operands(o);
      rescale_o(o, o_scale);
    }
    pack_p(s, p, sm, wg);
    v_pipe = pipe;
    pipe.advance();
  }
};

}  // namespace fa3jit::attention_fwd
