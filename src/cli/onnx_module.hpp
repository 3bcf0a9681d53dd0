// cli/onnx_module.hpp: ONNX support for the kcache command, loaded on demand.
//
// The kcache command does not link protobuf: the commands that read or write
// ONNX models load the kcache ONNX module (kcache_onnx.so, the kcache_onnx
// library behind the C interface of plan/onnx/onnx_module_abi.h) with dlopen
// the first time they need it. Every other command starts without it.
//
// The module is looked for at $KCACHE_ONNX_MODULE, else at its installed
// place relative to the kcache executable (<prefix>/<libdir>/kcache/, the same
// layout in the build tree). It must come from the same kcache version.
//
// Thread-safety: module() loads once (thread-safe); the calls are thread-safe.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kcache/error.hpp"
#include "kcache/key.hpp"
#include "kcache/onnx_stamp.hpp"
#include "kcache/orchestrator.hpp"

struct kcache_onnx_module;

namespace kcache::cli {

class OnnxModule {
 public:
  // The loaded module, or `unsupported` with a message that
  // names the path tried and how to point kcache at the module.
  static Result<const OnnxModule*> get();

  // As stamp_onnx_file(), read_onnx_stamp(), verify_onnx_stamp() and
  // onnx_content_sha256() in kcache/onnx_stamp.hpp.
  Result<StampChange> stamp(const std::filesystem::path& path, const Key& key,
                            const std::map<std::string, std::string>& labels) const;
  Result<std::optional<OnnxStamp>> read(const std::filesystem::path& path) const;
  Result<OnnxStamp> verify(const std::filesystem::path& path, const std::optional<Key>& expected_key) const;
  Result<std::string> content_sha256(const std::string& model_bytes) const;

  std::filesystem::path path() const { return m_path; }

  // The plan finisher for kind "onnx" (as make_onnx_stamp_finisher()); it
  // loads the module only when a plan has an ONNX entry to stamp or check.
  static std::shared_ptr<const ArtifactFinisher> stamp_finisher();

 private:
  static Result<OnnxModule*> load();
  OnnxModule(const kcache_onnx_module* api, std::filesystem::path path) : m_api(api), m_path(std::move(path)) {}
  const kcache_onnx_module* m_api;
  std::filesystem::path m_path;
};

}  // namespace kcache::cli
