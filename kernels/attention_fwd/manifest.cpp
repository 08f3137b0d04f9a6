// Serving manifests (manifest.h): a model's calls, resolved to kernels by call_spec (launch.h).
#include "kernels/attention_fwd/manifest.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/workers.h"
#include "jit/family.h"
#include "kernels/attention_combine/spec.h"
#include "kernels/attention_fwd/launch.h"
#include "kernels/attention_fwd/tile_table.h"
#include "kernels/attention_fwd/tuned.h"

namespace fa3jit::attention_fwd {
namespace {

using nlohmann::json;
namespace jf = json_fields;

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::kInvalidSpec, message); }

enum class KvLayout { kPacked, kPaged, kDense };

struct Model {
  std::string name;
  DType dtype = DType::kBf16;
  int64_t head_dim = 0, head_dim_v = 0, num_heads = 0, num_heads_kv = 0;
  bool causal = true, softcap = false, sinks = false;
  int64_t window_left = -1, window_right = -1;
  std::vector<KvLayout> kv;
  std::vector<int64_t> page_sizes, decode_queries;
};

std::vector<int64_t> read_int_list(const json& value, const std::string& path, int64_t lo, int64_t hi,
                                   const std::string& allowed) {
  if (!value.is_array() || value.empty())
    invalid(fmt::format("manifest field \"{}\": {} is not allowed; expected a non-empty array of {}", path,
                        jf::show(value), allowed));
  std::vector<int64_t> out;
  for (size_t i = 0; i < value.size(); ++i)
    out.push_back(jf::read_int(value[i], fmt::format("{}[{}]", path, i), lo, hi, allowed));
  return out;
}

Model read_model(const json& m, const std::string& path) {
  jf::require_object(m, path);
  jf::reject_unknown_keys(m, path,
                          {"name", "dtype", "head_dim", "head_dim_v", "num_heads", "num_heads_kv", "causal",
                           "window_size", "softcap", "sinks", "kv", "page_sizes", "decode_queries"});
  const auto field = [&](const char* key) { return jf::join_path(path, key); };
  const auto required = [&](const char* key) -> const json& {
    if (!m.contains(key)) invalid(fmt::format("manifest field \"{}\" is missing", field(key)));
    return m.at(key);
  };
  Model model;
  model.name = m.contains("name") ? jf::read_string(m.at("name"), field("name"), "a string") : path;
  const std::string dtype = jf::read_string(required("dtype"), field("dtype"), allowed_dtypes());
  if (!dtype_from_name(dtype, model.dtype) || !supports_dtype(model.dtype))
    invalid(fmt::format("manifest field \"{}\": {} is not allowed; expected {}", field("dtype"), jf::show(json(dtype)),
                        allowed_dtypes()));
  const std::string dims = allowed_head_dims(model.dtype);
  model.head_dim = jf::read_int(required("head_dim"), field("head_dim"), 1, 4096, dims);
  model.head_dim_v = m.contains("head_dim_v") ? jf::read_int(m.at("head_dim_v"), field("head_dim_v"), 1, 4096, dims)
                                              : model.head_dim;
  model.num_heads = jf::read_int(required("num_heads"), field("num_heads"), 1, 0x7fffffff, "a positive integer");
  model.num_heads_kv =
      jf::read_int(required("num_heads_kv"), field("num_heads_kv"), 1, 0x7fffffff, "a divisor of num_heads");
  if (m.contains("causal")) model.causal = jf::read_bool(m.at("causal"), field("causal"));
  if (m.contains("softcap")) model.softcap = jf::read_bool(m.at("softcap"), field("softcap"));
  if (m.contains("sinks")) model.sinks = jf::read_bool(m.at("sinks"), field("sinks"));
  if (m.contains("window_size")) {
    const json& w = m.at("window_size");
    if (!w.is_array() || w.size() != 2)
      invalid(fmt::format("manifest field \"{}\": {} is not allowed; expected [left, right], -1 = unbounded",
                          field("window_size"), jf::show(w)));
    model.window_left = jf::read_int(w[0], field("window_size") + "[0]", -1, 0x7ffffffe, "-1 or a key count");
    model.window_right = jf::read_int(w[1], field("window_size") + "[1]", -1, 0x7ffffffe, "-1 or a key count");
  }
  const json kv = m.contains("kv") ? m.at("kv") : json::array({"packed"});
  if (!kv.is_array() || kv.empty())
    invalid(fmt::format("manifest field \"{}\": {} is not allowed; expected a non-empty array of \"packed\", "
                        "\"paged\", \"dense\"",
                        field("kv"), jf::show(kv)));
  for (size_t i = 0; i < kv.size(); ++i) {
    const std::string p = fmt::format("{}[{}]", field("kv"), i);
    const std::string layout = jf::read_string(kv[i], p, "\"packed\", \"paged\" or \"dense\"");
    if (layout == "packed") {
      model.kv.push_back(KvLayout::kPacked);
    } else if (layout == "paged") {
      model.kv.push_back(KvLayout::kPaged);
    } else if (layout == "dense") {
      model.kv.push_back(KvLayout::kDense);
    } else {
      invalid(fmt::format("manifest field \"{}\": {} is not allowed; expected \"packed\", \"paged\" or \"dense\"", p,
                          jf::show(json(layout))));
    }
  }
  const bool paged = std::find(model.kv.begin(), model.kv.end(), KvLayout::kPaged) != model.kv.end();
  if (paged != m.contains("page_sizes"))
    invalid(fmt::format("manifest field \"{}\" {}", field("page_sizes"),
                        paged ? "is missing; \"kv\" has \"paged\"" : "is given but \"kv\" has no \"paged\""));
  if (paged) model.page_sizes = read_int_list(m.at("page_sizes"), field("page_sizes"), 1, 1 << 20, "page sizes");
  model.decode_queries = m.contains("decode_queries")
                             ? read_int_list(m.at("decode_queries"), field("decode_queries"), 1, 1024,
                                             "query tokens per sequence in [1, 1024]")
                             : std::vector<int64_t>{1};
  return model;
}

// A valid host address for the pointers whose presence selects a layout (cu_seqlens, seqused_k, page_table,
// sinks); call_spec never reads through them.
const int32_t kNotRead[1] = {0};

// The lengths the calls are described with: longer than any window a model uses, so a window is never dropped as
// wider than the sequences (launch.cpp: resolve_mask) where a real call would keep it.
constexpr int64_t kPrefillQueries = int64_t{1} << 16;
constexpr int64_t kShortPrefillQueries = 8;
constexpr int64_t kKeys = int64_t{1} << 20;
constexpr int64_t kFewKeys = 8;

// The shapes of one call of `model`: batch 4, contiguous tensors; q rows `queries` per sequence (packed or dense),
// keys `keys` per sequence in the given layout.
ForwardArgs call_args(const Model& model, bool packed_q, int64_t queries, KvLayout kv, int64_t page_size,
                      int64_t keys) {
  constexpr int64_t kBatch = 4;
  ForwardArgs a;
  a.dtype = model.dtype;
  a.quant = model.dtype == DType::kE4m3 ? Quant::kPerHead : Quant::kNone;
  a.num_heads = model.num_heads;
  a.num_heads_kv = model.num_heads_kv;
  a.head_dim = model.head_dim;
  a.head_dim_v = model.head_dim_v;
  a.causal = model.causal;
  a.window_left = model.window_left;
  a.window_right = model.causal && model.window_right > 0 ? 0 : model.window_right;
  a.softcap = model.softcap ? 30.0f : 0.0f;
  a.sinks = model.sinks ? reinterpret_cast<const float*>(kNotRead) : nullptr;
  a.batch = kBatch;
  if (packed_q) {
    a.cu_seqlens_q = kNotRead;
    a.seqlen_q = kBatch * queries;
    a.max_seqlen_q = queries;
  } else {
    a.seqlen_q = queries;
  }
  switch (kv) {
    case KvLayout::kPacked:
      a.cu_seqlens_k = kNotRead;
      a.seqlen_k = kBatch * keys;
      a.max_seqlen_k = keys;
      break;
    case KvLayout::kPaged:
      a.page_table = kNotRead;
      a.seqused_k = kNotRead;
      a.page_size = page_size;
      a.max_pages = (keys + page_size - 1) / page_size;
      a.page_table_stride = a.max_pages;
      a.num_pages = kBatch * a.max_pages;
      a.max_seqlen_k = a.max_pages * page_size;
      break;
    case KvLayout::kDense:
      a.seqused_k = kNotRead;
      a.seqlen_k = keys;
      break;
  }
  return a;
}

const char* kv_name(KvLayout kv) {
  switch (kv) {
    case KvLayout::kPacked: return "packed";
    case KvLayout::kPaged: return "paged";
    case KvLayout::kDense: return "dense";
  }
  return "?";
}

}  // namespace

std::vector<ManifestKernel> manifest_kernels(const json& manifest, Runtime* runtime) {
  jf::require_object(manifest, "");
  jf::reject_unknown_keys(manifest, "", {"kind", "models"});
  if (!manifest.contains("kind") ||
      jf::read_string(manifest.at("kind"), "kind", fmt::format("\"{}\"", kManifestKind)) != kManifestKind)
    invalid(fmt::format("manifest field \"kind\" must be \"{}\"", kManifestKind));
  if (!manifest.contains("models") || !manifest.at("models").is_array() || manifest.at("models").empty())
    invalid("manifest field \"models\" is missing or empty; expected a non-empty array of models");
  std::vector<ManifestKernel> kernels;
  std::set<std::string> seen;
  const auto add = [&](const json& spec, std::string what) {
    if (seen.insert(spec.dump()).second) kernels.push_back({spec, std::move(what)});
  };
  const json& models = manifest.at("models");
  for (size_t i = 0; i < models.size(); ++i) {
    const Model model = read_model(models[i], fmt::format("models[{}]", i));
    // A prefill (packed q, long) and a decode step (dense q of decode_queries rows) over each K/V layout.
    struct Call {
      bool packed_q;
      int64_t queries;
      KvLayout kv;
      int64_t page_size;
      std::string what;
    };
    std::vector<Call> calls;
    for (KvLayout kv : model.kv) {
      const std::vector<int64_t> pages = kv == KvLayout::kPaged ? model.page_sizes : std::vector<int64_t>{0};
      for (int64_t page : pages) {
        const std::string layout = kv == KvLayout::kPaged ? fmt::format("paged {}", page) : kv_name(kv);
        calls.push_back({true, kPrefillQueries, kv, page, fmt::format("prefill ({})", layout)});
        // A short prefill packs the query heads of a KV head into the M tile (the pack_gqa heuristic).
        calls.push_back({true, kShortPrefillQueries, kv, page, fmt::format("short prefill ({})", layout)});
        for (int64_t q : model.decode_queries)
          calls.push_back({false, q, kv, page, fmt::format("decode ({} quer{}, {})", q, q == 1 ? "y" : "ies", layout)});
      }
    }
    // A windowed model's calls over fewer keys than its window run the kernel without one (resolve_mask).
    const bool windowed = model.window_left >= 0 || (!model.causal && model.window_right >= 0);
    const std::vector<int64_t> key_counts = windowed ? std::vector<int64_t>{kKeys, kFewKeys}
                                                     : std::vector<int64_t>{kKeys};
    // A causal call over a dense K/V tensor of at most short_causal_max_seqlen_k keys runs the short-causal tile.
    const int64_t short_keys =
        model.causal ? short_causal_max_seqlen_k(model.dtype, static_cast<int>(model.head_dim),
                                                 static_cast<int>(model.head_dim_v))
                     : 0;
    for (const Call& c : calls) {
      std::vector<int64_t> keys_of_call = key_counts;
      if (c.kv == KvLayout::kDense && short_keys > 0) keys_of_call.push_back(short_keys);
      for (int64_t keys : keys_of_call) {
        for (int splits : {1, 2}) {
          const std::string what = fmt::format("{} {}{}{}", model.name, c.what,
                                               keys == kFewKeys    ? ", short context"
                                               : keys == short_keys ? fmt::format(", {} keys", keys)
                                                                    : "",
                                               splits > 1 ? ", split" : "");
          Spec spec;
          try {
            ForwardArgs args = call_args(model, c.packed_q, c.queries, c.kv, c.page_size, keys);
            args.num_splits = 0;
            spec = call_spec(args, splits);
          } catch (const Error& e) {
            // The call's argument errors are the manifest's: its model names the field.
            const ErrorCode code = e.code() == ErrorCode::kInvalidArgument ? ErrorCode::kInvalidSpec : e.code();
            throw Error(code, fmt::format("manifest models[{}] ({}): {}", i, what, e.what()));
          }
          add(canonical_json(spec), what);
          if (runtime != nullptr)  // none for a split or a decode step's tile (tuned.h)
            for (const Spec& tuned : tuned_specs(*runtime, spec)) add(canonical_json(tuned), what + " (tuned tile)");
          if (spec.split_kv)
            add(attention_combine::canonical_json(
                    attention_combine::default_spec(spec.out_dtype, spec.head_dim_v, kMaxSplits)),
                what + " (combine)");
        }
      }
    }
  }
  return kernels;
}

size_t warm_manifest(Runtime& runtime, const json& manifest, size_t jobs) {
  const std::vector<ManifestKernel> kernels = manifest_kernels(manifest, &runtime);
  std::atomic<size_t> compiled{0};
  std::atomic<bool> failed{false};
  std::mutex mu;  // guards error
  std::exception_ptr error;
  // Each kernel's request (generated source and key), built once by whichever of busy / work sees it first: both run
  // on the thread that took the item, and the second pass starts after the first has joined.
  std::vector<std::optional<KernelRequest>> requests(kernels.size());
  auto request = [&](size_t i) -> const KernelRequest& {
    if (!requests[i]) requests[i] = request_for(split_spec_document(kernels[i].spec));
    return *requests[i];
  };
  // A kernel another process sharing the cache directory is compiling (ranks warming one manifest) comes last.
  run_deferring(
      kernels.size(), jobs == 0 ? background_compile_jobs() : jobs,
      [&](size_t i) noexcept {
        try {
          return runtime.compiling_elsewhere(request(i));
        } catch (...) {
          return false;  // its error comes from work
        }
      },
      [&](size_t i) noexcept {
        try {
          if (!runtime.prepare(request(i)).cache_hit) ++compiled;
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!error) error = std::current_exception();  // the first failure; the others stop taking kernels
          failed = true;
        }
      },
      [&]() noexcept { return failed.load(); });
  if (error) std::rethrow_exception(error);
  return compiled;
}

}  // namespace fa3jit::attention_fwd
