// Serving manifests: the attention calls a server will make, named by their shapes, so that their kernels are
// compiled before traffic (`fa3jit cache warm MANIFEST.json`, or warm_manifest() from a server's own thread while
// it serves from the kernels already compiled).
//
// A manifest is a JSON document of kind "serving_manifest":
//   {"kind": "serving_manifest",
//    "models": [{"name": "Llama-3.1-8B",                   optional, for messages
//                "dtype": "bf16",                          fp16 | bf16 | e4m3 (e4m3: per_head descales)
//                "head_dim": 128, "head_dim_v": 128,       head_dim_v defaults to head_dim
//                "num_heads": 32, "num_heads_kv": 8,       the GQA ratio decides pack_gqa as the runtime does
//                "causal": true,                           default true
//                "window_size": [-1, -1],                  FA3's (left, right), -1 unbounded; default none
//                "softcap": false, "sinks": false,         whether the calls pass a softcap / sink logits
//                "kv": ["packed", "paged"],                K/V layouts the server passes: packed (cu_seqlens_k),
//                                                          paged (page_table), dense (batch, capacity, ...)
//                "page_sizes": [16],                       with "paged"; any >= 1 (other than multiples of 8:
//                                                          the gather kernels)
//                "decode_queries": [1]}]}                  query tokens per sequence of a decode step
//                                                          (1; more for speculative verification)
// Each model gives the calls of a prefill (packed q over each K/V layout, a chunked prefill when paged) and of a
// decode step (dense q of each decode_queries over each K/V layout), each with and without split-KV (the
// runtime's heuristic may pick either); every one is resolved to its kernel by attention_fwd::call_spec, the
// function forward uses, so the manifest warms exactly the kernels the calls will run (a split kernel also needs
// the attention_combine kernel of its out dtype and head_dim_v, which is listed too; so are the tuned tiles of the
// runtime's tuning database for a prefill class, which the runtime runs in its place). Unknown keys, wrong types
// and values out of range are Error(kInvalidSpec) naming the field ("models[0].page_sizes[1]").
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/runtime.h"

namespace fa3jit::attention_fwd {

inline constexpr const char* kManifestKind = "serving_manifest";

/// One kernel a manifest's calls run: a spec document of its family and a line saying which call needs it.
struct ManifestKernel {
  nlohmann::json spec;  // with "kind" (attention_fwd or attention_combine), canonical
  std::string what;     // e.g. "Llama-3.1-8B decode (1 query, paged 16, split)"
};

/// The distinct kernels of a manifest document, in a stable order. With a runtime, each prefill kernel is followed by
/// the kernels of the tuned tiles its class has in the runtime's tuning database (tuned.h: tuned_specs), which the
/// runtime runs instead of it on the devices they were tuned on. Throws Error(kInvalidSpec) for a bad manifest and the
/// argument errors of forward (e.g. kUnsupported for head dims with no kernel) naming the model.
std::vector<ManifestKernel> manifest_kernels(const nlohmann::json& manifest, Runtime* runtime = nullptr);

/// Compiles every kernel of the manifest (manifest_kernels with the runtime: tuned tiles included) into the runtime's
/// cubin cache (memory and disk), so later calls only load them; safe to run on a thread of its own while other
/// threads call forward (the cache compiles each kernel once; a call that needs a kernel being compiled waits for it
/// instead of compiling it again). Returns how many were compiled (not found in the cache). Compiles on `jobs`
/// threads, the calling one included (0: background_compile_jobs(), half the hardware threads, 1 to 8); kernels
/// another process sharing the cache directory is compiling come last (Runtime::compiling_elsewhere), so ranks
/// warming one manifest split it. The first kernel that fails stops the others from taking more and is rethrown.
/// Needs no GPU.
size_t warm_manifest(Runtime& runtime, const nlohmann::json& manifest, size_t jobs = 0);

}  // namespace fa3jit::attention_fwd
