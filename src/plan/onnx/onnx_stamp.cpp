// Passports in ONNX metadata_props (see kcache/onnx_stamp.hpp). Built into the
// separate kcache_onnx library, which links libonnx_proto and libprotobuf.
#include "kcache/onnx_stamp.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/onnx_pb.h>

#include "util/atomic_write.hpp"
#include "util/sha256.hpp"

namespace kcache {

namespace {

namespace fs = std::filesystem;
constexpr std::string_view k_prefix = "kcache.";
constexpr std::string_view k_label_prefix = "kcache.label.";

Result<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return make_error(ErrorCode::not_found, "cannot read " + path.string());
  }
  std::ostringstream s;
  s << in.rdbuf();
  return std::move(s).str();
}

Result<onnx::ModelProto> parse_model(const std::string& bytes, const fs::path& path) {
  onnx::ModelProto model;
  if (bytes.empty() || !model.ParseFromString(bytes) || !model.has_graph()) {
    return make_error(ErrorCode::corrupt, path.string() + " is not an ONNX model (it does not parse as a ModelProto with a graph)");
  }
  return model;
}

std::string serialize(const onnx::ModelProto& model) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  model.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

void strip_stamp(onnx::ModelProto& model) {
  auto* props = model.mutable_metadata_props();
  for (int i = props->size() - 1; i >= 0; --i) {
    if (props->Get(i).key().rfind(k_prefix, 0) == 0) {
      props->DeleteSubrange(i, 1);
    }
  }
}

std::string content_of(onnx::ModelProto model) {
  strip_stamp(model);
  return util::sha256_hex(serialize(model));
}

std::optional<OnnxStamp> stamp_of(const onnx::ModelProto& model) {
  OnnxStamp stamp;
  bool any = false;
  for (const auto& p : model.metadata_props()) {
    const std::string& k = p.key();
    if (k.rfind(k_prefix, 0) != 0) {
      continue;
    }
    any = true;
    if (k == "kcache.compiled") {
      stamp.compiled = p.value();
    } else if (k == "kcache.key") {
      stamp.key = p.value();
    } else if (k == "kcache.content") {
      stamp.content_sha256 = p.value();
    } else if (k == "kcache.producer") {
      stamp.producer = p.value();
    } else if (k.rfind(k_label_prefix, 0) == 0) {
      stamp.labels[k.substr(k_label_prefix.size())] = p.value();
    }
  }
  if (!any) {
    return std::nullopt;
  }
  return stamp;
}

// Replaces the model at `path` with `bytes` atomically where it really lives:
// through a symlink, its target (the link stays a link, never replaced by a
// regular file), with the file's mode kept; fsynced before the rename (a
// model is kept). util::write_file_atomically: a fresh temporary file beside
// it (O_EXCL, never through a symlink planted there), renamed over it.
Result<void> write_atomically(const fs::path& path, const std::string& bytes) {
  std::error_code ec;
  const bool link = fs::is_symlink(path, ec);  // a missing path sets ec too: it is no link
  ec.clear();
  const fs::path target = link ? fs::canonical(path, ec) : path;
  if (ec) {
    return make_error(ErrorCode::io, "cannot follow the symlink " + path.string() + ": " + ec.message());
  }
  struct stat st {};
  const mode_t mode = ::stat(target.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644;
  return util::write_file_atomically(target, bytes, mode, util::FileSync::fsync);
}

Result<OnnxStamp> verify_bytes(const std::string& bytes, const fs::path& path, const std::optional<Key>& expected_key) {
  auto model = parse_model(bytes, path);
  if (!model) {
    return tl::unexpected(model.error());
  }
  const auto stamp = stamp_of(*model);
  if (!stamp || stamp->compiled.empty()) {
    return make_error(ErrorCode::corrupt, "refusing " + path.string() +
                                              ": the ONNX model has no kcache stamp (kcache.compiled); build it through a "
                                              "plan or run `kcache stamp` on it");
  }
  if (stamp->compiled != k_onnx_stamp_format) {
    return make_error(ErrorCode::corrupt, "refusing " + path.string() + ": unknown stamp format '" + stamp->compiled +
                                              "' (this kcache reads v1); re-stamp it with this kcache");
  }
  if (stamp->content_sha256 != content_of(*model)) {
    return make_error(ErrorCode::corrupt, "refusing " + path.string() +
                                              ": the model changed after it was stamped (kcache.content does not match); "
                                              "rebuild the entry or re-stamp it");
  }
  if (expected_key && stamp->key != expected_key->hex()) {
    return make_error(ErrorCode::corrupt, "refusing " + path.string() + ": its stamp names key " + stamp->key.substr(0, 16) +
                                              "…, not the expected " + expected_key->hex().substr(0, 16) +
                                              "…; rebuild the entry for these inputs");
  }
  return *stamp;
}

class OnnxStampFinisher final : public ArtifactFinisher {
 public:
  Result<void> finish(const fs::path& staged, const PlanEntry& entry, const Key& key) const override {
    std::map<std::string, std::string> labels = entry.labels;
    labels["plan.entry"] = entry.name;
    labels["plan.precision"] = entry.precision;
    auto done = stamp_onnx_file(staged, key, labels);
    if (!done) {
      return tl::unexpected(done.error());
    }
    return {};
  }
  Result<void> check(const fs::path& file, const Key& key) const override {
    auto ok = verify_onnx_stamp(file, key);
    if (!ok) {
      return tl::unexpected(ok.error());
    }
    return {};
  }
};

}  // namespace

Result<std::string> onnx_content_sha256(const std::string& model_bytes) {
  auto model = parse_model(model_bytes, "model");
  if (!model) {
    return tl::unexpected(model.error());
  }
  return content_of(*model);
}

Result<StampChange> stamp_onnx_file(const fs::path& path, const Key& key, const std::map<std::string, std::string>& labels) {
  auto bytes = read_file(path);
  if (!bytes) {
    return tl::unexpected(bytes.error());
  }
  auto model = parse_model(*bytes, path);
  if (!model) {
    return tl::unexpected(model.error());
  }
  const std::string content = content_of(*model);
  strip_stamp(*model);
  auto add = [&](const std::string& k, const std::string& v) {
    auto* p = model->add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  };
  add("kcache.compiled", k_onnx_stamp_format);
  add("kcache.key", key.hex());
  add("kcache.content", content);
  add("kcache.producer", std::string("kcache ") + KCACHE_VERSION);
  for (const auto& [k, v] : labels) {
    add(std::string(k_label_prefix) + k, v);
  }
  const std::string stamped = serialize(*model);
  if (stamped == *bytes) {
    return StampChange::unchanged;
  }
  if (auto ok = write_atomically(path, stamped); !ok) {
    return tl::unexpected(ok.error());
  }
  return StampChange::stamped;
}

Result<std::optional<OnnxStamp>> read_onnx_stamp(const fs::path& path) {
  auto bytes = read_file(path);
  if (!bytes) {
    return tl::unexpected(bytes.error());
  }
  auto model = parse_model(*bytes, path);
  if (!model) {
    return tl::unexpected(model.error());
  }
  return stamp_of(*model);
}

Result<OnnxStamp> verify_onnx_stamp(const fs::path& path, const std::optional<Key>& expected_key) {
  auto bytes = read_file(path);
  if (!bytes) {
    return tl::unexpected(bytes.error());
  }
  return verify_bytes(*bytes, path, expected_key);
}

Result<std::string> load_onnx_model(const fs::path& path, const std::optional<Key>& expected_key) {
  auto bytes = read_file(path);
  if (!bytes) {
    return tl::unexpected(bytes.error());
  }
  if (auto ok = verify_bytes(*bytes, path, expected_key); !ok) {
    return tl::unexpected(ok.error());
  }
  return bytes;
}

Result<void> install_onnx(const fs::path& source, const fs::path& destination, const std::optional<Key>& expected_key) {
  auto bytes = load_onnx_model(source, expected_key);
  if (!bytes) {
    return tl::unexpected(bytes.error());
  }
  return write_atomically(destination, *bytes);
}

std::shared_ptr<const ArtifactFinisher> make_onnx_stamp_finisher() { return std::make_shared<OnnxStampFinisher>(); }

}  // namespace kcache
