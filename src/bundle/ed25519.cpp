// Ed25519 through a dlopened libcrypto.so.3 (see ed25519.hpp for why).
#include "bundle/ed25519.hpp"

#include "util/dl_symbols.hpp"

#include <memory>
#include <openssl/evp.h>
#include <string>

namespace kcache::bundle {

namespace {

// The EVP functions kcache calls; the types come from OpenSSL's header, the
// code from the library opened at run time.
struct CryptoApi {
  decltype(&::EVP_PKEY_new_raw_private_key) new_private = nullptr;
  decltype(&::EVP_PKEY_new_raw_public_key) new_public = nullptr;
  decltype(&::EVP_PKEY_get_raw_public_key) get_public = nullptr;
  decltype(&::EVP_PKEY_free) pkey_free = nullptr;
  decltype(&::EVP_MD_CTX_new) ctx_new = nullptr;
  decltype(&::EVP_MD_CTX_free) ctx_free = nullptr;
  decltype(&::EVP_DigestSignInit) sign_init = nullptr;
  decltype(&::EVP_DigestSign) sign = nullptr;
  decltype(&::EVP_DigestVerifyInit) verify_init = nullptr;
  decltype(&::EVP_DigestVerify) verify = nullptr;
  std::string error; // why it could not be loaded; empty when loaded
};

const CryptoApi& crypto_api() {
  static const CryptoApi api = [] {
    CryptoApi a;
    util::DlSymbols lib("libcrypto.so.3", "for bundle signatures (install Debian's libssl3)");
    lib.resolve(a.new_private, "EVP_PKEY_new_raw_private_key");
    lib.resolve(a.new_public, "EVP_PKEY_new_raw_public_key");
    lib.resolve(a.get_public, "EVP_PKEY_get_raw_public_key");
    lib.resolve(a.pkey_free, "EVP_PKEY_free");
    lib.resolve(a.ctx_new, "EVP_MD_CTX_new");
    lib.resolve(a.ctx_free, "EVP_MD_CTX_free");
    lib.resolve(a.sign_init, "EVP_DigestSignInit");
    lib.resolve(a.sign, "EVP_DigestSign");
    lib.resolve(a.verify_init, "EVP_DigestVerifyInit");
    lib.resolve(a.verify, "EVP_DigestVerify");
    a.error = lib.error();
    return a;
  }();
  return api;
}

Result<const CryptoApi*> loaded_api() {
  const CryptoApi& api = crypto_api();
  if (!api.error.empty()) {
    return make_error(ErrorCode::unsupported, api.error);
  }
  return &api;
}

struct PkeyDeleter {
  void operator()(EVP_PKEY* p) const noexcept { crypto_api().pkey_free(p); }
};
struct CtxDeleter {
  void operator()(EVP_MD_CTX* p) const noexcept { crypto_api().ctx_free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyDeleter>;
using CtxPtr = std::unique_ptr<EVP_MD_CTX, CtxDeleter>;

const auto* bytes_of(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

} // namespace

Result<Ed25519PublicKey> ed25519_public_key(const Ed25519Seed& seed) {
  auto api = loaded_api();
  if (!api) {
    return tl::unexpected(api.error());
  }
  PkeyPtr key((*api)->new_private(EVP_PKEY_ED25519, nullptr, seed.data(), seed.size()));
  Ed25519PublicKey pub{};
  std::size_t size = pub.size();
  if (!key || (*api)->get_public(key.get(), pub.data(), &size) != 1 || size != pub.size()) {
    return make_error(ErrorCode::internal, "libcrypto could not derive an Ed25519 public key");
  }
  return pub;
}

Result<Ed25519Signature> ed25519_sign(const Ed25519Seed& seed, std::string_view message) {
  auto api = loaded_api();
  if (!api) {
    return tl::unexpected(api.error());
  }
  PkeyPtr key((*api)->new_private(EVP_PKEY_ED25519, nullptr, seed.data(), seed.size()));
  CtxPtr ctx((*api)->ctx_new());
  Ed25519Signature sig{};
  std::size_t size = sig.size();
  if (!key || !ctx || (*api)->sign_init(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      (*api)->sign(ctx.get(), sig.data(), &size, bytes_of(message), message.size()) != 1 ||
      size != sig.size()) {
    return make_error(ErrorCode::internal, "libcrypto could not make an Ed25519 signature");
  }
  return sig;
}

Result<bool> ed25519_verify(const Ed25519PublicKey& key, std::string_view message,
                            const Ed25519Signature& signature) {
  auto api = loaded_api();
  if (!api) {
    return tl::unexpected(api.error());
  }
  PkeyPtr pkey((*api)->new_public(EVP_PKEY_ED25519, nullptr, key.data(), key.size()));
  if (!pkey) {
    return false; // not a valid public key: nothing verifies under it
  }
  CtxPtr ctx((*api)->ctx_new());
  if (!ctx || (*api)->verify_init(ctx.get(), nullptr, nullptr, nullptr, pkey.get()) != 1) {
    return make_error(ErrorCode::internal, "libcrypto could not set up an Ed25519 verification");
  }
  return (*api)->verify(ctx.get(), signature.data(), signature.size(), bytes_of(message),
                        message.size()) == 1;
}

} // namespace kcache::bundle
