#include "kcache/artifact.hpp"

#include <chrono>

#include "util/sha256.hpp"

namespace kcache {

Artifact Artifact::make(const KeyBuilder& key, std::string kind, Payload payload,
                        Producer producer, Target target) {
  Artifact a;
  a.passport.key = key.key();
  a.passport.key_record = key.record();
  a.passport.kind = std::move(kind);
  a.passport.producer = std::move(producer);
  a.passport.target = std::move(target);
  a.passport.payload_size = payload.size();
  a.passport.payload_sha256 = util::sha256_hex(payload);
  a.passport.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
  a.payload = std::move(payload);
  return a;
}

Result<void> Artifact::verify() const {
  if (auto shape = verify_shape(); !shape) {
    return shape;
  }
  if (auto identity = check_entry_identity(passport.key, passport); !identity) {
    return identity;
  }
  if (util::sha256_hex(payload) != passport.payload_sha256) {
    return make_error(ErrorCode::corrupt, "payload SHA-256 does not match the passport");
  }
  return {};
}

Result<void> Artifact::verify_shape() const {
  const Passport& p = passport;
  if (p.format != k_passport_format_version) {
    return make_error(ErrorCode::corrupt, "passport format version is not supported");
  }
  if (!is_valid_kind(p.kind)) {
    return make_error(ErrorCode::corrupt, "passport kind is malformed");
  }
  if (p.payload_size != payload.size()) {
    return make_error(ErrorCode::corrupt, "payload is " + std::to_string(payload.size()) +
                                              " bytes, passport says " +
                                              std::to_string(p.payload_size));
  }
  return {};
}

}  // namespace kcache
