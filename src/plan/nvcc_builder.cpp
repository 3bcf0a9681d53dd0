// The "nvcc" builder: kernel sets compiled by the CUDA toolkit's nvcc to a
// cubin, fatbin or PTX for the host's SM.
#include <chrono>
#include <unistd.h>

#include <cstdint>
#include <mutex>

#include "kcache/builder.hpp"
#include "plan/process.hpp"

namespace kcache {

namespace {

class NvccBuilder final : public Builder {
 public:
  explicit NvccBuilder(std::filesystem::path cuda_home) : m_cuda_home(std::move(cuda_home)) {}

  std::string_view name() const noexcept override { return "nvcc"; }
  std::string default_kind() const override { return "cubin"; }

  Result<void> validate(const PlanEntry& entry) const override {
    if (entry.inputs.empty()) {
      return make_error(ErrorCode::invalid_argument,
                        "entry '" + entry.name + "' uses the nvcc builder but has no inputs; add inputs = [\"kernels.cu\"]");
    }
    if (!entry.kind.empty() && entry.kind != "cubin" && entry.kind != "fatbin" && entry.kind != "ptx") {
      return make_error(ErrorCode::invalid_argument,
                        "entry '" + entry.name + "': the nvcc builder makes kind cubin, fatbin or ptx, not '" + entry.kind +
                            "'; change kind");
    }
    if (!entry.command.empty()) {
      return make_error(ErrorCode::invalid_argument,
                        "entry '" + entry.name + "': the nvcc builder takes flags, not a command; move the arguments to flags");
    }
    return {};
  }

  void add_key_fields(const PlanEntry& entry, const HostFingerprint& /*host*/, KeyBuilder& key) const override {
    (void)entry;
    key.add("nvcc.version", nvcc_version());
  }

  Result<BuildOutput> build(const BuildRequest& request) const override {
    const std::string& sm = request.host.sm;
    if (sm.empty() || sm == "na") {
      return make_error(ErrorCode::invalid_argument,
                        "the nvcc builder needs the host SM, which is unknown here (no GPU found); pass --host sm=87");
    }
    std::vector<std::string> argv{nvcc_path().string(), "-" + request.kind, "-arch=sm_" + sm, "-o", request.output.string()};
    for (const auto& f : request.entry.flags) {
      argv.push_back(f);
    }
    for (const auto& in : request.entry.inputs) {
      argv.push_back(in.string());
    }
    auto ran = plan::run_process(argv, request.work_dir, request.log_file,
                                 std::chrono::duration_cast<std::chrono::milliseconds>(request.entry.timeout));
    if (!ran) {
      if (ran.error().code == ErrorCode::not_found) {
        return make_error(ErrorCode::toolkit_missing, "nvcc not found at " + nvcc_path().string() +
                                                          "; install the CUDA toolkit or set KCACHE_CUDA_HOME");
      }
      return tl::unexpected(ran.error());
    }
    std::string log = plan::read_log_tail(request.log_file, std::size_t{64} << 10);
    if (!ran->ok()) {
      return make_error(ran->timed_out ? ErrorCode::timeout : ErrorCode::compile_failed,
                        "nvcc " + ran->describe(request.entry.timeout), std::move(log));
    }
    return BuildOutput{Producer{"nvcc", nvcc_version()}, std::move(log)};
  }

 private:
  std::filesystem::path nvcc_path() const { return resolve_cuda_home(m_cuda_home) / "bin" / "nvcc"; }

  // The last line of `nvcc --version` ("Build cuda_13.0.r13.0/compiler.36424714_0"),
  // asked once per builder: it identifies the exact compiler build.
  std::string nvcc_version() const {
    std::call_once(m_version_once, [this] {
      std::error_code ec;
      const auto dir = std::filesystem::temp_directory_path(ec);
      const auto log = dir / ("kcache-nvcc-version-" + std::to_string(::getpid()) + "-" +
                              std::to_string(reinterpret_cast<std::uintptr_t>(this)) + ".txt");
      std::filesystem::remove(log, ec);
      auto ran = plan::run_process({nvcc_path().string(), "--version"}, dir, log, std::chrono::seconds(30));
      std::string text = ran && ran->ok() ? plan::read_log_tail(log, 4096) : std::string();
      std::filesystem::remove(log, ec);
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
        text.pop_back();
      }
      const std::size_t nl = text.rfind('\n');
      m_version = text.empty() ? "missing" : text.substr(nl == std::string::npos ? 0 : nl + 1);
    });
    return m_version;
  }

  std::filesystem::path m_cuda_home;
  mutable std::once_flag m_version_once;
  mutable std::string m_version;
};

}  // namespace

std::unique_ptr<Builder> make_nvcc_builder(std::filesystem::path cuda_home) {
  return std::make_unique<NvccBuilder>(std::move(cuda_home));
}

}  // namespace kcache
