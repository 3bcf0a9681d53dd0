// tests/unit/bundle/bundle_fuzz.hpp: what must hold for any bytes given to
// the bundle readers, shared by the seeded mutation loop in CTest
// (test_bundle_fuzz.cpp) and the libFuzzer target (tests/fuzz/fuzz_bundle.cpp).
#pragma once

#include "bundle/bundle_format.hpp"
#include "kcache/bundle.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kcache::test {

// The byte ranges of `bundle` that `bundle ls` does not judge: its payloads
// (read from its own index) and, for a signed bundle, the public key and
// signature of its trailer. `bundle` must be a valid bundle.
inline std::vector<std::pair<std::uint64_t, std::uint64_t>> unjudged_ranges(std::string_view bundle) {
  using namespace kcache::bundle; // NOLINT(google-build-using-namespace)
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  const std::uint64_t trailer = load_u64(bundle.data() + k_header_trailer_offset);
  if (load_u32(bundle.data() + trailer + k_trailer_scheme) == k_scheme_ed25519) {
    out.emplace_back(trailer + k_trailer_public_key, trailer + k_trailer_size);
  }
  const std::uint64_t count = load_u64(bundle.data() + k_header_count);
  for (std::uint64_t i = 0; i < count; ++i) {
    const char* r = bundle.data() + k_header_size + i * k_record_size;
    const std::uint64_t at = load_u64(r + k_record_payload_offset);
    out.emplace_back(at, at + load_u64(r + k_record_payload_size));
  }
  return out;
}

// Checks what the readers said about `file`, which holds `mutant`, made from
// the valid bundle `original` (empty: no original, e.g. libFuzzer's own
// inputs). Returns an empty string when every rule holds, else the first
// broken one:
// - every failure is a refusal naming its reason, or a file that cannot be
//   read as such: never a crash, never an error of another kind;
// - verify accepts only the original bytes: one encoding per set of entries,
//   and a signature that covers the rest;
// - inspect (no signature, no payload hash) accepts only bytes whose
//   metadata is the original's: a difference may lie in payloads, or in the
//   signer's key and signature, alone.
inline std::string check_bundle_readers(const std::filesystem::path& file, std::string_view mutant,
                                        std::string_view original, const BundleTrust& trust) {
  const auto judge = [&](const Result<BundleInfo>& r, std::string_view who) -> std::string {
    if (r) {
      return {};
    }
    if (bundle_refusal(r.error()).empty()) {
      return std::string(who) + " failed without a refusal: " + r.error().describe();
    }
    return {};
  };
  const auto listed = inspect_bundle(file);
  const auto verified = verify_bundle(file, trust);
  for (const auto& [r, who] : {std::pair{&listed, "inspect"}, std::pair{&verified, "verify"}}) {
    if (auto broken = judge(*r, who); !broken.empty()) {
      return broken;
    }
  }
  if (original.empty()) {
    return {};
  }
  if (verified && mutant != original) {
    return "verify accepted bytes that are not the original bundle's";
  }
  if (listed && mutant != original) {
    if (mutant.size() != original.size()) {
      return "inspect accepted a bundle of another size";
    }
    const auto payloads = unjudged_ranges(original);
    for (std::size_t i = 0; i < mutant.size(); ++i) {
      if (mutant[i] == original[i]) {
        continue;
      }
      bool in_payload = false;
      for (const auto& [begin, end] : payloads) {
        in_payload = in_payload || (i >= begin && i < end);
      }
      if (!in_payload) {
        return "inspect accepted a change at byte " + std::to_string(i) + ", outside the payloads and the signature";
      }
    }
  }
  return {};
}

} // namespace kcache::test
