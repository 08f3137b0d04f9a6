// Where one tile's sequence lies in the tensors: its query and key lengths and first rows, for the dense layout
// and the serving layouts (spec fields varlen_q, varlen_k, paged_kv; launch.h: ForwardArgs), and which queries and
// heads the tile's rows are (pack_gqa). Every value read from the caller's int32 tensors (cu_seqlens_q,
// cu_seqlens_k, seqused_k) is clamped into the tensors given, so no value can move a load or a store outside
// them: a bad value changes the answer of its own sequence only.
#pragma once

#include "hopper/types.cuh"
#include "kernels/attention_fwd/device/scheduler.cuh"
#include "kernels/attention_fwd/device/variant.cuh"
#include "kernels/attention_fwd/params.h"

namespace fa3jit::attention_fwd {

__device__ __forceinline__ int clamp_int(int x, int lo, int hi) { return min(max(x, lo), hi); }

struct SeqInfo {
  int seqlen_q;  // queries of this sequence
  int seqlen_k;  // keys it attends (seqused_k when given)
  int q_row0;    // row of its first query in q / out / lse's seqlen dimension (varlen_q: the packed row; else 0)
  int k_row0;    // row of its first key in k / v (varlen_k: the packed row; else 0)
  int q_batch;   // batch coordinate of q / out (0 when packed)
  int k_batch;   // batch coordinate of k / v (0 when packed; paged: unused)

  template <class Cfg>
  static __device__ __forceinline__ SeqInfo load(const Params& p, int batch) {
    SeqInfo s;
    if constexpr (Cfg::kVarlenQ) {
      const int lo = clamp_int(p.cu_seqlens_q[batch], 0, p.seqlen_q);
      const int hi = clamp_int(p.cu_seqlens_q[batch + 1], lo, p.seqlen_q);
      s.q_row0 = lo;
      s.seqlen_q = hi - lo;
      s.q_batch = 0;
    } else {
      s.q_row0 = 0;
      s.seqlen_q = p.seqlen_q;
      s.q_batch = batch;
    }
    int capacity;
    if constexpr (Cfg::kVarlenK) {
      const int lo = clamp_int(p.cu_seqlens_k[batch], 0, p.seqlen_k);
      const int hi = clamp_int(p.cu_seqlens_k[batch + 1], lo, p.seqlen_k);
      s.k_row0 = lo;
      capacity = hi - lo;
      s.k_batch = 0;
    } else {
      s.k_row0 = 0;
      capacity = p.seqlen_k;  // paged: max_pages * page_size
      s.k_batch = batch;
    }
    s.seqlen_k = p.seqused_k != nullptr ? clamp_int(p.seqused_k[batch], 0, capacity) : capacity;
    return s;
  }
};

/// Which query and head row `r` (0 .. block_m - 1) of a tile is. Without pack_gqa: query m_block * block_m + r of
/// the tile's head. With pack_gqa (FA3's PackGQA): row r = i * head_group + g is query m_block * pack_rows + i of
/// head kv_head * head_group + g; rows past pack_rows * head_group hold no query.
template <class Cfg>
struct RowMap {
  int q_first;  // query index (in the sequence) of the tile's first row
  int group;    // pack_gqa: head_group; else 1

  static __device__ __forceinline__ RowMap make(const Params& p, TileCoord tile) {
    RowMap m;
    m.group = Cfg::kPackGqa ? p.head_group : 1;
    m.q_first = tile.m_block * (Cfg::kPackGqa ? p.pack_rows : Cfg::kBlockM);
    return m;
  }
  /// Query rows the tile holds: pack_rows with pack_gqa, else block_m.
  static __device__ __forceinline__ int queries(const Params& p) { return Cfg::kPackGqa ? p.pack_rows : Cfg::kBlockM; }
  /// Query index (in the sequence) of tile row r. With pack_gqa a row past pack_rows * head_group holds no query;
  /// its index is then past the tile's last query (valid() says whether a row holds a query of the sequence).
  __device__ __forceinline__ int query(int r) const {
    if constexpr (Cfg::kPackGqa) {
      return q_first + r / group;
    } else {
      return q_first + r;
    }
  }
  /// Whether tile row r holds a query of the sequence (a row to store).
  __device__ __forceinline__ bool valid(int r, int seqlen_q, const Params& p) const {
    if constexpr (Cfg::kPackGqa) {
      if (r >= p.pack_rows * group) return false;
    }
    return query(r) < seqlen_q;
  }
  /// Query head of tile row r.
  __device__ __forceinline__ int head(int r, TileCoord tile) const {
    if constexpr (Cfg::kPackGqa) {
      return tile.kv_head * group + r % group;
    } else {
      return tile.head;
    }
  }
};

/// Everything a CTA's warpgroups need to know about their tile, computed once at the kernel's start.
struct TileWork {
  TileCoord tile;
  SeqInfo seq;
  int q_first;        // query index (in the sequence) of the tile's first row
  int first_masked;   // key blocks >= this one need the mask (AttentionVariant::first_masked_block)
  int unmasked_min;   // and, with a sliding window, those below this one (AttentionVariant::unmasked_min_block)
  Window window;      // the sequence's window, clamped (AttentionVariant::window)
  float softcap_log2;      // softcap * log2(e) (Params; used with Cfg::kSoftcap)
  float inv_softcap_log2;  // its reciprocal
  NBlockRange range;  // the key blocks this CTA visits (its split's part with split-KV)
};

}  // namespace fa3jit::attention_fwd
