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
#include "util/hex.hpp"
#include "util/sha256.hpp"

#include <fcntl.h>
#include <filesystem>
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>
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

// Signs `digest` with `key_file` into the trailer at `trailer` (scheme, public key, signature).
inline void sign_trailer(char* trailer, const util::Digest256& digest, const std::filesystem::path& key_file) {
  using namespace bundle; // NOLINT(google-build-using-namespace)
  auto key = read_private_key(key_file);
  ASSERT_TRUE(key.has_value()) << key.error().describe();
  std::string message(k_signed_prefix);
  message.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  auto sig = ed25519_sign(key->seed, message);
  ASSERT_TRUE(sig.has_value());
  store_u32(trailer + k_trailer_scheme, k_scheme_ed25519);
  std::copy(key->public_key.bytes.begin(), key->public_key.bytes.end(), trailer + k_trailer_public_key);
  std::copy(sig->begin(), sig->end(), trailer + k_trailer_signature);
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
  sign_trailer(bytes.data() + trailer, d, key_file);
  write_file(file, bytes);
}

// A test with its own directory, a key pair (key(), key().pub) and
// bundle(): the sample artifacts, signed with it; `trust` accepts it.
class SignedBundleTest : public ::testing::Test {
protected:
  void SetUp() override {
    artifacts = sample_artifacts();
    trust = make_signed_bundle(key(), bundle(), artifacts);
    ASSERT_EQ(trust.keys.size(), 1U);
  }
  std::filesystem::path key() const { return m_dir.path() / "ci.key"; }
  std::filesystem::path bundle() const { return m_dir.path() / "kernels.kcb"; }
  std::filesystem::path dir() const { return m_dir.path(); }

  TempDir m_dir;
  BundleTrust trust;
  std::vector<Artifact> artifacts;
};

// One entry of a bundle written byte by byte (write_raw_bundle): any
// passport text, and a payload given as bytes or, when `payload` is empty and
// `zeros` is not, as that many zero bytes left as a hole in the file (a large
// payload that costs neither memory nor disk).
struct RawEntry {
  Key key;
  std::string passport;
  std::string payload;
  std::uint64_t zeros = 0;      // with `payload` empty: that many zero bytes, left as a hole
  std::uint64_t generated = 0;  // with `payload` empty: that many bytes of generated_chunk(), written
  std::uint64_t size() const { return payload.empty() ? zeros + generated : payload.size(); }
};

// The 1 MiB of bytes a `generated` payload repeats (not zeros: real pages on disk and in memory).
inline const std::string& generated_chunk() {
  static const std::string chunk = [] {
    std::string c(1 << 20, '\0');
    for (std::size_t i = 0; i < c.size(); ++i) {
      c[i] = static_cast<char>('a' + (i * 7) % 26);
    }
    return c;
  }();
  return chunk;
}

// The SHA-256 (32 raw bytes) of `n` zero bytes, or of `n` generated bytes, hashed a MiB at a time.
inline std::array<std::uint8_t, 32> sha256_of_repeated(std::uint64_t n, bool generated) {
  static const std::string zeros(1 << 20, '\0');
  const std::string& chunk = generated ? generated_chunk() : zeros;
  util::Sha256 sha;
  for (std::uint64_t done = 0; done < n;) {
    const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), n - done));
    sha.update(std::string_view(chunk).substr(0, k));
    done += k;
  }
  return sha.finish();
}

// Writes `entries` (in the order given: sort them by key for a valid bundle)
// laid out exactly as bundle_format.hpp says, digested and signed with
// `key_file` (empty: unsigned), whatever the passports hold: a test's own
// encoder, so that a reader can be shown bytes `create_bundle` never writes.
inline void write_raw_bundle(const std::filesystem::path& file, const std::vector<RawEntry>& entries,
                             const std::filesystem::path& key_file) {
  using namespace bundle; // NOLINT(google-build-using-namespace)
  // `meta`: every byte of the file but the payloads, in file order; `at`: the file offset.
  std::string meta(k_header_size + k_record_size * entries.size(), '\0');
  std::vector<std::pair<std::uint64_t, const RawEntry*>> payloads;
  std::uint64_t at = meta.size();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const RawEntry& e = entries[i];
    char* r = meta.data() + k_header_size + i * k_record_size;  // written before `meta` grows
    std::copy(e.key.bytes().begin(), e.key.bytes().end(), r);
    const std::uint64_t payload = payload_start(at + e.passport.size());
    const std::uint64_t end = payload + e.size();
    store_u64(r + k_record_passport_offset, at);
    store_u64(r + k_record_passport_size, e.passport.size());
    store_u64(r + k_record_payload_offset, payload);
    store_u64(r + k_record_payload_size, e.size());
    meta += e.passport;
    meta.append(static_cast<std::size_t>(payload - at - e.passport.size()), '\0');
    meta.append(static_cast<std::size_t>(next_entry_start(end) - end), '\0');
    payloads.emplace_back(payload, &e);
    at = next_entry_start(end);
  }
  const std::uint64_t trailer = at;
  std::memcpy(meta.data(), k_magic.data(), k_magic.size());
  store_u32(meta.data() + k_header_version, k_bundle_format_version);
  store_u32(meta.data() + k_header_alignment, k_alignment);
  store_u64(meta.data() + k_header_count, entries.size());
  store_u64(meta.data() + k_header_index_offset, k_header_size);
  store_u64(meta.data() + k_header_file_size, trailer + k_trailer_size);
  store_u64(meta.data() + k_header_trailer_offset, trailer);
  const auto d = util::sha256(meta);
  std::string t(k_trailer_size, '\0');
  std::memcpy(t.data(), k_trailer_magic.data(), k_trailer_magic.size());
  std::copy(d.begin(), d.end(), t.data() + k_trailer_digest);
  if (!key_file.empty()) {
    sign_trailer(t.data(), d, key_file);
  }
  // Lay the file out: metadata pieces between the payloads.
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << file;
  std::uint64_t meta_at = 0;   // position in `meta`
  std::uint64_t file_at = 0;   // position in the file
  const auto put = [&](const char* p, std::size_t n) {
    ASSERT_EQ(::pwrite(fd, p, n, static_cast<off_t>(file_at)), static_cast<ssize_t>(n));
    file_at += n;
  };
  for (const auto& [offset, e] : payloads) {
    const std::uint64_t before = offset - file_at;  // metadata up to this payload
    put(meta.data() + meta_at, static_cast<std::size_t>(before));
    meta_at += before;
    if (!e->payload.empty()) {
      put(e->payload.data(), e->payload.size());
    } else if (e->generated > 0) {
      for (std::uint64_t left = e->generated; left > 0;) {
        const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(generated_chunk().size(), left));
        put(generated_chunk().data(), k);
        left -= k;
      }
    } else {
      file_at += e->zeros;  // a hole
    }
  }
  put(meta.data() + meta_at, static_cast<std::size_t>(meta.size() - meta_at));
  put(t.data(), t.size());
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(file_at)), 0);
  ::close(fd);
}

// A raw entry for `a`, with its passport as create_bundle writes it.
inline RawEntry raw_entry(const Artifact& a) {
  return RawEntry{a.passport.key, a.passport.to_json(), std::string(a.payload.view()), 0, 0};
}

} // namespace kcache::test
