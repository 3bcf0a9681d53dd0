// tests/unit/bundle/bundle_test_util.hpp: artifacts, keys and byte surgery
// for the bundle tests.
#pragma once

#include "bundle/bundle_format.hpp"
#include "bundle/bundle_keys.hpp"
#include "bundle/ed25519.hpp"
#include "kcache/blob.hpp"
#include "kcache/bundle.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"
#include "util/sha256.hpp"

#include <filesystem>
#include <gtest/gtest.h>
#include <string>
#include <vector>

namespace kcache::test {

// Three entries of different shapes: an empty payload, one of exactly the
// alignment (no room for pad1 without a new block) and a text one.
inline std::vector<Artifact> sample_artifacts() {
  std::vector<Artifact> out;
  for (auto [kind, content] :
       {std::pair<const char*, std::string>{"ptx", ".version 8.0\n.target sm_90\n"},
        {"cubin", std::string(4096, 'c')},
        {"blob", std::string()}}) {
    auto a = make_blob(kind, content);
    EXPECT_TRUE(a.has_value());
    out.push_back(std::move(*a));
  }
  return out;
}

// Writes a key pair (`key` and `key`.pub) and a bundle of `items` signed with
// it at `file`; returns the trust that accepts it.
inline BundleTrust make_signed_bundle(const std::filesystem::path& key,
                                      const std::filesystem::path& file,
                                      const std::vector<Artifact>& items) {
  auto pub = generate_bundle_keys(key, key.string() + ".pub");
  EXPECT_TRUE(pub.has_value()) << pub.error().describe();
  auto made = create_bundle(file, items, BundleCreateOptions{key});
  EXPECT_TRUE(made.has_value()) << made.error().describe();
  return pub ? BundleTrust{{*pub}} : BundleTrust{};
}

// Recomputes the digest and the signature of a bundle whose bytes a test
// edited, so that only the edit (not the signature) can make it fail.
inline void resign(const std::filesystem::path& file, const std::filesystem::path& key_file) {
  using namespace bundle; // NOLINT(google-build-using-namespace)
  std::string bytes = read_file(file);
  const std::uint64_t trailer = load_u64(bytes.data() + k_header_trailer_offset);
  const std::uint64_t count = load_u64(bytes.data() + k_header_count);
  util::Sha256 digest;
  std::uint64_t at = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    const char* r = bytes.data() + k_header_size + i * k_record_size;
    const std::uint64_t off = load_u64(r + k_record_payload_offset);
    digest.update(bytes.data() + at, off - at);
    at = off + load_u64(r + k_record_payload_size);
  }
  digest.update(bytes.data() + at, trailer - at);
  const auto d = digest.finish();
  std::copy(d.begin(), d.end(), bytes.data() + trailer + k_trailer_digest);
  auto key = read_private_key(key_file);
  ASSERT_TRUE(key.has_value()) << key.error().describe();
  std::string message(k_signed_prefix);
  message.append(reinterpret_cast<const char*>(d.data()), d.size());
  auto sig = ed25519_sign(key->seed, message);
  ASSERT_TRUE(sig.has_value());
  std::copy(sig->begin(), sig->end(), bytes.data() + trailer + k_trailer_signature);
  write_file(file, bytes);
}

} // namespace kcache::test
