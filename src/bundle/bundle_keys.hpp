// bundle/bundle_keys.hpp: Ed25519 key files (PEM) for bundles.
//
// Key file grammar (the forms `openssl genpkey -algorithm ed25519` and
// `openssl pkey -pubout` write, so either tool can read the other's keys):
//
//   private-key-file := "-----BEGIN PRIVATE KEY-----" LF base64(P) LF "-----END PRIVATE KEY-----"
//   LF public-key-file  := "-----BEGIN PUBLIC KEY-----" LF base64(S) LF "-----END PUBLIC KEY-----"
//   LF P := 30 2e 02 01 00 30 05 06 03 2b 65 70 04 22 04 20 || seed (32 bytes)     PKCS#8, RFC 8410
//   S := 30 2a 30 05 06 03 2b 65 70 03 21 00 || public key (32 bytes)          SPKI, RFC 8410
//
// Readers accept the base64 split over several lines and CRLF line ends.
// A private key file that other users can read (mode & 0077) is refused.
//
// Thread-safety: every function is thread-safe.
#pragma once

#include "bundle/ed25519.hpp"
#include "kcache/bundle.hpp"

#include <filesystem>

namespace kcache::bundle {

// A private key read from its file. Never printed.
struct PrivateKey {
  Ed25519Seed seed{};
  BundlePublicKey public_key;
};

// Reads a private key file (grammar above; util/input_file.hpp: a symlink is
// followed, a FIFO is refused without blocking). Returns
// not_found / permission_denied / io when it cannot be read, invalid_argument
// naming `path` when it is not an Ed25519 private key (a public key given
// instead is named as such) or other users can read it.
Result<PrivateKey> read_private_key(const std::filesystem::path& path);

// The id of a public key (BundlePublicKey::id()).
std::string key_id(const Ed25519PublicKey& key);

} // namespace kcache::bundle
