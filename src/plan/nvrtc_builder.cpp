// The "nvrtc" builder: a CUDA C++ kernel set compiled in process through
// kcache's JIT path (compile_uncached: NVRTC loaded with dlopen) to a cubin or
// PTX for the host's SM.
#include <fstream>
#include <sstream>

#include "kcache/builder.hpp"
#include "kcache/compiler.hpp"

namespace kcache {

namespace {

Result<std::string> read_source(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return make_error(ErrorCode::not_found, "cannot read " + path.string());
  }
  std::ostringstream s;
  s << in.rdbuf();
  return std::move(s).str();
}

class NvrtcBuilder final : public Builder {
 public:
  std::string_view name() const noexcept override { return "nvrtc"; }
  std::string default_kind() const override { return "cubin"; }

  Result<void> validate(const PlanEntry& entry) const override {
    if (entry.inputs.size() != 1) {
      return make_error(ErrorCode::invalid_argument,
                        "entry '" + entry.name + "': the nvrtc builder compiles exactly one source file; give inputs = [\"kernels.cu\"] "
                        "(headers are found through #include)");
    }
    if (!entry.kind.empty() && entry.kind != "cubin" && entry.kind != "ptx" && entry.kind != "ltoir") {
      return make_error(ErrorCode::invalid_argument,
                        "entry '" + entry.name + "': the nvrtc builder makes kind cubin, ptx or ltoir, not '" + entry.kind + "'");
    }
    if (!entry.command.empty()) {
      return make_error(ErrorCode::invalid_argument,
                        "entry '" + entry.name + "': the nvrtc builder takes flags, not a command; move the options to flags");
    }
    return {};
  }

  void add_key_fields(const PlanEntry& entry, const HostFingerprint& host, KeyBuilder& key) const override {
    // The JIT key covers the toolkit version asked of NVRTC and every header the source can reach.
    auto request = make_request(entry, host, entry.kind.empty() ? default_kind() : entry.kind);
    if (!request) {
      key.add("nvrtc.key", "unavailable: " + request.error().message);
      return;
    }
    auto derived = derive_key(*request);
    key.add("nvrtc.key", derived ? derived->key().hex() : "unavailable: " + derived.error().message);
  }

  Result<BuildOutput> build(const BuildRequest& r) const override {
    if (r.host.sm.empty() || r.host.sm == "na") {
      return make_error(ErrorCode::invalid_argument,
                        "the nvrtc builder needs the host SM, which is unknown here (no GPU found); pass --host sm=87");
    }
    auto request = make_request(r.entry, r.host, r.kind);
    if (!request) {
      return tl::unexpected(request.error());
    }
    auto artifact = compile_uncached(*request);
    if (!artifact) {
      return tl::unexpected(artifact.error());
    }
    std::ofstream out(r.output, std::ios::binary | std::ios::trunc);
    out.write(artifact->payload.data(), static_cast<std::streamsize>(artifact->payload.size()));
    out.close();
    if (!out) {
      return make_error(ErrorCode::io, "cannot write " + r.output.string());
    }
    return BuildOutput{artifact->passport.producer, artifact->passport.log};
  }

 private:
  static Result<CompileRequest> make_request(const PlanEntry& entry, const HostFingerprint& host, const std::string& kind) {
    if (entry.inputs.empty()) {
      return make_error(ErrorCode::invalid_argument, "no source file");
    }
    auto source = read_source(entry.inputs.front());
    if (!source) {
      return tl::unexpected(source.error());
    }
    CompileRequest request;
    request.backend = "nvrtc";
    request.name = entry.inputs.front().filename().string();
    request.source = std::move(*source);
    request.source_path = entry.inputs.front().string();
    request.target_kind = kind;
    request.options.push_back((kind == "ptx" ? "-arch=compute_" : "-arch=sm_") + host.sm);
    if (kind == "ltoir") {
      request.options.back() = "-arch=sm_" + host.sm;
      request.options.push_back("-dlto");
    }
    for (const auto& f : entry.flags) {
      request.options.push_back(f);
    }
    return request;
  }
};

}  // namespace

std::unique_ptr<Builder> make_nvrtc_builder() { return std::make_unique<NvrtcBuilder>(); }

}  // namespace kcache
