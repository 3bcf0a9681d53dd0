// bundle/ed25519.hpp: Ed25519 signatures (RFC 8032) through OpenSSL.
//
// libcrypto.so.3 is opened with dlopen on the first call (util::DlSymbols),
// not linked: the kcache command links libcrypto's static archive for
// SHA-256 only, and pulling in EVP's signature machinery would add
// relocations to every process's start-up (docs/performance.md, "Process
// start"). A process that never signs or verifies a bundle loads nothing.
//
// Thread-safety: every function is thread-safe (the library is loaded once,
// under a function-local static).
#pragma once

#include "kcache/error.hpp"

#include <array>
#include <cstdint>
#include <string_view>

namespace kcache::bundle {

using Ed25519Seed = std::array<std::uint8_t, 32>; // the private key
using Ed25519PublicKey = std::array<std::uint8_t, 32>;
using Ed25519Signature = std::array<std::uint8_t, 64>;

// The public key of `seed`. Fails (`unsupported`) only when libcrypto cannot be loaded.
Result<Ed25519PublicKey> ed25519_public_key(const Ed25519Seed& seed);

// Signs `message` with `seed`.
Result<Ed25519Signature> ed25519_sign(const Ed25519Seed& seed, std::string_view message);

// True when `signature` is a valid signature of `message` under `key`;
// false when it is not (or `key` is not a valid point). Fails only when
// libcrypto cannot be loaded.
Result<bool> ed25519_verify(const Ed25519PublicKey& key, std::string_view message,
                            const Ed25519Signature& signature);

} // namespace kcache::bundle
