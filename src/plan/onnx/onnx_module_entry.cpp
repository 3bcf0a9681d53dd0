// The kcache ONNX module (kcache_onnx.so): the kcache_onnx library behind the
// C interface of onnx_module_abi.h, for the kcache command to dlopen.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "kcache/onnx_stamp.hpp"
#include "plan/onnx/onnx_module_abi.h"

namespace kcache {

namespace {

using nlohmann::json;

char* to_document(const json& doc) {
  const std::string text = doc.dump();
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out != nullptr) {
    std::memcpy(out, text.c_str(), text.size() + 1);
  }
  return out;
}

char* failure(const Error& e) {
  return to_document({{"ok", false}, {"code", static_cast<int>(e.code)}, {"message", e.message}});
}

char* success(json value) { return to_document({{"ok", true}, {"value", std::move(value)}}); }

json stamp_json(const OnnxStamp& s) {
  return {{"compiled", s.compiled}, {"key", s.key}, {"content", s.content_sha256}, {"producer", s.producer},
          {"labels", s.labels}};
}

// Runs `body`, turning a C++ exception into an error document: nothing may
// unwind into the caller, which may not share this module's C++ runtime.
template <typename F>
char* guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    return failure(Error{ErrorCode::internal, std::string("ONNX module: ") + e.what(), {}});
  } catch (...) {
    return failure(Error{ErrorCode::internal, "ONNX module: unknown exception", {}});
  }
}

char* stamp(const char* path, const char* key_hex, const char* labels_json) {
  return guarded([&] {
    auto key = Key::parse(key_hex != nullptr ? key_hex : "");
    if (!key) {
      return failure(key.error());
    }
    const auto labels = json::parse(labels_json != nullptr ? labels_json : "{}").get<std::map<std::string, std::string>>();
    auto done = stamp_onnx_file(path, *key, labels);
    if (!done) {
      return failure(done.error());
    }
    return success(*done == StampChange::stamped ? "stamped" : "unchanged");
  });
}

char* read(const char* path) {
  return guarded([&] {
    auto stamp = read_onnx_stamp(path);
    if (!stamp) {
      return failure(stamp.error());
    }
    return success(*stamp ? stamp_json(**stamp) : json(nullptr));
  });
}

char* verify(const char* path, const char* key_hex) {
  return guarded([&] {
    std::optional<Key> key;
    if (key_hex != nullptr) {
      auto parsed = Key::parse(key_hex);
      if (!parsed) {
        return failure(parsed.error());
      }
      key = *parsed;
    }
    auto stamp = verify_onnx_stamp(path, key);
    if (!stamp) {
      return failure(stamp.error());
    }
    return success(stamp_json(*stamp));
  });
}

char* content_sha256(const char* bytes, std::size_t size) {
  return guarded([&] {
    auto digest = onnx_content_sha256(std::string(bytes, size));
    if (!digest) {
      return failure(digest.error());
    }
    return success(*digest);
  });
}

void release(char* document) { std::free(document); }

const kcache_onnx_module k_module{KCACHE_ONNX_MODULE_ABI, KCACHE_VERSION, stamp, read, verify, content_sha256, release};

}  // namespace

}  // namespace kcache

extern "C" __attribute__((visibility("default"))) const kcache_onnx_module* kcache_onnx_module_v1() {
  return &kcache::k_module;
}
