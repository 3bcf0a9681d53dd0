// kcache run: run a program with the stand-in JIT libraries preloaded, so
// that its NVRTC, nvJitLink and NVVM compiles go through the cache with no change to the program
// (docs/run.md).
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "store/file/request_file.hpp"
#include "util/fd.hpp"
#include "util/input_file.hpp"
#include "util/install_location.hpp"

#ifndef KCACHE_INTERPOSE_RELPATH
#error "KCACHE_INTERPOSE_RELPATH (the stand-in's path relative to the kcache executable's directory) is not defined"
#endif

namespace kcache::cli {
namespace {

namespace fs = std::filesystem;

// Exit codes of a program that could not be started, as env(1) and shells use them.
constexpr int k_exit_cannot_execute = 126;
constexpr int k_exit_not_found = 127;

// The stand-in library: $KCACHE_INTERPOSE_LIBRARY, else beside the command's
// own installation (<libdir>/kcache/libkcache-interpose.so, or from the wheel
// <site-packages>/kcache/libkcache-interpose.so: util/install_location.hpp).
fs::path interpose_library() {
  if (const char* env = std::getenv("KCACHE_INTERPOSE_LIBRARY"); env != nullptr && *env != '\0') {
    return fs::absolute(env);
  }
  return util::installed_file(KCACHE_INTERPOSE_RELPATH);
}

// Empty when `library` can be preloaded into a program like this one: a
// regular file holding an ELF shared object for this machine and word size.
// Otherwise what is wrong with it: the dynamic loader would only print a line
// of its own and run the program uncached, exit 0, which no one notices.
std::string check_stand_in(const fs::path& library) {
  if (library.empty()) {
    return "the stand-in library libkcache-interpose.so is missing (the kcache executable's path is unknown)";
  }
  auto file = util::open_input_file(library, "the stand-in library");
  if (!file) {
    return file.error().code == ErrorCode::not_found ? "the stand-in library " + library.string() + " is missing"
                                                     : file.error().message;
  }
  ElfW(Ehdr) header{};
  const ssize_t n = ::pread(file->fd.get(), &header, sizeof header, 0);
  const bool elf = n == static_cast<ssize_t>(sizeof header) && std::memcmp(header.e_ident, ELFMAG, SELFMAG) == 0;
  if (!elf) {
    return "the stand-in library " + library.string() + " is not an ELF shared library";
  }
  // The program runs on this machine as kcache does: the stand-in must match kcache's own ELF header.
  ElfW(Ehdr) self{};
  bool self_read = false;
  if (util::Fd exe(::open("/proc/self/exe", O_RDONLY | O_CLOEXEC)); exe) {
    self_read = ::pread(exe.get(), &self, sizeof self, 0) == static_cast<ssize_t>(sizeof self);
  }
  // A program (a PIE is ET_DYN too) names its interpreter; a library does not.
  bool program = false;
  for (unsigned i = 0; i < header.e_phnum && header.e_phentsize == sizeof(ElfW(Phdr)) && i < 4096; ++i) {
    ElfW(Phdr) ph{};
    if (::pread(file->fd.get(), &ph, sizeof ph, static_cast<off_t>(header.e_phoff + i * sizeof ph)) !=
        static_cast<ssize_t>(sizeof ph)) {
      break;
    }
    program = program || ph.p_type == PT_INTERP;
  }
  if (program) {
    return "the stand-in library " + library.string() + " is a program, not a shared library";
  }
  if (header.e_type != ET_DYN ||
      (self_read && (header.e_ident[EI_CLASS] != self.e_ident[EI_CLASS] ||
                     header.e_ident[EI_DATA] != self.e_ident[EI_DATA] || header.e_machine != self.e_machine))) {
    return "the stand-in library " + library.string() +
           " is not a shared library for this machine (an ELF file of another type, word size or architecture)";
  }
  return {};
}

// LD_PRELOAD with `library` appended (a preload that must come first, such as
// a sanitizer runtime, stays first); unchanged when it is already there.
std::string preload_with(const std::string& current, const std::string& library) {
  if (current.empty()) {
    return library;
  }
  std::string::size_type start = 0;
  while (start <= current.size()) {
    const auto end = current.find_first_of(": ", start);
    if (current.substr(start, end == std::string::npos ? std::string::npos : end - start) == library) {
      return current;
    }
    if (end == std::string::npos) {
      break;
    }
    start = end + 1;
  }
  return current + ":" + library;
}

// The variables that turn kcache's Triton cache on in every Python program of
// the run that can import kcache (docs/run.md, "Triton under kcache run"):
// KCACHE_TRITON=1 (read by kcache-autoload.pth where kcache is installed),
// and the directory of kcache's start-up module (python-startup/
// sitecustomize.py, beside the stand-in) first on PYTHONPATH, for a kcache
// that Python finds through PYTHONPATH, where no .pth file is read. A
// KCACHE_TRITON the user set (to 0 as well) is left as it is, and so is the
// rest of the environment.
void add_triton_variables(const fs::path& library, std::vector<std::pair<std::string, std::string>>& env) {
  if (std::getenv("KCACHE_TRITON") != nullptr) {
    return;
  }
  env.emplace_back("KCACHE_TRITON", "1");
  const fs::path startup = library.parent_path() / "python-startup";
  std::error_code ec;
  if (!fs::is_regular_file(startup / "sitecustomize.py", ec)) {
    return;
  }
  const char* current = std::getenv("PYTHONPATH");
  const std::string path = current != nullptr && *current != '\0' ? startup.string() + ":" + current : startup.string();
  env.emplace_back("PYTHONPATH", path);
}

int run_run(const Context& ctx, std::vector<std::string> command, bool print_env, bool no_summary) {
  if (!command.empty() && command.front() == "--") {
    command.erase(command.begin());
  }
  const fs::path library = interpose_library();
  if (auto unusable = check_stand_in(library); !unusable.empty()) {
    std::fprintf(stderr,
                 "kcache: error: %s\nkcache: hint: it is installed beside kcache in <libdir>/kcache/ (from the "
                 "wheel: site-packages/kcache/); reinstall kcache or set KCACHE_INTERPOSE_LIBRARY to its path\n",
                 unusable.c_str());
    return k_exit_error;
  }
  // Settings given on kcache's command line reach the program as environment
  // variables, which the stand-in reads as `kcache compile` would.
  std::vector<std::pair<std::string, std::string>> env;
  // Bad settings outside the command line are the stand-in's to warn about (it
  // then runs the program without the cache); a bad command-line setting is exit 2.
  std::vector<Error> problems;
  const auto config = ctx.config(&problems);  // read once, for both uses below
  if (!ctx.overrides.empty() || !ctx.config_file.empty()) {
    if (!config) {
      std::fprintf(stderr, "kcache: error: %s\nkcache: hint: see `kcache config`\n", config.error().describe().c_str());
      return k_exit_usage;
    }
    for (const auto& row : config->rows()) {
      if (ctx.overrides.count(row.key) != 0) {
        env.emplace_back(row.env, row.value);
      }
    }
    if (!ctx.config_file.empty()) {
      env.emplace_back("KCACHE_CONFIG", fs::absolute(ctx.config_file).string());
    }
  }
  // The cache directory, wherever it came from (--cache-dir, KCACHE_DIR, the
  // config file), so that the environment route reaches the same cache.
  if (config && config->origin.count("cache_dir") != 0 &&
      config->origin.at("cache_dir") != SettingSource::default_value && ctx.overrides.count("cache_dir") == 0) {
    env.emplace_back("KCACHE_DIR", config->cache_dir.string());
  }
  // The toolkit home and base_dir are read from the environment by the key
  // derivation (as `kcache compile` arranges for itself).
  if (config) {
    if (!config->cuda_home.empty()) {
      env.emplace_back("KCACHE_CUDA_HOME", config->cuda_home);
    }
    if (!config->base_dir.empty()) {
      env.emplace_back("KCACHE_BASE_DIR", config->base_dir);
    }
  }
  // A process of the program that runs nvcc runs the compiler launcher
  // instead (interpose/exec_shim.cpp), unless KCACHE_RUN_NVCC is set (to 0).
  if (std::getenv("KCACHE_RUN_NVCC") == nullptr) {
    std::error_code self_ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", self_ec);
    if (!self_ec) {
      env.emplace_back("KCACHE_RUN_NVCC", self.string());
    }
  }
  const char* current = std::getenv("LD_PRELOAD");
  env.emplace_back("LD_PRELOAD", preload_with(current != nullptr ? current : "", library.string()));
  add_triton_variables(library, env);
  if (print_env) {
    for (const auto& [name, value] : env) {
      std::string quoted;  // single-quoted for the shell: ' becomes '\''
      for (const char c : value) {
        quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      }
      std::printf("export %s='%s'\n", name.c_str(), quoted.c_str());
    }
    return k_exit_ok;
  }
  if (command.empty()) {
    std::fputs("kcache: error: no command given\nkcache: hint: kcache run -- PROGRAM [ARGS...]\n", stderr);
    return k_exit_usage;
  }
  // The run's report, which the program's top process (this pid, after the
  // exec) prints as the summary at exit (docs/run.md, "The summary").
  store::RunReportFile report;
  if (!no_summary && (!config || config->run_summary)) {
    if (auto made = store::create_run_report()) {
      report = std::move(*made);
      env.emplace_back(store::k_run_report_env, report.env_value);
    } else {
      std::fprintf(stderr, "kcache: warning: kcache run: no summary at exit: %s\n", made.error().describe().c_str());
    }
  }
  for (const auto& [name, value] : env) {
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  std::vector<char*> argv;
  for (auto& a : command) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execvp(argv[0], argv.data());
  const int err = errno;
  std::fprintf(stderr, "kcache: error: cannot run %s: %s\nkcache: hint: check the program's name and PATH\n",
               argv[0], std::strerror(err));
  return err == ENOENT ? k_exit_not_found : k_exit_cannot_execute;
}

void register_run(CLI::App& app, Context& ctx, std::function<int()>& run) {
  CLI::App* sub = app.add_subcommand("run", "Run a program with its NVRTC, nvJitLink and NVVM compiles cached (no change to it)");
  auto print_env = std::make_shared<bool>(false);
  sub->add_flag("--print-env", *print_env,
                "Print the environment that turns the cache on (for launchers that cannot wrap a command) and exit");
  auto no_summary = std::make_shared<bool>(false);
  sub->add_flag("--no-summary", *no_summary,
                "Print no summary line at exit (also: KCACHE_RUN_SUMMARY=0, or run_summary = false in the config file)");
  auto command = std::make_shared<std::vector<std::string>>();
  sub->add_option("command", *command, "The program and its arguments, after `--`");
  sub->footer(
      "Usage: kcache run -- PROGRAM [ARGS...]. The program and its children load kcache's stand-in for "
      "libnvrtc, libnvJitLink and libnvvm (LD_PRELOAD); compiles are keyed as `kcache compile` keys them and served from the cache. "
      "At exit the program prints one line on stderr: the JIT compiles seen, served (by tier) and compiled "
      "(--no-summary, KCACHE_RUN_SUMMARY=0: none). Python programs that can import kcache get kcache's Triton cache "
      "(KCACHE_TRITON=1 unless set). The exit status is the program's; 126/127 when it cannot be started. See docs/run.md.");
  sub->callback([&ctx, &run, command, print_env, no_summary] {
    run = [&ctx, command, print_env, no_summary] { return run_run(ctx, *command, *print_env, *no_summary); };
  });
}

}  // namespace

KCACHE_COMMAND(run, register_run);

}  // namespace kcache::cli
