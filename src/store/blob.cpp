#include "kcache/blob.hpp"

#include <chrono>
#include <utility>

#include "util/hex.hpp"

namespace kcache {

#ifndef KCACHE_VERSION
#define KCACHE_VERSION "0.0.0"
#endif

KeyBuilder blob_key(std::string_view kind, std::string_view content) {
  KeyBuilder kb("blob");
  kb.add("kind", kind);
  kb.add_content("content", content);
  return kb;
}

Result<Artifact> make_blob(std::string kind, std::string content, std::map<std::string, std::string> labels) {
  if (!is_valid_kind(kind)) {
    return make_error(ErrorCode::invalid_argument,
                      "kind '" + kind + "' is not valid: use 1 to 32 of a-z, 0-9, '_' and '-' (e.g. cubin, engine)");
  }
  for (const auto& [name, value] : labels) {
    if (name.empty()) {
      return make_error(ErrorCode::invalid_argument, "a label needs a name: write name=value");
    }
  }
  const KeyBuilder key = blob_key(kind, content);
  Artifact a = Artifact::make(key, std::move(kind), std::move(content), Producer{"kcache", KCACHE_VERSION});
  a.passport.labels = std::move(labels);
  return a;
}

Result<Passport> make_blob_passport(std::string kind, std::uint64_t size, const std::array<std::uint8_t, 32>& sha256,
                                    std::map<std::string, std::string> labels) {
  if (!is_valid_kind(kind)) {
    return make_error(ErrorCode::invalid_argument,
                      "kind '" + kind + "' is not valid: use 1 to 32 of a-z, 0-9, '_' and '-' (e.g. cubin, engine)");
  }
  for (const auto& [name, value] : labels) {
    if (name.empty()) {
      return make_error(ErrorCode::invalid_argument, "a label needs a name: write name=value");
    }
  }
  KeyBuilder key("blob");
  key.add("kind", kind);
  key.add_digest("content", sha256);
  Passport p;
  p.key = key.key();
  p.key_record = key.record();
  p.kind = std::move(kind);
  p.producer = Producer{"kcache", KCACHE_VERSION};
  p.payload_size = size;
  p.payload_sha256 = util::to_hex(sha256.data(), sha256.size());
  p.created_unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  p.labels = std::move(labels);
  return p;
}

}  // namespace kcache
