// kcache nvcc ARGS... and the compiler launcher (`kcache /path/to/nvcc
// ARGS...`, CMAKE_CUDA_COMPILER_LAUNCHER=kcache, or kcache installed under the
// name nvcc): nvcc compiles through the cache (docs/nvcc.md).
//
// main.cpp sends these here before any option parsing: every argument after
// the nvcc path (or after `nvcc`) is nvcc's.
#include "cli/cmd_nvcc.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cache/store_warnings.hpp"
#include "cli/compile_cli_support.hpp"
#include "kcache/cache.hpp"
#include "kcache/nvcc_launcher.hpp"
#include "nvcc/child_process.hpp"

namespace kcache::cli {

namespace {

bool is_executable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {};
  struct stat sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// The first `nvcc` on PATH that is not this program (kcache installed as nvcc).
std::string nvcc_on_path() {
  const char* env_path = std::getenv("PATH");
  const std::string list = env_path != nullptr ? env_path : "";
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(':', start), list.size());
    const std::string dir = end > start ? list.substr(start, end - start) : ".";
    const std::string candidate = dir + "/nvcc";
    if (is_executable(candidate) && !same_file(candidate, "/proc/self/exe")) {
      return candidate;
    }
    start = end + 1;
  }
  return {};
}

// The nvcc `kcache nvcc` runs: the configured toolkit's (cuda_home), then
// $CUDA_HOME's and $CUDA_PATH's, then the first on PATH, then /usr/local/cuda's.
std::string find_nvcc() {
  for (const char* var : {"KCACHE_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"}) {
    if (const char* home = std::getenv(var); home != nullptr && *home != '\0') {
      const std::string p = std::string(home) + "/bin/nvcc";
      if (is_executable(p)) {
        return p;
      }
    }
  }
  if (auto p = nvcc_on_path(); !p.empty()) {
    return p;
  }
  return is_executable("/usr/local/cuda/bin/nvcc") ? "/usr/local/cuda/bin/nvcc" : std::string();
}

int exec_unchanged(const std::string& nvcc, const std::vector<std::string>& args) {
  std::vector<std::string> argv{nvcc};
  argv.insert(argv.end(), args.begin(), args.end());
  std::fflush(nullptr);
  const int err = nvcc::exec_program(nvcc, argv);
  std::fprintf(stderr, "kcache: error: cannot run %s: %s\nkcache: hint: check the nvcc path\n", nvcc.c_str(),
               std::strerror(err));
  return err == ENOENT ? 127 : 126;
}

int run_nvcc(const std::string& nvcc, const std::vector<std::string>& args) {
  Context ctx;
  const NvccCheck check = NvccLauncher::classify(args);
  if (!check.cacheable) {
    // Not cacheable: nvcc runs exactly as it would without kcache; only the count is ours.
    if (auto config = ctx.config(); config && !config->disable && !config->cache_dir.empty()) {
      std::error_code ec;
      if (!std::filesystem::exists(config->cache_dir / "v1" / "stats", ec)) {
        // A cache never used: the store makes its directories, with its modes.
        (void)open_configured_store(*config);
      }
      NvccLauncherOptions counting;
      counting.cache_dir = config->cache_dir;
      NvccLauncher(counting).record_uncached(check.reason);
    }
    return exec_unchanged(nvcc, args);
  }
  auto env = open_compile_environment(ctx, false, BadSettings::compile_without_cache, "compiling", OneOutput::yes);
  if (!env) {
    // A bad command-line setting cannot happen here (there is no command line of ours).
    std::fprintf(stderr, "kcache: warning: compiling without the cache: %s\n", env.error().describe().c_str());
    return exec_unchanged(nvcc, args);
  }
  std::unique_ptr<Cache> cache;
  NvccLauncherOptions options;
  if (env->store) {
    CacheOptions cache_options;
    cache_options.lock_dir = env->config.cache_dir / "v1" / "locks";
    cache_options.remote_lease = env->remote_lease;
    cache_options.warn = store_warnings::sink(store_warnings::Source::layer);
    cache = std::make_unique<Cache>(*env->store, cache_options);
    options.store = env->store.get();
    options.cache = cache.get();
    options.cache_dir = env->config.cache_dir;
  }
  options.warn = store_warnings::sink(store_warnings::Source::layer);
  NvccLauncher launcher(options);
  auto result = launcher.run(NvccRequest{nvcc, args});
  if (!result) {
    std::fprintf(stderr, "kcache: error: cannot run %s: %s\nkcache: hint: check the nvcc path\n", nvcc.c_str(),
                 result.error().describe().c_str());
    return 127;
  }
  if (!nvcc::write_fully(STDOUT_FILENO, result->out) || !nvcc::write_fully(STDERR_FILENO, result->err)) {
    return result->exit_code != 0 ? result->exit_code : k_exit_error;
  }
  if (const char* explain = std::getenv("KCACHE_NVCC_EXPLAIN"); explain != nullptr && *explain != '\0' &&
                                                                 std::string_view(explain) != "0") {
    std::fprintf(stderr, "kcache: nvcc %s%s%s (object %s, manifest %s)\n", std::string(to_string(result->outcome)).c_str(),
                 result->reason.empty() ? "" : ": ", result->reason.c_str(),
                 result->object_key == Key{} ? "unknown" : result->object_key.hex().c_str(),
                 result->manifest_key.hex().c_str());
  }
  return result->exit_code;
}

// `kcache [global options] nvcc ARGS...`: global options before `nvcc` go
// through CLI11 (main.cpp sends the plain spelling straight to
// run_nvcc_launch); every argument after `nvcc` is nvcc's.
void register_nvcc(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto* cmd = app.add_subcommand("nvcc", "Run nvcc through the cache: kcache nvcc ARGS... (also as a compiler "
                                         "launcher: kcache /path/to/nvcc ARGS...)");
  cmd->prefix_command();
  cmd->callback([&ctx, &run, cmd] {
    run = [&ctx, cmd] {
      for (const auto& [key, value] : ctx.overrides) {
        if (key == "cache_dir") {
          ::setenv("KCACHE_DIR", value.c_str(), 1);
        }
      }
      const std::string nvcc = find_nvcc();
      if (nvcc.empty()) {
        std::fputs("kcache: error: nvcc not found\nkcache: hint: set CUDA_HOME or call `kcache /path/to/nvcc ARGS...`\n",
                   stderr);
        return 127;
      }
      return run_nvcc(nvcc, cmd->remaining());
    };
  });
}

}  // namespace

KCACHE_COMMAND(nvcc, register_nvcc);

bool is_nvcc_launch(int argc, char** argv) {
  if (argc >= 1) {
    const std::string_view self = argv[0];
    const auto slash = self.rfind('/');
    if (self.substr(slash == std::string_view::npos ? 0 : slash + 1) == "nvcc") {
      return true;  // kcache installed under the name nvcc
    }
  }
  if (argc < 2) {
    return false;
  }
  const std::string_view first = argv[1];
  return first == "nvcc" || (!first.empty() && first.front() != '-' && first.find('/') != std::string_view::npos);
}

int run_nvcc_launch(int argc, char** argv) {
  // Under `kcache run` a program's exec of nvcc came here; the nvcc run from
  // here is the real one (interpose/exec_shim.cpp).
  ::unsetenv("KCACHE_RUN_NVCC");
  const std::string_view self = argv[0];
  const auto slash = self.rfind('/');
  if (self.substr(slash == std::string_view::npos ? 0 : slash + 1) == "nvcc") {
    const std::string real = nvcc_on_path();
    if (real.empty()) {
      std::fputs("kcache: error: kcache runs as nvcc, but no other nvcc is on PATH\n"
                 "kcache: hint: put the CUDA toolkit's bin directory on PATH after this one\n",
                 stderr);
      return 127;
    }
    return run_nvcc(real, std::vector<std::string>(argv + 1, argv + argc));
  }
  const std::string first = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (first == "nvcc") {
    const std::string nvcc = find_nvcc();
    if (nvcc.empty()) {
      std::fputs("kcache: error: nvcc not found (looked in $KCACHE_CUDA_HOME, $CUDA_HOME, $CUDA_PATH, PATH and "
                 "/usr/local/cuda)\nkcache: hint: install the CUDA toolkit, set CUDA_HOME, or call `kcache "
                 "/path/to/nvcc ARGS...`\n",
                 stderr);
      return 127;
    }
    return run_nvcc(nvcc, args);
  }
  const auto base = first.substr(first.rfind('/') + 1);
  if (base.rfind("nvcc", 0) != 0) {
    // Another compiler behind kcache: run it as it is (kcache caches nvcc only).
    return exec_unchanged(first, args);
  }
  return run_nvcc(first, args);
}

}  // namespace kcache::cli
