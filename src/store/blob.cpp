#include "kcache/blob.hpp"

#include <utility>

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

}  // namespace kcache
