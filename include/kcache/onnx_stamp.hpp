// kcache/onnx_stamp.hpp: passports stamped into ONNX models.
//
// An ONNX artifact carries its passport in the model's `metadata_props`
// (stamp format v1, docs/plans.md):
//
//   kcache.compiled = "v1"                 the stamp format
//   kcache.key      = HEX64                the key of the artifact (plan entry key)
//   kcache.content  = HEX64                SHA-256 of the model serialised (deterministically)
//                                          without any kcache.* property
//   kcache.producer = "kcache <version>"
//   kcache.label.<name> = <value>          one per label (plan labels)
//
// Stamping removes every kcache.* property, adds the ones above in this order
// (labels sorted by name) and rewrites the file atomically; stamping again
// with the same key and labels changes nothing (the file is not rewritten).
// A model whose stamp is missing, names another key, or whose content no
// longer matches `kcache.content` is refused by load_onnx_model() and
// install_onnx().
//
// This API lives in the separate `kcache_onnx` library (it links Debian's
// libonnx_proto and libprotobuf); the core `kcache` library does not need it.
//
// Thread-safety: free functions, thread-safe (each call owns its model).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kcache/error.hpp"
#include "kcache/key.hpp"
#include "kcache/orchestrator.hpp"

namespace kcache {

inline constexpr const char* k_onnx_stamp_format = "v1";

struct OnnxStamp {
  std::string compiled;        // "v1"
  std::string key;             // 64 hex
  std::string content_sha256;  // 64 hex
  std::string producer;
  std::map<std::string, std::string> labels;
};

enum class StampChange { stamped, unchanged };

// Stamps the model at `path` with `key` and `labels`. Returns `unchanged`
// when the same stamp is already there (nothing is written). Failure:
// corrupt (not an ONNX model), io.
Result<StampChange> stamp_onnx_file(const std::filesystem::path& path, const Key& key,
                                    const std::map<std::string, std::string>& labels = {});

// Reads the stamp of the model at `path`: std::nullopt when it has no
// kcache.* properties. Failure: corrupt (not an ONNX model), not_found, io.
Result<std::optional<OnnxStamp>> read_onnx_stamp(const std::filesystem::path& path);

// The content digest of the model bytes in `model` (kcache.content).
Result<std::string> onnx_content_sha256(const std::string& model_bytes);

// Checks the stamp of the model at `path`: present, format v1, content
// digest matches, and (when `expected_key` is given) the key matches.
// Returns the stamp, or corrupt with a message that says what is wrong and
// how to fix it ("run kcache stamp" / "rebuild the entry").
Result<OnnxStamp> verify_onnx_stamp(const std::filesystem::path& path, const std::optional<Key>& expected_key);

// Reads the model for use after verify_onnx_stamp(); the bytes returned are
// exactly those that were verified. Refuses (corrupt) an unstamped or
// mismatched model.
Result<std::string> load_onnx_model(const std::filesystem::path& path, const std::optional<Key>& expected_key);

// Verifies `source` and copies it atomically to `destination`; refuses
// (corrupt) an unstamped or mismatched model and leaves `destination` as it was.
Result<void> install_onnx(const std::filesystem::path& source, const std::filesystem::path& destination,
                          const std::optional<Key>& expected_key);

// The orchestrator hook for kind "onnx": stamps freshly built models (key,
// labels) and checks stamps before a model is reused or published.
std::shared_ptr<const ArtifactFinisher> make_onnx_stamp_finisher();

}  // namespace kcache
