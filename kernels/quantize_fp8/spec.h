// FP8 pre-pass: the kernel spec a user writes (JSON), its capability table, its one validator and its
// canonical form.
//
// The pre-pass turns the 16-bit Q, K, V of an attention call into the e4m3 inputs of the FP8 attention kernel,
// with FlashAttention-3's incoherent processing and block quantisation (FA3 paper, arXiv 2407.08608, §3.3):
//   1. optional RoPE on Q and K (FlashAttention's apply_rotary_emb; position of token s = s):
//        x1' = x1 cos - x2 sin,  x2' = x1 sin + x2 cos
//      with pairs (i, i + rotary_dim / 2) ("neox", rotate halves) or (2i, 2i + 1) ("interleaved"), i <
//      rotary_dim / 2, cos/sin row s, column i; elements past rotary_dim are left as they are;
//   2. optional Hadamard rotation of every head vector of Q and K (never V): x -> H.D.x / sqrt(head_dim),
//      H the Sylvester Walsh-Hadamard matrix, D = diag(hadamard_sign(seed, i)) (params.h). H.D / sqrt(d) is
//      orthogonal and Q and K share D, so Q.K^T is unchanged while outliers are spread over all coordinates;
//   3. block quantisation: one descale per q_block_rows (k_block_rows) tokens of one head of Q (K), one per
//      channel of V over all seqlen_k tokens; descale = amax / 448 (1 when amax is 0; params.h:
//      descale_from_amax), stored value = cvt.rn.satfinite.e4m3(x / descale).
//
// JSON fields (unknown keys are errors):
//   kind          "quantize_fp8" (required in a spec document: the default kind is attention_fwd)
//   dtype         element type of q, k, v: "bf16" | "fp16" (required)
//   head_dim      elements per head vector of Q and K: 64 | 128 | 256 (required)
//   head_dim_v    elements per head vector of V: 64 | 128 | 256, default head_dim
//   hadamard      bool, default true: the Hadamard rotation of step 2
//   rope          "none" (default) | "neox" | "interleaved"
//   rotary_dim    elements of each head vector RoPE rotates, default head_dim. "interleaved": a multiple of 8
//                 in [8, head_dim]; "neox": a power of two in [16, head_dim] (so that a pair is one index bit
//                 apart: in one thread or one xor-shuffle away, device/rope.cuh); with rope "none" only
//                 head_dim (its default) is accepted
//   q_block_rows  tokens per Q descale block: a multiple of 16 in [16, 256], default 128 (the FP8 attention
//                 kernel passes its block_m)
//   k_block_rows  tokens per K descale block, the same range, default 128 (the kernel's block_n)
//   v_layout      how v8 is written: "seq_major" (default; (batch, seqlen_k, num_heads_kv, head_dim_v), as v) or
//                 "d_major": V transposed in the attention kernel's key order, (batch, num_heads_kv, head_dim_v,
//                 seqlen_k rounded up to 16), zeros past seqlen_k (kernels/attention_fwd/launch.h: ForwardArgs::v), for
//                 an e4m3 attention kernel with v_layout "d_major", which then skips its V transpose
// A field left out takes its default, so a spec with defaults spelled out and one without map to the same
// Spec, kernel name and cache key. Problem sizes and the seed are launch arguments (launch.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace fa3jit::quantize_fp8 {

inline constexpr std::string_view kKind = "quantize_fp8";

/// RoPE variants (FlashAttention apply_rotary_emb: interleaved=False is "neox", True is "interleaved").
/// The values are the kernel's kRope constants (device/rope.cuh).
enum class Rope { kNone = 0, kNeox = 1, kInterleaved = 2 };
/// "none", "neox", "interleaved".
const char* rope_name(Rope rope) noexcept;

/// What this build of the family generates: the one statement of it. Spec parsing, launch checks, error
/// messages and the family's capabilities JSON all read it.
struct Capabilities {
  std::vector<DType> dtypes;     // element types of q, k, v (outputs are always e4m3, descales fp32)
  std::vector<int> head_dims;    // head_dim and head_dim_v
  int block_rows_min;            // q_block_rows, k_block_rows: a multiple of block_rows_multiple in [min, max]
  int block_rows_max;
  int block_rows_multiple;
  int default_block_rows;
  std::vector<std::string> features;
};
const Capabilities& capabilities();

bool supports_dtype(DType dtype) noexcept;
bool supports_head_dim(long long head_dim) noexcept;
bool supports_block_rows(long long rows) noexcept;
/// What a message says is allowed: "one of \"fp16\", \"bf16\"", "one of 64, 128, 256",
/// "a multiple of 16 in [16, 256]", "one of \"none\", \"neox\", \"interleaved\"".
std::string allowed_dtypes();
std::string allowed_head_dims();
std::string allowed_block_rows();
std::string allowed_ropes();
/// The rotary_dim values allowed for (rope, head_dim), for messages.
std::string allowed_rotary_dim(Rope rope, int head_dim);

/// A fully resolved kernel spec: every field has a value.
struct Spec {
  DType dtype = DType::kBf16;
  int head_dim = 128;
  int head_dim_v = 128;
  bool hadamard = true;
  Rope rope = Rope::kNone;
  int rotary_dim = 128;  // head_dim when rope is kNone
  int q_block_rows = 128;
  int k_block_rows = 128;
  bool v_d_major = false;  // v_layout "d_major"
  bool operator==(const Spec&) const = default;
};

/// Reads and validates a spec ("kind" may be present and must be "quantize_fp8"). Throws Error(kInvalidSpec)
/// naming the field, the value as written and what is allowed. Never aborts.
Spec parse_spec(const nlohmann::json& doc);
/// Same, from JSON text; a syntax error is kInvalidSpec with the parser's position.
Spec parse_spec(const std::string& json_text);

/// The family's one validator: every rule on a Spec's values (the capability table and the rotary_dim rules;
/// the geometry of every allowed spec fits, geometry.h). parse_spec runs it; so do the emitter and the launch
/// path, for specs built in code. Error(kInvalidSpec) with the field's JSON name.
void validate(const Spec& spec);

/// The spec with every optional field at its default (hadamard on, no RoPE, 128-row blocks), validated.
Spec default_spec(DType dtype, int head_dim, int head_dim_v);

/// Canonical JSON: "kind" and every field, keys sorted, defaults spelled out. Two specs compile to the same
/// kernel iff their canonical strings are equal.
nlohmann::json canonical_json(const Spec& spec);
std::string canonical_string(const Spec& spec);

/// Short human summary, e.g. "quantize_fp8 bf16 d128 dv128 hadamard rope none q128 k128 warps16 cluster1".
std::string spec_summary(const Spec& spec);

/// The part of the kernel name before the hash, e.g. "bf16_d128_dv128_h_q128_k128" (jit/family.h: kernel_name).
std::string name_token(const Spec& spec);

}  // namespace fa3jit::quantize_fp8
