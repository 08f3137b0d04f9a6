// The FA3 mainloop: a producer thread streams Q once and K/V blocks through a `stages`-deep mbarrier
// ring by TMA; each consumer warpgroup computes S = Q.K^T (wgmma, both operands in shared memory), masks,
// runs the online softmax, and accumulates O += P.V (wgmma with P from registers, V from shared memory).
// KV blocks are visited from the last to the first, so the masked blocks (seqlen_k tail, causal diagonal)
// come first and the steady state runs mask-free (FA3 paper §3; docs/kernel-design.md §6).
//
// Operand layouts (docs/kernel-design.md §2, verified on an H200):
//   Q, K: K-major, 128B swizzle, SBO = 1024; a k16 step inside a 64-column block adds 32 bytes to the
//         start address, the next 64-column block starts rows*128 bytes further.
//   V:    MN-major for P.V (head_dim contiguous), trans-b = 1; SBO = 1024 (8 kv rows), LBO = block_n*128
//         (next 64-column block of head_dim_v), a k16 step adds 16 rows = 2048 bytes.
//   P:    the fp32 S accumulator maps onto the 16-bit A-register fragment directly: for k-step g,
//         a0..a3 = pack(s[8g..8g+1]), pack(s[8g+2..8g+3]), pack(s[8g+4..8g+5]), pack(s[8g+6..8g+7]).
// Which element a register of S or O holds: hopper/fragment.cuh. What happens to a score block between the two
// GEMMs (key-block range, transform, mask, row-sum hook): variant.cuh, then softmax.cuh.
#pragma once

#include "hopper/cluster.cuh"
#include "hopper/fragment.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/swizzle.cuh"
#include "hopper/tma.cuh"
#include "hopper/warpgroup.cuh"
#include "hopper/wgmma.cuh"
#include "kernels/attention_fwd/device/scheduler.cuh"
#include "kernels/attention_fwd/device/smem_layout.cuh"
#include "kernels/attention_fwd/device/softmax.cuh"
#include "kernels/attention_fwd/device/variant.cuh"

namespace fa3jit::attention_fwd {

template <class Cfg>
struct Mainloop {
  using Smem = SmemLayout<Cfg>;
  using Variant = AttentionVariant<Cfg>;
  using ScoreFrag = AccFragment<Cfg::kBlockN>;  // S and P: 64 x block_n per consumer warpgroup
  using OutFrag = AccFragment<Cfg::kHeadDimV>;  // O: 64 x head_dim_v per consumer warpgroup
  static constexpr int kQkSteps = Cfg::kHeadDim / 16;   // k16 steps of S = Q.K^T
  static constexpr int kPvSteps = Cfg::kBlockN / 16;    // k16 steps of O += P.V
  static constexpr int kRowBytes = kSwizzleRowBytes;     // one swizzled row of a 64-column block
  // A stage is free once lane 0 of every consumer warp of every CTA that reads it has released it: with
  // cluster_m = 2 the peer CTA's consumers release it too (its producer multicasts into our stage).
  static constexpr uint32_t kEmptyArrivals = 4 * Cfg::kConsumerWarpgroups * Cfg::kClusterM;

  /// Initialises the barriers (one thread); the caller fences and synchronises the CTA afterwards.
  static __device__ __forceinline__ void init_barriers(const Smem& sm) {
    mbarrier_init(sm.q_full(), 1);
#pragma unroll
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbarrier_init(sm.k_full(s), 1);
      mbarrier_init(sm.v_full(s), 1);
      mbarrier_init(sm.k_empty(s), kEmptyArrivals);
      mbarrier_init(sm.v_empty(s), kEmptyArrivals);
    }
  }

  /// Loads a K or V block. Alone, one CTA loads the whole block. With cluster_m = 2 each CTA loads half the
  /// rows and multicasts them to both CTAs, so every CTA's stage still receives the full block and its full
  /// barrier the full byte count (FA3's 2x1 cluster; PTX ISA cp.async.bulk.tensor .multicast::cluster).
  template <int kCols>
  static __device__ __forceinline__ void load_kv_block(uint32_t dst, const TmaDesc* desc, uint32_t bar, int row,
                                                       int head, int batch) {
    if constexpr (Cfg::kClusterM == 1) {
      load_tile<Cfg::kBlockN, kCols>(dst, desc, bar, row, head, batch);
    } else {
      constexpr int kHalf = Cfg::kBlockN / 2;
      const int rank = static_cast<int>(cluster_ctarank());
#pragma unroll
      for (int j = 0; j < kCols / 64; ++j)
        tma_load_4d_multicast(dst + j * Cfg::kBlockN * kRowBytes + rank * kHalf * kRowBytes, desc, bar, 64 * j,
                              row + rank * kHalf, head, batch, static_cast<uint16_t>(0x3));
    }
  }

  /// Releases a K or V stage: this warp's arrival on the empty barrier of every CTA that loads into it.
  static __device__ __forceinline__ void release(uint32_t empty_bar) {
    if constexpr (Cfg::kClusterM == 1) {
      mbarrier_arrive(empty_bar);
    } else {
#pragma unroll
      for (uint32_t rank = 0; rank < Cfg::kClusterM; ++rank) mbarrier_arrive_cluster(empty_bar, rank);
    }
  }

  /// Loads a rows x head_dim tile as head_dim/64 boxes of {64, rows} into consecutive column blocks.
  template <int kRows, int kCols>
  static __device__ __forceinline__ void load_tile(uint32_t dst, const TmaDesc* desc, uint32_t bar, int row,
                                                   int head, int batch) {
#pragma unroll
    for (int j = 0; j < kCols / 64; ++j) tma_load_4d(dst + j * kRows * kRowBytes, desc, bar, 64 * j, row, head, batch);
  }

  /// Producer: one thread. Q once, then K and V of every visited block, last block first.
  static __device__ __forceinline__ void produce(const Smem& sm, const TmaDesc* tm_q, const TmaDesc* tm_k,
                                                 const TmaDesc* tm_v, TileCoord tile, int kv_head, NBlockRange range) {
    if (range.empty()) return;
    mbarrier_arrive_expect_tx(sm.q_full(), Smem::kQBytes);
    load_tile<Cfg::kBlockM, Cfg::kHeadDim>(sm.q(), tm_q, sm.q_full(), tile.m_block * Cfg::kBlockM, tile.head,
                                           tile.batch);
    PipelineState<Cfg::kStages> pipe;
    for (int n_block = range.n_block_max - 1; n_block >= range.n_block_min; --n_block) {
      mbarrier_wait(sm.k_empty(pipe.stage), pipe.phase ^ 1u);
      mbarrier_arrive_expect_tx(sm.k_full(pipe.stage), Smem::kKStageBytes);
      load_kv_block<Cfg::kHeadDim>(sm.k(pipe.stage), tm_k, sm.k_full(pipe.stage), n_block * Cfg::kBlockN, kv_head,
                                   tile.batch);
      mbarrier_wait(sm.v_empty(pipe.stage), pipe.phase ^ 1u);
      mbarrier_arrive_expect_tx(sm.v_full(pipe.stage), Smem::kVStageBytes);
      load_kv_block<Cfg::kHeadDimV>(sm.v(pipe.stage), tm_v, sm.v_full(pipe.stage), n_block * Cfg::kBlockN, kv_head,
                                    tile.batch);
      pipe.advance();
    }
  }

  /// S = Q.K^T for this warpgroup's 64 rows and one K stage (issued, committed, not waited).
  static __device__ __forceinline__ void issue_qk(float (&s)[ScoreFrag::kRegs], uint32_t q_rows, uint32_t k_tile) {
#pragma unroll
    for (int kk = 0; kk < kQkSteps; ++kk) {
      const uint32_t col = (kk / 4), off = (kk % 4) * 32;
      const uint64_t desc_q = make_smem_desc_sw128(q_rows + col * Cfg::kBlockM * kRowBytes + off, 16, 1024);
      const uint64_t desc_k = make_smem_desc_sw128(k_tile + col * Cfg::kBlockN * kRowBytes + off, 16, 1024);
      wgmma_qk(s, desc_q, desc_k, kk > 0 ? 1 : 0);
    }
    wgmma_commit();
  }

  /// O += P.V for one V stage (issued, committed, not waited).
  static __device__ __forceinline__ void issue_pv(float (&o)[OutFrag::kRegs], const uint32_t (&p)[Cfg::kBlockN / 4],
                                                  uint32_t v_tile) {
#pragma unroll
    for (int g = 0; g < kPvSteps; ++g) {
      const uint64_t desc_v = make_smem_desc_sw128(v_tile + g * 16 * kRowBytes, Cfg::kBlockN * kRowBytes, 1024);
      wgmma_pv(o, p[4 * g], p[4 * g + 1], p[4 * g + 2], p[4 * g + 3], desc_v);
    }
    wgmma_commit();
  }

  /// Converts probabilities (S accumulator layout) into the 16-bit A fragments of P.V.
  static __device__ __forceinline__ void convert_p(const float (&s)[ScoreFrag::kRegs],
                                                   uint32_t (&p)[Cfg::kBlockN / 4]) {
#pragma unroll
    for (int i = 0; i < Cfg::kBlockN / 4; ++i) p[i] = pack_half2<Cfg::kIsBf16>(s[2 * i], s[2 * i + 1]);
  }

  /// One score block through the variant and the online softmax: transform, mask (only the blocks that need
  /// it), exponentiate. row0: the global query row of the thread's row half 0 (hopper/fragment.cuh). o_scale
  /// receives the factor for the rows of O.
  static __device__ __forceinline__ void softmax_step(float (&s)[ScoreFrag::kRegs], int n_block, TileCoord tile,
                                                      int row0, const Params& params,
                                                      OnlineSoftmax<Cfg::kBlockN>& softmax, float (&o_scale)[2]) {
    Variant::transform_scores(s);
    if (Variant::needs_mask(n_block, tile.m_block, params.seqlen_q, params.seqlen_k))
      Variant::apply_mask(s, n_block, row0, params.seqlen_q, params.seqlen_k);
    softmax.update(s, params.scale_log2, o_scale);
  }

  /// O *= o_scale, row half by row half.
  static __device__ __forceinline__ void rescale_o(float (&o)[OutFrag::kRegs], const float (&o_scale)[2]) {
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
  static __device__ __forceinline__ void consume(const Smem& sm, int wg, TileCoord tile, NBlockRange range,
                                                 const Params& params, float (&o)[OutFrag::kRegs],
                                                 OnlineSoftmax<Cfg::kBlockN>& softmax) {
    if (range.empty()) return;
    const int row0 = ScoreFrag::row_base(tile.m_block * Cfg::kBlockM + wg * 64);  // global query row of row half 0
    const uint32_t q_rows = sm.q() + wg * 64 * kRowBytes;
    if constexpr (Cfg::kPingpong) {
      if (wg == 0) named_barrier_arrive(kBarrierSchedulerBase + 0, 256);  // warpgroup 0 takes the first turn
    }
    mbarrier_wait(sm.q_full(), 0);
    if constexpr (Cfg::kIntraWgOverlap) {
      consume_overlapped(sm, tile, range, params, o, softmax, row0, q_rows, wg);
    } else {
      consume_sequential(sm, tile, range, params, o, softmax, row0, q_rows, wg);
    }
  }

  /// Per block: S = Q.K^T, wait, softmax, O += P.V, wait (FA2 order; GEMMs and softmax serialised
  /// inside the warpgroup).
  static __device__ __forceinline__ void consume_sequential(const Smem& sm, TileCoord tile, NBlockRange range,
                                                            const Params& params, float (&o)[OutFrag::kRegs],
                                                            OnlineSoftmax<Cfg::kBlockN>& softmax, int row0,
                                                            uint32_t q_rows, int wg) {
    const int lane = threadIdx.x % 32;
    PipelineState<Cfg::kStages> pipe;
    for (int n_block = range.n_block_max - 1; n_block >= range.n_block_min; --n_block) {
      float s[ScoreFrag::kRegs];
      mbarrier_wait(sm.k_full(pipe.stage), pipe.phase);
      wgmma_fence();
      issue_qk(s, q_rows, sm.k(pipe.stage));
      wgmma_wait<0>();
      fence_operands(s);
      if (lane == 0) release(sm.k_empty(pipe.stage));

      float o_scale[2];
      softmax_step(s, n_block, tile, row0, params, softmax, o_scale);
      rescale_o(o, o_scale);
      uint32_t p[Cfg::kBlockN / 4];
      convert_p(s, p);

      mbarrier_wait(sm.v_full(pipe.stage), pipe.phase);
      wgmma_fence();
      issue_pv(o, p, sm.v(pipe.stage));
      wgmma_wait<0>();
      fence_operands(o);
      fence_operands(p);
      if (lane == 0) release(sm.v_empty(pipe.stage));
      pipe.advance();
    }
  }

  /// FA3's intra-warpgroup overlap (paper §3.2, "2-stage pipelining"): at step j the warpgroup issues
  /// S_j = Q.K_j^T and O += P_{j-1}.V_{j-1} back to back, waits only for S_j, and runs the softmax of S_j
  /// while the P.V GEMM is still in flight; O is rescaled once that GEMM has completed.
  static __device__ __forceinline__ void consume_overlapped(const Smem& sm, TileCoord tile, NBlockRange range,
                                                            const Params& params, float (&o)[OutFrag::kRegs],
                                                            OnlineSoftmax<Cfg::kBlockN>& softmax, int row0,
                                                            uint32_t q_rows, int wg) {
    const int lane = threadIdx.x % 32;
    PipelineState<Cfg::kStages> pipe;
    uint32_t p[Cfg::kBlockN / 4];
    {  // first block: S, softmax, P (O is still zero, nothing to rescale)
      float s[ScoreFrag::kRegs];
      mbarrier_wait(sm.k_full(pipe.stage), pipe.phase);
      gemm_turn_begin(wg);
      wgmma_fence();
      issue_qk(s, q_rows, sm.k(pipe.stage));
      gemm_turn_end(wg);
      wgmma_wait<0>();
      fence_operands(s);
      if (lane == 0) release(sm.k_empty(pipe.stage));
      float o_scale[2];
      softmax_step(s, range.n_block_max - 1, tile, row0, params, softmax, o_scale);
      convert_p(s, p);
    }
    PipelineState<Cfg::kStages> v_pipe = pipe;  // V of the block whose P is pending
    pipe.advance();
    for (int n_block = range.n_block_max - 2; n_block >= range.n_block_min; --n_block) {
      float s[ScoreFrag::kRegs];
      mbarrier_wait(sm.k_full(pipe.stage), pipe.phase);
      mbarrier_wait(sm.v_full(v_pipe.stage), v_pipe.phase);
      gemm_turn_begin(wg);
      wgmma_fence();
      issue_qk(s, q_rows, sm.k(pipe.stage));
      issue_pv(o, p, sm.v(v_pipe.stage));
      gemm_turn_end(wg);
      wgmma_wait<1>();  // S_j is ready; P_{j-1}.V_{j-1} may still run
      fence_operands(s);
      if (lane == 0) release(sm.k_empty(pipe.stage));
      float o_scale[2];
      softmax_step(s, n_block, tile, row0, params, softmax, o_scale);
      wgmma_wait<0>();
      fence_operands(o);
      fence_operands(p);
      if (lane == 0) release(sm.v_empty(v_pipe.stage));
      rescale_o(o, o_scale);
      convert_p(s, p);
      v_pipe = pipe;
      pipe.advance();
    }
    // last P.V
    mbarrier_wait(sm.v_full(v_pipe.stage), v_pipe.phase);
    gemm_turn_begin(wg);
    wgmma_fence();
    issue_pv(o, p, sm.v(v_pipe.stage));
    gemm_turn_end(wg);
    wgmma_wait<0>();
    fence_operands(o);
    fence_operands(p);
    if (lane == 0) release(sm.v_empty(v_pipe.stage));
  }
};

}  // namespace fa3jit::attention_fwd
