// Harness: the cubin cache's entry reader (jit/cubin_cache.cpp). The input becomes the file
// <dir>/<key>.cubin-entry of a private cache directory, then CubinCache::get_or_compile(key, compile) runs with
// a compile callback that returns one fixed kernel.
//
// Promises checked (docs/reliability.md, docs/kernel-design.md §7): no input crashes; an entry is served iff
// an independent reading of the documented format finds it complete, for this key, with a SHA-256 over key
// and payload that verifies; a served entry carries exactly the payload's kernel; anything else is a miss
// that compiles once and republishes an entry that the next process reads back. list() agrees.
//
// Input: byte 0 picks the mode. Even: the rest is the file, byte for byte. Odd: the rest drives a
// FuzzedDataProvider that builds a well-formed entry and then damages it one way (truncate, flip a byte,
// relabel the key, change the version, append, re-sign a damaged payload), so the checksum-verified paths
// are reached without the fuzzer having to find a SHA-256. Bit 1 of byte 0 plants the file as a symlink.
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "fuzz_util.h"
#include "jit/cubin_cache.h"

using namespace fa3jit;

namespace {

constexpr std::string_view kMagic = "FA3JITC1";
constexpr uint32_t kVersion = 3;

const std::string& key_a() {
  static const std::string k = sha256_hex("fa3jit fuzz key A");
  return k;
}
const std::string& key_b() {
  static const std::string k = sha256_hex("fa3jit fuzz key B");
  return k;
}

CompiledKernel fixed_kernel() {
  CompiledKernel k;
  k.kernel_name = "fa3jit_fuzz_fixed_kernel";
  k.cubin = std::string("\x7f" "ELF fixed cubin", 15);
  k.ptx = ".entry fa3jit_fuzz_fixed_kernel";
  k.entries = {{"fa3jit_fuzz_fixed_kernel", {}}};
  k.log = "fixed";
  k.compile_ms = 1.5;
  return k;
}

bool same_report(const ResourceReport& a, const ResourceReport& b) {
  return a.registers == b.registers && a.spill_store_bytes == b.spill_store_bytes &&
         a.spill_load_bytes == b.spill_load_bytes && a.stack_frame_bytes == b.stack_frame_bytes &&
         a.static_smem_bytes == b.static_smem_bytes && a.barriers == b.barriers;
}

bool same_kernel(const CompiledKernel& a, const CompiledKernel& b) {
  if (a.entries.size() != b.entries.size()) return false;
  for (size_t i = 0; i < a.entries.size(); ++i)
    if (a.entries[i].name != b.entries[i].name || !same_report(a.entries[i].report, b.entries[i].report)) return false;
  return a.kernel_name == b.kernel_name && a.cubin == b.cubin && a.ptx == b.ptx && a.log == b.log &&
         std::memcmp(&a.compile_ms, &b.compile_ms, sizeof(double)) == 0 && same_report(a.report, b.report);
}

// ---- the entry format, written down a second time (cubin_cache.cpp's header comment) ---------------------
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_str(std::string& out, std::string_view s) {
  put_le(out, s.size(), 8);
  out.append(s);
}
std::string raw_sha256(const std::string& data) {
  const std::string hex = sha256_hex(data);
  std::string raw;
  for (size_t i = 0; i < hex.size(); i += 2) raw.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return raw;
}
std::string payload_of(const CompiledKernel& k) {
  std::string p;
  put_str(p, k.kernel_name);
  put_le(p, k.entries.size(), 4);
  for (const CompiledEntry& e : k.entries) {
    put_str(p, e.name);
    for (int v : {e.report.registers, e.report.spill_store_bytes, e.report.spill_load_bytes, e.report.stack_frame_bytes,
                  e.report.static_smem_bytes, e.report.barriers})
      put_le(p, static_cast<uint32_t>(v), 4);
  }
  put_str(p, k.cubin);
  put_str(p, k.ptx);
  put_str(p, k.log);
  uint64_t bits = 0;
  std::memcpy(&bits, &k.compile_ms, sizeof(bits));
  put_le(p, bits, 8);
  return p;
}
std::string entry_of(const std::string& key, const std::string& payload) {
  std::string out(kMagic);
  put_le(out, kVersion, 4);
  put_str(out, key);
  out += raw_sha256(key + payload);
  put_le(out, payload.size(), 8);
  return out + payload;
}

struct Cursor {
  std::string_view in;
  size_t pos = 0;
  bool ok = true;
  uint64_t le(int bytes) {
    if (!ok || in.size() - pos < static_cast<size_t>(bytes)) return ok = false, 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(in[pos + i])} << (8 * i);
    pos += bytes;
    return v;
  }
  std::string_view take(uint64_t n) {
    if (!ok || in.size() - pos < n) return ok = false, std::string_view();
    std::string_view s = in.substr(pos, n);
    pos += n;
    return s;
  }
  std::string str() { return std::string(take(le(8))); }
};

// The kernel an intact entry for `key` holds, else nothing.
std::optional<CompiledKernel> reference_decode(std::string_view bytes, const std::string& key) {
  Cursor c{bytes};
  if (c.take(kMagic.size()) != kMagic || c.le(4) != kVersion) return std::nullopt;
  const uint64_t key_len = c.le(8);
  if (!c.ok || key_len > 1024 || c.take(key_len) != key) return std::nullopt;
  const std::string_view checksum = c.take(32);
  const uint64_t payload_len = c.le(8);
  if (!c.ok || payload_len != bytes.size() - c.pos) return std::nullopt;
  const std::string payload(c.take(payload_len));
  if (raw_sha256(key + payload) != checksum) return std::nullopt;
  Cursor p{payload};
  CompiledKernel k;
  k.kernel_name = p.str();
  const uint64_t num_entries = p.le(4);
  if (!p.ok || num_entries == 0 || num_entries > 64) return std::nullopt;
  for (uint64_t i = 0; i < num_entries; ++i) {
    CompiledEntry e;
    e.name = p.str();
    for (int* v : {&e.report.registers, &e.report.spill_store_bytes, &e.report.spill_load_bytes,
                   &e.report.stack_frame_bytes, &e.report.static_smem_bytes, &e.report.barriers})
      *v = static_cast<int>(static_cast<uint32_t>(p.le(4)));
    if (!p.ok || e.name.empty()) return std::nullopt;
    k.entries.push_back(std::move(e));
  }
  k.report = combined_report(k.entries);
  k.cubin = p.str();
  k.ptx = p.str();
  k.log = p.str();
  const uint64_t bits = p.le(8);
  std::memcpy(&k.compile_ms, &bits, sizeof(bits));
  if (!p.ok || p.pos != payload.size() || k.kernel_name.empty()) return std::nullopt;
  return k;
}

// A well-formed entry built from the input, then damaged in one way the input chooses.
std::string structured_entry(FuzzedDataProvider& in) {
  CompiledKernel k;
  k.kernel_name = in.ConsumeRandomLengthString(80);
  k.cubin = in.ConsumeRandomLengthString(256);
  k.ptx = in.ConsumeRandomLengthString(64);
  const int num_entries = in.ConsumeIntegralInRange<int>(0, 4);  // 0: a payload the reader must refuse
  for (int i = 0; i < num_entries; ++i) {
    CompiledEntry e;
    e.name = in.ConsumeRandomLengthString(40);
    for (int* v : {&e.report.registers, &e.report.spill_store_bytes, &e.report.spill_load_bytes,
                   &e.report.stack_frame_bytes, &e.report.static_smem_bytes, &e.report.barriers})
      *v = in.ConsumeIntegral<int>();
    k.entries.push_back(std::move(e));
  }
  k.log = in.ConsumeRandomLengthString(64);
  k.compile_ms = in.ConsumeFloatingPoint<double>();
  std::string payload = payload_of(k);
  const std::string& key = in.ConsumeBool() ? key_a() : key_b();
  std::string entry = entry_of(key, payload);
  switch (in.ConsumeIntegralInRange<int>(0, 6)) {
    case 0: break;  // intact
    case 1: entry.resize(in.ConsumeIntegralInRange<size_t>(0, entry.size())); break;  // torn write
    case 2: {  // bit rot
      const size_t at = in.ConsumeIntegralInRange<size_t>(0, entry.size() - 1);
      entry[at] = static_cast<char>(entry[at] ^ in.ConsumeIntegralInRange<int>(1, 255));
      break;
    }
    case 3: {  // relabelled: the other key written over the header's key, checksum left as it was
      const std::string& other = key == key_a() ? key_b() : key_a();
      entry.replace(kMagic.size() + 4 + 8, other.size(), other);
      break;
    }
    case 4: entry.replace(kMagic.size(), 4, std::string(4, static_cast<char>(in.ConsumeIntegral<uint8_t>()))); break;
    case 5: entry += in.ConsumeRandomLengthString(16); break;  // trailing garbage
    case 6: {  // a damaged payload signed again: only the payload's own framing can reject it
      if (!payload.empty()) {
        const size_t at = in.ConsumeIntegralInRange<size_t>(0, payload.size() - 1);
        payload[at] = static_cast<char>(payload[at] ^ in.ConsumeIntegralInRange<int>(1, 255));
      }
      entry = entry_of(key, payload);
      break;
    }
  }
  return entry;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  FUZZ_REQUIRE(out.good(), "cannot write %s", path.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  set_log_level(LogLevel::kQuiet);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::ScratchDir scratch;
  static const std::string dir = scratch.path() + "/cache";
  static const std::string side = scratch.path() + "/elsewhere";
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::string bytes;
  if (mode & 1) {
    FuzzedDataProvider in(data + 1, size - 1);
    bytes = structured_entry(in);
  } else {
    bytes.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  }
  const bool as_symlink = (mode & 2) != 0;

  // An empty directory per input: no slot (a new CubinCache), entry or temp file of an earlier input can answer.
  // The directory is created once, 0700 as a user's cache would be, and emptied before each input (cheaper than
  // removing and creating it, which long runs feel).
  static const bool created = [] {
    CubinCache probe(dir);
    FUZZ_REQUIRE(probe.persistent(), "cache directory %s is not usable", dir.c_str());
    return true;
  }();
  (void)created;
  std::error_code ec;
  std::vector<std::filesystem::path> leftovers;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) leftovers.push_back(entry.path());
  for (const auto& leftover : leftovers) std::filesystem::remove(leftover, ec);
  FUZZ_REQUIRE(std::filesystem::is_empty(dir, ec), "cannot empty %s", dir.c_str());
  const std::string key = key_a();
  const std::string path = dir + "/" + key + ".cubin-entry";
  if (as_symlink) {
    write_file(side, bytes);
    FUZZ_REQUIRE(::symlink(side.c_str(), path.c_str()) == 0, "symlink failed");
  } else {
    write_file(path, bytes);
  }
  const std::optional<CompiledKernel> expected = as_symlink ? std::nullopt : reference_decode(bytes, key);

  int compiles = 0;
  const auto compile = [&] {
    ++compiles;
    return fixed_kernel();
  };
  CubinCache cache(dir);
  CacheLookup r;
  try {
    r = cache.get_or_compile(key, compile);
  } catch (const Error& e) {
    FUZZ_REQUIRE(false, "get_or_compile threw: %s", e.what());
  }
  FUZZ_REQUIRE(r.kernel != nullptr, "no kernel");
  if (expected) {
    FUZZ_REQUIRE(r.from_disk && compiles == 0, "an intact entry was not served (compiles %d)", compiles);
    FUZZ_REQUIRE(same_kernel(*r.kernel, *expected), "served kernel differs from the entry's payload");
  } else {
    FUZZ_REQUIRE(!r.from_disk && compiles == 1, "a damaged or foreign entry was served (kernel %s)",
                 r.kernel->kernel_name.c_str());
    FUZZ_REQUIRE(same_kernel(*r.kernel, fixed_kernel()), "a miss did not return the compiled kernel");
  }

  // What is on disk now is either the intact input or the republished fixed kernel; both read back.
  const std::vector<CacheEntryInfo> listed = cache.list();
  FUZZ_REQUIRE(listed.size() == 1 && listed[0].key == key, "list() shows %zu entries", listed.size());
  FUZZ_REQUIRE(listed[0].kernel_name == r.kernel->kernel_name, "list() names %s, get served %s",
               listed[0].kernel_name.c_str(), r.kernel->kernel_name.c_str());
  CubinCache next_process(dir);
  const CacheLookup again = next_process.get_or_compile(key, compile);
  FUZZ_REQUIRE(again.from_disk && same_kernel(*again.kernel, *r.kernel), "the entry did not read back");
  return 0;
}
