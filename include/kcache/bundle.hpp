// kcache/bundle.hpp: signed bundle files that ship cache entries.
//
// A bundle is one file that holds a chosen set of entries (passport and raw
// payload each), sorted by key, with an index that allows a lookup without
// reading the whole file and a trailer that holds an Ed25519 signature over
// the rest (docs/bundle-format.md has the grammar). The same entries always
// give the same bytes.
//
// Every reader checks a bundle before it trusts anything in it, in this
// order, and refuses it as a whole at the first failure with an Error whose
// message starts "bundle <file> refused (<reason>): " (bundle_refusal()
// extracts the reason):
//   truncated, trailing-bytes, bad-header, bad-index, bad-entry  the structure
//   digest-mismatch   a byte of the header, index, passports or padding changed
//   entry-mismatch    a passport does not parse or does not match its key
//                     (check_entry_identity) or its payload size
//   unsigned          the bundle carries no signature
//   untrusted-key     signed by a key that is not trusted
//   bad-signature     the signature does not verify under its key
//   payload-mismatch  a payload does not match the SHA-256 of its passport
// The structural reasons and the mismatches have ErrorCode::corrupt;
// `unsigned` and `untrusted-key` have ErrorCode::permission_denied; a newer
// format version is ErrorCode::unsupported; a file that cannot be read has its
// errno-based code.
//
// Signatures use Ed25519 from OpenSSL's libcrypto, which is loaded with
// dlopen on the first bundle operation (a process that uses no bundle loads
// nothing new). Key files are PEM (PKCS#8 private key, SubjectPublicKeyInfo
// public key), the forms `openssl genpkey -algorithm ed25519` writes.
//
// Thread-safety: every function is thread-safe.
#pragma once

#include "kcache/artifact.hpp"
#include "kcache/error.hpp"
#include "kcache/key.hpp"
#include "kcache/passport.hpp"
#include "kcache/store.hpp"

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kcache {

inline constexpr std::uint32_t k_bundle_format_version = 1;

// An Ed25519 public key a reader trusts.
struct BundlePublicKey {
  std::array<std::uint8_t, 32> bytes{};
  std::string source; // the file it came from, for messages

  // 16 hex characters (the first 8 bytes of SHA-256 of the key): printable,
  // the same in `bundle verify`, `bundle ls` and `bundle keygen`.
  std::string id() const;
  friend bool operator==(const BundlePublicKey& a, const BundlePublicKey& b) noexcept {
    return a.bytes == b.bytes;
  }
};

// Reads a public key file (PEM "PUBLIC KEY" of an Ed25519 key). Returns
// not_found / io when it cannot be read, invalid_argument naming `path` when
// it is not an Ed25519 public key.
Result<BundlePublicKey> read_bundle_public_key(const std::filesystem::path& path);

// Reads every file of `paths` (read_bundle_public_key); fails at the first
// that cannot be read.
Result<std::vector<BundlePublicKey>>
read_bundle_public_keys(const std::vector<std::filesystem::path>& paths);

// Writes a new Ed25519 key pair: the private key to `private_key_file`
// (mode 0600) and the public key to `public_key_file` (mode 0644). Refuses to
// replace either file (invalid_argument naming it). Returns the public key.
// Uses getrandom(2) for the seed; needs libcrypto.so.3 (toolkit_missing-like
// `unsupported` error naming the package when it cannot be loaded).
Result<BundlePublicKey> generate_bundle_keys(const std::filesystem::path& private_key_file,
                                             const std::filesystem::path& public_key_file);

struct BundleCreateOptions {
  // The private key that signs the bundle (PEM "PRIVATE KEY", mode 0600 or
  // stricter: a key file other users can read is refused). Empty: the bundle
  // is written unsigned (readers refuse it: `unsigned`).
  std::filesystem::path sign_key_file;
};

// What create_bundle wrote.
struct BundleSummary {
  std::uint64_t entries = 0;
  std::uint64_t payload_bytes = 0;
  std::uint64_t file_bytes = 0;
  std::string digest_hex; // the bundle digest the signature covers (docs/bundle-format.md)
  std::string signer_id;  // BundlePublicKey::id() of the signer; empty when unsigned
};

// Writes `artifacts` (in any order; one entry per key) as a bundle at `path`,
// atomically (a temporary file beside it, renamed into place). Every artifact
// is checked first (Artifact::verify): one that does not verify fails the
// whole call with `corrupt` naming its key, and nothing is written. Two keys
// twice: the second is dropped. Returns what was written.
Result<BundleSummary> create_bundle(const std::filesystem::path& path,
                                    std::vector<Artifact> artifacts,
                                    const BundleCreateOptions& options = {});

// One entry of a bundle, as `bundle ls` shows it.
struct BundleEntryInfo {
  Key key;
  Passport passport;
};

// What a reader found in a bundle.
struct BundleInfo {
  std::filesystem::path file;
  std::uint64_t file_bytes = 0;
  std::uint64_t payload_bytes = 0;
  std::string digest_hex;
  bool is_signed = false;
  std::string signer_id; // id of the key in the trailer (trusted or not); empty when unsigned
  std::vector<BundleEntryInfo> entries; // sorted by key
};

// Who a reader trusts.
struct BundleTrust {
  std::vector<BundlePublicKey> keys;
};

// Reads the structure of a bundle and checks its digest and every passport's
// identity, without judging its signature: for `bundle ls`. Errors as above
// (never `unsigned`, `untrusted-key`, `bad-signature` or `payload-mismatch`).
Result<BundleInfo> inspect_bundle(const std::filesystem::path& path);

// Checks everything (see the list above, payloads included) against `trust`.
// Returns what it found on success.
Result<BundleInfo> verify_bundle(const std::filesystem::path& path, const BundleTrust& trust);

// What install_bundle did.
struct BundleInstallReport {
  std::uint64_t entries = 0;         // entries in the bundle
  std::uint64_t stored = 0;          // written by this install
  std::uint64_t already_present = 0; // the target had them
  std::uint64_t bytes = 0;           // payload bytes of the entries stored
};

// Called once per entry after the target accepted it (`outcome` is stored,
// already_present or queued), in key order. A failure stops the install and
// is returned (entries already installed stay). `bundle install --pin` pins
// here.
using BundleInstalled = std::function<Result<void>(const Artifact& artifact, PutOutcome outcome)>;

// Checks the whole bundle as verify_bundle does, and only then puts every
// entry into `target` (Store::fill: the payloads were hashed moments ago).
// A bundle that fails any check is refused as a whole and nothing is
// written. Returns the counts, or the first failure of `target` or
// `installed` (entries before it stay installed).
Result<BundleInstallReport> install_bundle(const std::filesystem::path& path,
                                           const BundleTrust& trust, Store& target,
                                           const BundleInstalled& installed = {});

// The reason token of a bundle refusal ("untrusted-key"), or empty when
// `error` is not one.
std::string_view bundle_refusal(const Error& error) noexcept;

} // namespace kcache
