// fa3jit tile table and resource budgets (tile_table.h).
//
// Sources: FA3 hopper/tile_size.h (tile_size_fwd_sm90) and flash_fwd_kernel_sm90.h (setmaxnreg split);
// FA3 paper (arXiv 2407.08608) section 3.1 for the producer/consumer warpgroup layout;
// docs/kernel-design.md §9 gives the rationale.
#include "kernels/attention_fwd/tile_table.h"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"

namespace fa3jit::attention_fwd {

namespace {

// setmaxnreg targets per consumer warpgroup count, index = consumer_warpgroups - 1.
// FA3: 3 consumer WGs -> 32/160, 2 -> 24/240 (TMA K/V). FA3 gives 1 WG 56/256; this build keeps the
// consumer at 240, the same budget as the 2-warpgroup kernel.
struct RegisterSplit {
  int producer;
  int consumer;
};
constexpr RegisterSplit kRegisterSplits[] = {{56, 240}, {24, 240}, {32, 160}};
// Two consumer warpgroups beside a producer that needs more than FA3's 24 registers (TMA multicast, row gathers,
// the e4m3 V transpose's fast loop): the same pool of 3 x 168 (budget_problems checks it), moved to the producer.
constexpr RegisterSplit kWideProducerSplit = {40, 232};

// Registers ptxas gives every thread at entry for __launch_bounds__(num_threads, 1): the register file
// divided by the thread count, rounded down to the allocation granularity of 8, capped at 248 (the most
// a kernel may declare at entry; setmaxnreg moves registers between warpgroups afterwards).
int pinned_registers_per_thread(int num_threads) {
  return std::min(248, kRegistersPerSm / num_threads / 8 * 8);
}

}  // namespace

namespace {

// The smallest row of the tile table (capabilities().tuned_head_dims) at or above a head dim of the dtype's rule.
int tuned_row(int head_dim) {
  for (int d : capabilities().tuned_head_dims)
    if (head_dim <= d) return d;
  return capabilities().tuned_head_dims.back();
}

// The pair of different rows with a tile of its own (FA3's 192 / 128, DeepSeek's MLA prefill); any other pair takes
// the tile of its larger dim's row.
bool own_pair_row(int row, int row_v) { return row == 192 && row_v == 128; }

// The measured (or FA3's) tile of a row pair. {block_m, block_n, consumer_warpgroups, stages, pingpong,
// intra_wg_overlap}; a pair without its own row takes the equal pair of the larger dim.
TileDefaults table_tile(DType dtype, int row, int row_v, bool causal) {
  if (dtype == DType::kE4m3) {
    if (own_pair_row(row, row_v)) return {128, 160, 2, 2, true, true};  // FA3's fp8 192/128 tile
    switch (std::max(row, row_v)) {
      // From FA3's fp8 tiles (hopper/tile_size.h: 192x160 at d64, 192x128 at d96, 128x224 at d128, 128x128 at
      // d256, all RS P.V, intra-warpgroup overlap and pingpong), re-swept on the H200 with `fa3jit tune`
      // (configs/sweeps/table/e4m3_*.json, both masks at 2k and 8k keys; bench/NOTES.md): at the chosen block_n,
      // pingpong off was ahead in 11 of the 12 (row, mask, size) cells (-0.7 to +1.7 %); d128 128x160 beat 128x224
      // (+6.6 % non-causal 2k, -0.1 to +1.4 % elsewhere); d256 128x96 beat FA3's 128x128 (its consumers fit 232 registers, so the
      // producer gets the 40 of the V transpose's fast loop: derive_config). The producer warpgroup also transposes V
      // in shared memory. d192: FA3's 128x160 needs 192-byte rows (64-byte swizzle); with rows padded to 256 bytes
      // two stages fit at 128x128 (not re-swept: kept with pingpong).
      case 64: return {192, 160, 3, 2, false, true};
      case 96: return {192, 128, 3, 2, true, true};
      case 128: return {128, 160, 2, 2, false, true};
      case 192: return {128, 128, 2, 2, true, true};
      default: return {128, 96, 2, 2, false, true};
    }
  }
  if (own_pair_row(row, row_v)) return {128, 128, 2, 2, true, true};  // FA3's 192/128 (DeepSeek MLA prefill)
  switch (std::max(row, row_v)) {
    // 3 consumer warpgroups at 160 registers each hold a 192-row tile with block_n 128 (FA3's causal
    // tile; FA3's non-causal 192x192 needs P through shared memory). Round-robin pingpong over the three
    // warpgroups: +12.5% on the H200 (559 vs 497 TFLOPS, bf16 8k, bench/NOTES.md).
    case 64: return {192, 128, 3, 2, true, true};
    // Measured on the H200 (configs/sweeps/d96*.json, table_bf16_d96_*.json, bench/NOTES.md): 3 warpgroups of 64 rows;
    // non-causal 192x96 without pingpong on one CTA per tile (557-614 TFLOPS, 1.06-1.11x the earlier 192x112 with
    // pingpong on the persistent grid), causal 192x96 with pingpong (454 against 441 for 192x112 at 2k); FA3's
    // 192x144 needs P through shared memory.
    case 96: return causal ? TileDefaults{192, 96, 3, 2, true, true} : TileDefaults{192, 96, 3, 2, false, true};
    // 128x176 (FA3's non-causal tile, at the shared-memory limit with 2 stages) for both masks: on the H200
    // it beat 128x128 causal by 2% (651 vs 638 TFLOPS, bf16 8k, bench/NOTES.md); intra-warpgroup overlap
    // and pingpong on (FA3 paper §3.1-3.2).
    case 128: return {128, 176, 2, 2, true, true};
    // FA3's 128x112: two stages of 112 x 384-byte K and V rows beside Q fill shared memory.
    case 192: return {128, 112, 2, 2, true, true};
    // 128x80 is at the shared-memory limit with 2 stages (FA3 uses the same tile); pingpong measured
    // equal or better (760 vs 754 TFLOPS, bf16 8k), so it stays on.
    default: return {128, 80, 2, 2, true, true};
  }
}

// No row takes p_in_smem (spec.h; TileDefaults::p_in_smem stays false). Measured on an H100 in one process
// (bench_fwd.py fa3jit_alt, 2k-16k, both masks; bench/NOTES.md, 2026-12-07): P through shared memory on the table's
// d64 192x128 0.89-0.93; the tiles it lets fit, d64 192x192 0.96-1.02 (FA3's non-causal tile) and d96 192x128
// 0.92-0.96 non-causal, 1.00-1.02 causal.

// The budget problems of a tile at (dtype, head_dim, head_dim_v) with the dtype's default output, in `layout` (its
// register split; empty: it fits).
std::vector<std::string> tile_problems(DType dtype, int head_dim, int head_dim_v, const TileDefaults& t,
                                       const Layout& layout) {
  Spec spec = tiled_spec(dtype, default_out_dtype(dtype), dtype == DType::kE4m3 ? Quant::kPerHead : Quant::kNone,
                         head_dim, head_dim_v, false, t, layout);
  // A head-dim pair has a tile where one CTA per tile fits it (O staged over Q), whichever grid runs it: a pair that
  // fitted only the persistent grid's staging over V would have a kernel for some calls of a class and not others
  // (decode-shaped and serving calls run one tile per CTA).
  spec.persistent = false;
  return budget_problems(spec, derive_config(spec));
}

// A row's tile for a head dim pair below the row: as it is when it fits (it always does at the row's own sizes,
// which take no more), else with block_n narrowed to the widest that fits (a pair of different rows, or a layout
// whose register split leaves the consumers less: the gather kernels', derive_config); no tile fits is a
// kUnsupported error naming both dims.
TileDefaults fitted(DType dtype, int head_dim, int head_dim_v, TileDefaults t, const Layout& layout = Layout{}) {
  // A row's own equal sizes in the default split need no check (every launch classifies its call through here;
  // validate() still checks the spec when its kernel is made).
  if (head_dim == head_dim_v && head_dim == tuned_row(head_dim) && !layout.paged_gather) return t;
  const int step = dtype == DType::kE4m3 ? 32 : 16;  // the e4m3 V transpose works on 32 keys
  std::vector<std::string> problems = tile_problems(dtype, head_dim, head_dim_v, t, layout);
  while (!problems.empty() && t.block_n > step) {
    t.block_n -= step;
    problems = tile_problems(dtype, head_dim, head_dim_v, t, layout);
  }
  if (!problems.empty())
    throw Error(ErrorCode::kUnsupported,
                fmt::format("spec fields \"head_dim\" ({}) and \"head_dim_v\" ({}): no {} tile fits ({}); pairs "
                            "with a kernel include every equal pair of {} and 192 / 128",
                            head_dim, head_dim_v, dtype_name(dtype), fmt::join(problems, "; "),
                            allowed_head_dims(dtype)));
  return t;
}

// Whether the tile of (row, row_v) runs on the persistent grid: the tile of table_tile, so a pair without a row of its
// own follows the row of its larger dim. Measured on the H200, persistent against one CTA per tile in one process
// (bench_fwd.py fa3jit_grid and fa3jit_alt; bench/NOTES.md, 2026-12-03 and 2026-12-04): faster for 64, 128, 256 in
// both masks, 192 / 128 (0.96-0.99 on the grid) and d192 causal (mixed, 0.97-1.05); slower for 16-bit d96 (the
// adopted non-causal 192x96: 0.94-0.98; causal 0.95-0.99) and d192 non-causal (0.96-0.99).
bool persistent_row(DType dtype, int row, int row_v, bool causal) {
  if (dtype == DType::kE4m3 || own_pair_row(row, row_v)) return true;
  const int r = std::max(row, row_v);
  return !(r == 96 || (r == 192 && !causal));
}

// Whether the tile of (row, row_v) loads K one block ahead of V (spec.h: load_k_ahead; applied where
// load_k_ahead_fits). Measured on the H200, k-ahead against K and V together in one process (bench_fwd.py fa3jit_alt;
// bench/NOTES.md, 2026-12-05): 16-bit d256 1.04-1.09 in all 12 cells, d192 causal 1.00-1.07 and 192 / 128 causal
// 1.00-1.02 (two stages of wide rows: the K a Q.K^T waits for queued behind a V stage); d64, d96, d128, d192
// non-causal and e4m3 d_major 0.94-1.03, not taken.
bool load_k_ahead_row(DType dtype, int row, int row_v, bool causal) {
  if (dtype == DType::kE4m3) return false;
  const int r = std::max(row, row_v);
  return r == 256 || (r == 192 && causal);
}

// Whether the one-copy loop emits the softmax in both arms of its mask branch (spec.h: softmax_in_mask_arms; applied
// where softmax_in_mask_arms_fits). Measured on an H100 in one process (bench_fwd.py fa3jit_alt, 1k-16k; bench/NOTES.md,
// 2026-12-07): 16-bit d256 +3-7 % in 5 of 6 cells (its softmax of 42 exponentials and O's 128 rescales no longer wait
// for P.V), d128, d192 and 192 / 128 within 2-3 % either way, d64 and d96 -6-10 % (three warpgroups of 64 rows: their
// softmaxes, no longer held back by P.V, contend for the MUFU pipe); e4m3 one copy with it 0.86-0.95 of the table's
// two copies. Taken for 256 only.
bool softmax_in_mask_arms_row(DType dtype, int row, int row_v) {
  return dtype != DType::kE4m3 && std::max(row, row_v) == 256;
}

// Whether the tile runs the mask-free key blocks through their own copy of the loop body (spec.h: mask_free_loop).
// e4m3: one copy measured 0.85-1.01 of two (geomean 0.96; d256 with V d_major 0.85-0.88 at 8k-16k; bench/NOTES.md,
// 2026-12-05), so e4m3 takes two. 16-bit, measured again on the current loop (H100, one process, bench_fwd.py
// fa3jit_alt = the table's kernel with two copies, 1k / 4k / 16k keys, both masks; bench/NOTES.md, 2026-12-07): d128
// 1.02-1.08 (geomean 1.045), d64 1.02-1.05, d96 1.02-1.03, d192 1.00-1.08, 192 / 128 1.02-1.12, d256 1.00 (its
// one-copy loop carries softmax_in_mask_arms and lazy_rescale, measured +3-7 %): two copies everywhere but d256. They
// cost NVRTC time (about 1.5-2x the one-copy kernel's). Before the softmax and wait changes of 2026-12-07 the two
// measured the same (2026-12-05), and 16-bit took one copy for its compile time. Two copies with the first block
// folded into the masked one (no peeled copy; NVRTC -9-18 %) measured 0.92-1.02 of the peeled schedule on an H100
// (geomean 0.983; 2026-12-06): not taken.
bool mask_free_loop_row(DType dtype, int row, int row_v) {
  return dtype == DType::kE4m3 || !softmax_in_mask_arms_row(dtype, row, row_v);
}

// Whether the tile rescales O lazily (spec.h: lazy_rescale; applied where lazy_rescale_fits). Measured on an H100 in one
// process (bench_fwd.py fa3jit_alt = the table's kernel with it on, both masks, 1k / 4k / 16k keys for 64, 128, 256 and
// 2k / 8k for the others; bench/NOTES.md, 2026-12-07): 16-bit d256 +3-4 % in all 6 cells (128 multiplies of O per
// 80-key block skipped), d96, d192, 192 / 128 within 2 % either way (0.98-1.02), d128 0.98-1.02, d64
// 0.96-0.98 (three warpgroups of 64 rows; a reading, not profiled: the vote and the compare-selects cost more than the
// 32 multiplies saved).
// Taken for 256 only.
bool lazy_rescale_row(DType dtype, int row, int row_v) {
  return dtype != DType::kE4m3 && std::max(row, row_v) == 256;
}

// Whether the tile's TMA loads carry FA3's L2 priorities (spec.h: l2_evict_hints). Measured on an H100 in one process
// (bench_fwd.py fa3jit_alt = the table's kernel with the field on; bench/NOTES.md, 2026-12-07): bf16 36 cells geomean
// 1.006 (0.99-1.06; causal 512-1k +1-6 %, where many heads are in flight at once; 4k-16k within 1 %), d96 / d192 /
// 192-128 at 2k and 8k 0.99-1.01, e4m3 d_major 0.99-1.02: taken for every prefill row (no registers, no compile
// time). Decode-shaped calls keep none (not measured): the decode tile, and split-KV layouts (tiled_spec), whose splits
// each read Q again and their K/V range once.
bool l2_evict_hints_row(DType, int, int) { return true; }

// Whether the overlapped step keeps its P.V wait behind the softmax (spec.h: pin_pv_wait). Without it ptxas moved the
// wait up to the Q.K^T wait in both copies of the loop of every prefill row but 16-bit d256's, so the softmax waited
// for P.V instead of running under it. MUFU.EX2 per thread between the two waits, copy A / copy B (SASS, nvcc 13.0),
// without -> with the field: bf16 d128 0 / 15 -> 87 / 79 of 90, d64 0 / 11 -> 62 / 51 of 66, d96 0 / 0 -> 41 / 38 of
// 50, d192 0 / 9 -> 58 / 47 of 58, e4m3 d128 0 / 0 -> 67 / 71 of 82; 16-bit d256's one-copy loop keeps 84 of 84
// either way. Predicted +2-6 % for the 16-bit rows but d256 and +2-5 % for e4m3 (bench/NOTES.md, 2026-12-08), NOT YET
// MEASURED: no row takes it until the GPU A/B and its bit-identity test have run.
bool pin_pv_wait_row(DType, int, int) { return false; }

}  // namespace

TileDefaults default_tile(DType dtype, int head_dim, int head_dim_v, bool causal) {
  // The measured best tiles are the same for both masks (bench/NOTES.md) except at d96; so is the grid except at d192.
  if (!supports_head_dims(dtype, head_dim, head_dim_v))
    throw Error(ErrorCode::kInvalidSpec,
                fmt::format("spec fields \"head_dim\" ({}) and \"head_dim_v\" ({}) are not supported for dtype "
                            "\"{}\"; each is {}",
                            head_dim, head_dim_v, dtype_name(dtype), allowed_head_dims(dtype)));
  TileDefaults t = table_tile(dtype, tuned_row(head_dim), tuned_row(head_dim_v), causal);
  // A persistent grid for the rows measured faster there (persistent_row) where the layout allows one (spec.h:
  // persistent_conflict; tiled_spec applies it). Measured on the H200 (bench/NOTES.md, fa3jit persistent / fa3jit grid
  // in one process) for 64, 128, 256: non-causal 1.00-1.14 (bf16) and 0.99-1.20 (e4m3 d_major) with the static order;
  // causal 1.02-1.14 (bf16) and 1.01-1.23 (e4m3 d_major) with the dynamic tile scheduler, whose counter is the call's
  // workspace (launch.cpp: workspace_layout). Without a workspace a causal call runs a static order, measured
  // 0.61-1.12 of the grid. cluster_m stays 1: 2-CTA clusters on the persistent grid measured 0.93-1.02 of it (bf16
  // d128 and d256 non-causal 1k-16k, H100, 2026-12-06).
  t.persistent = persistent_row(dtype, tuned_row(head_dim), tuned_row(head_dim_v), causal);
  t.load_k_ahead = load_k_ahead_row(dtype, tuned_row(head_dim), tuned_row(head_dim_v), causal);
  t.mask_free_loop = mask_free_loop_row(dtype, tuned_row(head_dim), tuned_row(head_dim_v));
  t.softmax_in_mask_arms = softmax_in_mask_arms_row(dtype, tuned_row(head_dim), tuned_row(head_dim_v));
  t.lazy_rescale = lazy_rescale_row(dtype, tuned_row(head_dim), tuned_row(head_dim_v));
  t.l2_evict_hints = l2_evict_hints_row(dtype, tuned_row(head_dim), tuned_row(head_dim_v));
  t.pin_pv_wait = pin_pv_wait_row(dtype, tuned_row(head_dim), tuned_row(head_dim_v));
  return fitted(dtype, head_dim, head_dim_v, t);
}

int short_causal_max_seqlen_k(DType dtype, int head_dim, int head_dim_v) {
  if (dtype == DType::kE4m3 || head_dim != head_dim_v || head_dim != tuned_row(head_dim)) return 0;
  return head_dim == 128 ? 2048 : head_dim == 64 ? 1024 : 0;
}

TileDefaults decode_tile(DType dtype, int head_dim, int head_dim_v) {
  // {block_m, block_n, consumer_warpgroups, stages, pingpong, intra_wg_overlap}: bytes of one K+V stage x stages
  // ~ 128 KB (d64: 32 KB x 4, d128: 64 KB x 2, d256: 64 KB x 2; e4m3 halves a stage).
  if (!supports_head_dims(dtype, head_dim, head_dim_v)) return default_tile(dtype, head_dim, head_dim_v, false);
  const bool fp8 = dtype == DType::kE4m3;
  TileDefaults t{64, 128, 1, 2, false, true};
  // One copy for 16-bit decode (its short loops were not measured with two), two for e4m3 (mask_free_loop_row).
  t.mask_free_loop = fp8;
  // softmax_in_mask_arms stays off: decode measured within 1 % either way (one warpgroup, short loops; bench/NOTES.md,
  // 2026-12-07), so its kernels keep the shorter compile. lazy_rescale and l2_evict_hints stay off: decode was not
  // measured with them.
  t.l2_evict_hints = false;
  t.pin_pv_wait = false;  // not measured for decode either
  switch (std::max(tuned_row(head_dim), tuned_row(head_dim_v))) {
    case 64: t.stages = 4; break;
    case 96:
    case 128: t.stages = fp8 ? 4 : 2; break;
    case 192: break;
    default: t.block_n = fp8 ? 128 : 64; break;
  }
  return fitted(dtype, head_dim, head_dim_v, t);
}

// e4m3 with V given transposed (v_layout d_major): no V transpose, so the producer is one warp at 24 registers and
// the consumers get 240 (derive_config). Swept on the H200 with `fa3jit tune` (configs/sweeps/e4m3_*_vt.json, 8k keys;
// bench/NOTES.md): d128 128x192 without pingpong (881 TFLOPS non-causal, 838 causal, against 856 / 815 for the
// transposing kernel's 128x160), d256 128x128 with pingpong (1299 against 1033: the tile whose consumers need more
// than the transposing kernel's 232 registers); d64's 192x160 won its sweep too. The other rows, and softcap (not
// swept), keep the transposing kernel's tile.
TileDefaults d_major_tile(int row, TileDefaults d) {
  const auto tile = [&](int block_n, bool pingpong) {
    d.block_m = 128;
    d.block_n = block_n;
    d.consumer_warpgroups = 2;
    d.stages = 2;
    d.pingpong = pingpong;
    d.intra_wg_overlap = true;
    return d;
  };
  if (row == 128) return tile(192, false);
  if (row == 256) return tile(128, true);
  return d;
}

TileDefaults variant_tile(DType dtype, int head_dim, int head_dim_v, bool causal, Quant quant, const Layout& layout) {
  if (layout.short_q) return decode_tile(dtype, head_dim, head_dim_v);
  TileDefaults d = default_tile(dtype, head_dim, head_dim_v, causal || layout.local);
  if (layout.short_causal && causal && !layout.local && short_causal_max_seqlen_k(dtype, head_dim, head_dim_v) > 0) {
    d.block_m = 128;
    d.consumer_warpgroups = 2;
    d.block_n = 128;
  }
  // A sliding window is not causal to the kernel (Cfg::kCausal): on a persistent grid it would take the static
  // stride, not the causal scheduler, and that was never measured: windows keep one CTA per tile.
  if (layout.local) d.persistent = false;
  if (dtype == DType::kE4m3 && layout.v_d_major && (quant != Quant::kPerBlock || layout.descale_rows_from_kernel) &&
      !layout.softcap &&
      head_dim == head_dim_v &&
      head_dim == tuned_row(head_dim))
    d = d_major_tile(head_dim, d);
  // (e4m3 + softcap spilled 528 bytes at FA3's d128 128x224; the table's 128x160 spills none, nor do the other
  // e4m3 rows.) The gather kernels' wide producer split leaves their consumers 232 registers (derive_config); a tile whose
  // estimate is above that narrows.
  return layout.paged_gather ? fitted(dtype, head_dim, head_dim_v, d, layout) : d;
}

KernelConfig derive_config(const Spec& spec) {
  KernelConfig config{};
  config.spec = spec;
  const int wg = spec.consumer_warpgroups;
  config.num_threads = 128 * (wg + 1);
  config.producer_registers = kRegisterSplits[wg - 1].producer;
  config.consumer_registers = kRegisterSplits[wg - 1].consumer;
  const bool fp8 = spec.dtype == DType::kE4m3;
  config.v_stage = !fp8 ? kVStageMnMajor : spec.v_layout == VLayout::kDMajor ? kVStageDMajor : kVStageTransposed;
  const bool transpose_v = config.v_stage == kVStageTransposed;
  // The e4m3 producer warpgroup also transposes V (device/transpose_v.cuh): its lean loop fits the 24 registers of
  // FA3's split (d256 128x128), its fast loop takes the 40 given below where the consumers fit 232.
  // The gather producer (cp.async rows, page lookups, 64-bit addresses) spilled 28-36 bytes at 24 registers (ptxas,
  // d128 and d256 prefill tiles; the 32 of three warpgroups do), the multicast producer 44.
  auto widen = [&] {
    config.producer_registers = kWideProducerSplit.producer;
    config.consumer_registers = kWideProducerSplit.consumer;
  };
  if (wg == 2 && (spec.paged_gather || spec.cluster_m > 1)) widen();

  // Per consumer thread (one row quarter of a 64-row wgmma tile): the fp32 O accumulator holds
  // head_dim_v/2 values, the fp32 S accumulator block_n/2, P packed to 16 bits block_n/4, plus softmax
  // state, addresses and loop counters (~28). With intra-warpgroup overlap all three are live at once
  // (S_j is computed while P_{j-1} feeds the in-flight P.V); without it the same bound is safe.
  // Checked against ptxas: d128 n176 and d64 n128 (3 warpgroups, 160 registers) compile without spills;
  // d128 192x96 (estimate 164 with 28, 160 with 24) spills 48 bytes, so the overhead is 28.
  // e4m3: P packs four probabilities per register (block_n / 8), and two-level accumulation adds a fresh
  // accumulator of pv_chunk_n columns (pv_chunk_n / 2 registers).
  // p_in_smem: P goes to shared memory as it is packed, so no register holds it across the GEMMs.
  config.pv_chunk_n = spec.head_dim_v;
  const int p_registers = spec.p_in_smem ? 0 : fp8 ? spec.block_n / 8 : spec.block_n / 4;
  // 16-bit softcap over gathered pages beside three consumer warpgroups: d64's 192x128 (estimate 156) spilled 120-192
  // bytes (ptxas, CUDA 13.0; softcap alone or the gather alone spill none), 192x112 (144) none: 8 more.
  const int gather_softcap = !fp8 && spec.paged_gather && spec.softcap && wg == 3 ? 8 : 0;
  auto estimate = [&](int chunk) {
    return spec.head_dim_v / 2 + spec.block_n / 2 + p_registers + 28 + gather_softcap +
           (spec.fp32_two_level_accum ? chunk / 2 : 0);
  };
  if (transpose_v && wg == 2 && config.producer_registers < kWideProducerSplit.producer &&
      estimate(config.pv_chunk_n) <= kWideProducerSplit.consumer) {
    // The V transpose's fast loop (device/transpose_v.cuh: TransposeV::run_fast) keeps its addresses in registers
    // and spills at FA3's 24: the wide split where the consumers fit it (d128 128x224: estimate 232, ptxas no
    // spills; the table's d128 128x160: 192; d256 128x96: 216; a d256 128x128 spec needs 236 and keeps 24 + 2 x 240
    // and the lean loop). A d_major V needs no transpose: its producer is one warp issuing TMA, as for 16-bit inputs.
    widen();
  }
  if (spec.fp32_two_level_accum) {
    // The largest column chunk of P.V whose fresh accumulator fits; below the whole of head_dim_v the chunks run
    // one after the other (device/mainloop.cuh).
    // A chunk stays a multiple of 8 (wgmma's n granule) that divides head_dim_v.
    while (config.pv_chunk_n > 64 && config.pv_chunk_n % 16 == 0 &&
           estimate(config.pv_chunk_n) > config.consumer_registers)
      config.pv_chunk_n /= 2;
  }
  config.estimated_consumer_registers = estimate(config.pv_chunk_n);

  config.elem_bytes = dtype_size(spec.dtype);
  config.out_elem_bytes = dtype_size(spec.out_dtype);
  config.smem = smem_plan(spec.block_m, spec.block_n, spec.head_dim, spec.head_dim_v, spec.stages, config.elem_bytes,
                          config.out_elem_bytes, config.v_stage, spec.persistent, spec.p_in_smem);
  config.smem_bytes = config.smem.launch_bytes;
  return config;
}

std::vector<std::string> budget_problems(const Spec& spec, const KernelConfig& config) {
  const int wg = spec.consumer_warpgroups;
  std::vector<std::string> problems;
  const int pinned = pinned_registers_per_thread(config.num_threads);
  const int wanted = config.producer_registers + wg * config.consumer_registers;
  if (wanted > pinned * (wg + 1)) {
    problems.push_back(fmt::format("spec field \"consumer_warpgroups\": {} needs a register split of producer {} + "
                                   "{} x consumer {} = {} registers per thread slot, over the pool of {} x {} = {}",
                                   wg, config.producer_registers, wg, config.consumer_registers, wanted, wg + 1,
                                   pinned, pinned * (wg + 1)));
    return problems;
  }
  if (config.estimated_consumer_registers > config.consumer_registers) {
    problems.push_back(fmt::format(
        "spec fields \"tile.block_n\" ({}), \"head_dim\" ({}) and \"consumer_warpgroups\" ({}) need an "
        "estimated {} registers per consumer thread{}, over the budget of {} for {} consumer warpgroup{}; "
        "use a smaller tile.block_n",
        spec.block_n, spec.head_dim, wg, config.estimated_consumer_registers,
        spec.intra_wg_overlap ? " (with intra_wg_overlap)" : "", config.consumer_registers, wg,
        wg == 1 ? "" : "s"));
  }
  if (config.pv_chunk_n != spec.head_dim_v && spec.intra_wg_overlap) {
    problems.push_back(fmt::format(
        "spec field \"fp32_two_level_accum\": true with head_dim_v {} and tile.block_n {} leaves room for a fresh "
        "accumulator of only {} columns, which the intra_wg_overlap schedule cannot use; set intra_wg_overlap and "
        "pingpong false or use a smaller tile.block_n",
        spec.head_dim_v, spec.block_n, config.pv_chunk_n));
  }
  if (config.smem.o_bytes > config.smem.o_staging_bytes) {
    problems.push_back(fmt::format("spec fields \"head_dim\" ({}) and \"head_dim_v\" ({}) need {} bytes to stage the "
                                   "output, over the {} bytes the plan can lend{}",
                                   spec.head_dim, spec.head_dim_v, config.smem.o_bytes, config.smem.o_staging_bytes,
                                   spec.persistent ? "" : " (a persistent grid stages it over the V stages)"));
  }
  if (config.smem_bytes > kMaxSharedMemoryPerBlock) {
    problems.push_back(fmt::format(
        "spec fields \"stages\" ({}), \"tile\" ({}x{}) and \"head_dim\" ({}) need {} bytes of shared memory, "
        "over the limit of {} bytes per block; use fewer stages or a smaller tile.block_n",
        spec.stages, spec.block_m, spec.block_n, spec.head_dim, config.smem_bytes, kMaxSharedMemoryPerBlock));
  }
  return problems;
}

void check_budgets(const Spec& spec, const KernelConfig& config) {
  // Every resource that does not fit in one message, so the user fixes the spec once.
  const std::vector<std::string> problems = budget_problems(spec, config);
  if (!problems.empty()) throw Error(ErrorCode::kInvalidSpec, fmt::format("{}", fmt::join(problems, "; also ")));
}

KernelConfig make_kernel_config(const Spec& spec) {
  validate(spec);
  return derive_config(spec);
}

}  // namespace fa3jit::attention_fwd
