#include "cli/onnx_module.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include <nlohmann/json.hpp>

#include "plan/onnx/onnx_module_abi.h"
#include "util/install_location.hpp"

#ifndef KCACHE_ONNX_MODULE_RELPATH
#error "KCACHE_ONNX_MODULE_RELPATH (the module's path relative to the kcache executable's directory) is not defined"
#endif

namespace kcache::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path default_module_path() {
  if (const char* env = std::getenv("KCACHE_ONNX_MODULE"); env != nullptr && *env != '\0') {
    return env;
  }
  // Beside the command's installation: <libdir>/kcache/, or the wheel's site-packages/kcache/.
  const fs::path installed = util::installed_file(KCACHE_ONNX_MODULE_RELPATH);
  return installed.empty() ? fs::path(KCACHE_ONNX_MODULE_RELPATH).filename()  // left to the loader's search path
                           : installed;
}

}  // namespace

Result<OnnxModule*> OnnxModule::load() {
  const fs::path path = default_module_path();
  const auto unavailable = [&](const std::string& why) {
    return make_error(ErrorCode::unsupported,
                      "ONNX support is not available: " + why +
                          ". It comes from the kcache ONNX module, installed beside kcache in <libdir>/kcache/ (from "
                          "the wheel: site-packages/kcache/); reinstall kcache or set KCACHE_ONNX_MODULE to its path");
  };
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return unavailable("cannot load " + path.string() + " (" + (why != nullptr ? why : "unknown error") + ")");
  }
  auto entry = reinterpret_cast<kcache_onnx_module_entry_fn>(::dlsym(handle, KCACHE_ONNX_MODULE_ENTRY));
  const kcache_onnx_module* api = entry != nullptr ? entry() : nullptr;
  if (api == nullptr || api->abi != KCACHE_ONNX_MODULE_ABI) {
    ::dlclose(handle);
    return unavailable(path.string() + " is not a kcache ONNX module of interface version " +
                       std::to_string(KCACHE_ONNX_MODULE_ABI));
  }
  if (std::string(api->version) != KCACHE_VERSION) {
    ::dlclose(handle);
    return unavailable(path.string() + " is from kcache " + api->version + ", this is kcache " + KCACHE_VERSION);
  }
  // The module stays loaded, and this object alive, for the life of the process.
  return new OnnxModule(api, path);
}

namespace {

// Decodes one result document; `value` gets the "value" member on success.
Result<json> decode(const kcache_onnx_module* api, char* document) {
  if (document == nullptr) {
    return make_error(ErrorCode::internal, "the ONNX module returned nothing (out of memory?)");
  }
  json doc = json::parse(document, nullptr, /*allow_exceptions=*/false);
  api->release(document);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("ok")) {
    return make_error(ErrorCode::internal, "the ONNX module returned a malformed result");
  }
  if (!doc["ok"].get<bool>()) {
    const int code = doc.value("code", static_cast<int>(ErrorCode::internal));
    return make_error(static_cast<ErrorCode>(code), doc.value("message", std::string("ONNX module error")));
  }
  return doc["value"];
}

OnnxStamp stamp_from(const json& v) {
  OnnxStamp s;
  s.compiled = v.value("compiled", std::string());
  s.key = v.value("key", std::string());
  s.content_sha256 = v.value("content", std::string());
  s.producer = v.value("producer", std::string());
  if (v.contains("labels")) {
    s.labels = v["labels"].get<std::map<std::string, std::string>>();
  }
  return s;
}

class LazyStampFinisher final : public ArtifactFinisher {
 public:
  Result<void> finish(const fs::path& staged, const PlanEntry& entry, const Key& key) const override {
    auto module = OnnxModule::get();
    if (!module) {
      return tl::unexpected(module.error());
    }
    std::map<std::string, std::string> labels = entry.labels;
    labels["plan.entry"] = entry.name;
    labels["plan.precision"] = entry.precision;
    auto done = (*module)->stamp(staged, key, labels);
    if (!done) {
      return tl::unexpected(done.error());
    }
    return {};
  }
  Result<void> check(const fs::path& file, const Key& key) const override {
    auto module = OnnxModule::get();
    if (!module) {
      return tl::unexpected(module.error());
    }
    auto ok = (*module)->verify(file, key);
    if (!ok) {
      return tl::unexpected(ok.error());
    }
    return {};
  }
};

}  // namespace

Result<const OnnxModule*> OnnxModule::get() {
  static std::once_flag once;
  static Result<OnnxModule*> module = make_error(ErrorCode::internal, "not loaded");
  std::call_once(once, [] { module = load(); });
  if (!module) {
    return tl::unexpected(module.error());
  }
  return *module;
}

Result<StampChange> OnnxModule::stamp(const fs::path& path, const Key& key,
                                      const std::map<std::string, std::string>& labels) const {
  const std::string labels_json = json(labels).dump();
  auto v = decode(m_api, m_api->stamp(path.c_str(), key.hex().c_str(), labels_json.c_str()));
  if (!v) {
    return tl::unexpected(v.error());
  }
  return *v == "stamped" ? StampChange::stamped : StampChange::unchanged;
}

Result<std::optional<OnnxStamp>> OnnxModule::read(const fs::path& path) const {
  auto v = decode(m_api, m_api->read(path.c_str()));
  if (!v) {
    return tl::unexpected(v.error());
  }
  if (v->is_null()) {
    return std::optional<OnnxStamp>();
  }
  return std::optional<OnnxStamp>(stamp_from(*v));
}

Result<OnnxStamp> OnnxModule::verify(const fs::path& path, const std::optional<Key>& expected_key) const {
  const std::string hex = expected_key ? expected_key->hex() : std::string();
  auto v = decode(m_api, m_api->verify(path.c_str(), expected_key ? hex.c_str() : nullptr));
  if (!v) {
    return tl::unexpected(v.error());
  }
  return stamp_from(*v);
}

Result<std::string> OnnxModule::content_sha256(const std::string& model_bytes) const {
  auto v = decode(m_api, m_api->content_sha256(model_bytes.data(), model_bytes.size()));
  if (!v || !v->is_string()) {
    return v ? Result<std::string>(make_error(ErrorCode::internal, "the ONNX module returned no digest"))
             : Result<std::string>(tl::unexpected(v.error()));
  }
  return v->get<std::string>();
}

std::shared_ptr<const ArtifactFinisher> OnnxModule::stamp_finisher() { return std::make_shared<LazyStampFinisher>(); }

}  // namespace kcache::cli
