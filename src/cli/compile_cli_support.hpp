// cli/compile_cli_support.hpp: what `kcache compile`, `link` and `why-miss` share (header-only).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/store_warnings.hpp"
#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "kcache/compiler.hpp"
#include "kcache/config.hpp"
#include "kcache/tiered_store.hpp"
#include "kcache/toolkit.hpp"
#include "cli/output_file.hpp"
#include "util/input_file.hpp"

namespace kcache::cli {

// Whether read_whole_file accepts NUL bytes.
enum class NulBytes { allowed, refused };

// Reads a whole file; std::nullopt with `error` set when it cannot, when it is
// larger than `max_bytes` (checked before reading, so memory stays bounded),
// or, with NulBytes::refused, at the first NUL byte (a CUDA source for NVRTC,
// which reads C strings: a file of zeros once compiled to an empty cubin).
// `code`, when given, is set to invalid_argument for a file kcache refuses
// (too large, a NUL byte) and to io when it cannot be read.
inline std::optional<std::string> read_whole_file(const std::string& path, std::string& error,
                                                  std::uint64_t max_bytes = UINT64_MAX,
                                                  NulBytes nul = NulBytes::allowed, ErrorCode* code = nullptr) {
  if (code != nullptr) {
    *code = ErrorCode::invalid_argument;
  }
  const auto io_failed = [&] {
    if (code != nullptr) {
      *code = ErrorCode::io;
    }
  };
  // Never blocks, reads only a regular file, and names what is wrong (util/input_file.hpp).
  auto input = util::open_input_file(path, {});
  if (!input) {
    error = input.error().message;
    io_failed();
    return std::nullopt;
  }
  const int fd = input->fd.release();
  const std::string too_large = path + " is larger than " + std::to_string(max_bytes) +
                                " bytes, the most kcache gives NVRTC (2 GiB). Split it or compile it with nvcc";
  if (static_cast<std::uint64_t>(input->st.st_size) > max_bytes) {
    ::close(fd);
    error = too_large;
    return std::nullopt;
  }
  std::string bytes;
  bytes.reserve(static_cast<std::size_t>(input->st.st_size));
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      error = "cannot read " + path + ": " + std::strerror(errno);
      io_failed();
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) {
      break;
    }
    if (const void* at = nul == NulBytes::refused ? std::memchr(buffer, '\0', static_cast<std::size_t>(n)) : nullptr;
        at != nullptr) {
      error = path + " holds a NUL byte at offset " +
              std::to_string(bytes.size() + static_cast<std::size_t>(static_cast<const char*>(at) - buffer)) +
              "; NVRTC would read it only up to there. Is it a binary file? Give the CUDA source text";
      ::close(fd);
      return std::nullopt;
    }
    bytes.append(buffer, static_cast<std::size_t>(n));
    if (bytes.size() > max_bytes) {
      error = too_large;
      ::close(fd);
      return std::nullopt;
    }
  }
  ::close(fd);
  return bytes;
}

// Writes an output file (-o) atomically: a temporary file in the same
// directory, then a rename, so a reader sees the old file or the new one,
// never a part. Like a compiler's output it is not fsynced; a file that
// already holds these bytes is only touched (docs/cli.md).
// Anything but a regular file is written in place and `-` is standard output
// (cli/output_file.hpp).
inline Result<void> write_atomically(const std::string& path, std::string_view bytes) {
  return write_output(path, bytes);
}

// Reports a failed -o write: it names the output, says the cache is not
// affected, and is exit 1 whatever errno it was.
inline int report_output_error(const Error& e) {
  std::fprintf(stderr, "kcache: error: %s\nkcache: hint: %s\n", e.describe().c_str(), k_output_write_hint.data());
  return k_exit_error;
}

inline int compile_exit_code_for(const Error& e) {
  switch (e.code) {
    case ErrorCode::compile_failed:
      return k_exit_compile;
    case ErrorCode::toolkit_missing:
      return k_exit_toolkit;
    case ErrorCode::invalid_argument:
    case ErrorCode::unsupported:
      return k_exit_usage;
    default:
      return k_exit_error;
  }
}

// Prints the compiler log (if any), "kcache: error: <code>: <message>" and,
// when given, "kcache: hint: <hint>"; returns the exit code for `e`.
inline int report_error(const Error& e, std::string_view hint = {}) {
  if (!e.log.empty()) {
    std::fprintf(stderr, "%s\n", e.log.c_str());
  }
  std::fprintf(stderr, "kcache: error: %s\n", e.describe().c_str());
  if (!hint.empty()) {
    std::fprintf(stderr, "kcache: hint: %.*s\n", static_cast<int>(hint.size()), hint.data());
  }
  return compile_exit_code_for(e);
}

// Reads an input file named on the command line (a source, a link input, a
// passport): refuses what is not a regular file without opening it, then
// reads it whole. On failure prints the error with a hint and returns the
// exit code (1) in `status`.
inline std::optional<std::string> read_input_file(const std::string& path, int& status,
                                                  std::uint64_t max_bytes = UINT64_MAX,
                                                  NulBytes nul = NulBytes::allowed) {
  if (auto ok = check_input_file(path); !ok) {
    status = report_error(ok.error(), "give the path of an existing regular file");
    return std::nullopt;
  }
  std::string error;
  ErrorCode code = ErrorCode::io;
  auto bytes = read_whole_file(path, error, max_bytes, nul, &code);
  if (!bytes) {
    // A file kcache refuses (too large, a NUL byte) is bad input, exit 2.
    status = report_error(Error{code, error, {}},
                          code == ErrorCode::io ? "check the file's permissions" : "give the CUDA source text");
  }
  return bytes;
}

// What a bad setting outside the command line (a value in the environment or
// the config file, a config file that cannot be read) does to a compile.
enum class BadSettings {
  refuse,                 // the command fails with exit 2, as cache commands do (why-miss)
  compile_without_cache,  // one warning, then the compile runs with no cache (compile, link)
};

// Loads the settings, points the toolkit at them and opens the configured
// store (null with --no-cache, or when the cache is disabled). A store that
// cannot be opened is a warning: the compile goes on without it. With
// BadSettings::compile_without_cache, bad settings are one warning too: the
// compile goes on without the cache, and nothing is written under the cache
// directory. A bad command-line setting always fails (exit 2).
struct CompileEnvironment {
  std::unique_ptr<Store> store;
  Config config;
  // One compile per key across hosts (a Redis team remote); null without.
  std::shared_ptr<RemoteLease> remote_lease;
  // Where the toolkit and header memos go (empty: nowhere), for worker
  // processes to use the same (`kcache worker --memo-dir`).
  std::filesystem::path memo_dir;
};

// The one warning line for bad settings: the first problem (it names the
// setting, the value and how to fix it) and how many more there are.
inline void warn_bad_settings(const std::vector<Error>& problems, std::string_view doing) {
  std::string line = problems.front().message;
  if (problems.size() > 1) {
    line += " (and " + std::to_string(problems.size() - 1) + " more bad setting" +
            (problems.size() > 2 ? "s" : "") + "; `kcache config` shows them one by one)";
  }
  std::fprintf(stderr, "kcache: warning: %.*s without the cache: %s\n", static_cast<int>(doing.size()), doing.data(),
               line.c_str());
}

// Where a command that makes one output puts it (see open_compile_environment).
enum class OneOutput {
  no,   // several outputs: `put` as configured (background: queued, published behind)
  yes,  // one output: the local put is published on the calling thread
};

inline Result<CompileEnvironment> open_compile_environment(const Context& ctx, bool no_cache, BadSettings bad,
                                                           std::string_view doing = "compiling",
                                                           OneOutput one_output = OneOutput::no) {
  CompileEnvironment env;
  std::vector<Error> problems;
  auto config = ctx.config(bad == BadSettings::compile_without_cache ? &problems : nullptr);
  if (!config) {
    return tl::unexpected(config.error());
  }
  env.config = std::move(*config);
  if (!problems.empty()) {
    warn_bad_settings(problems, doing);
    no_cache = true;
  }
  if (!env.config.cuda_home.empty()) {
    ::setenv("KCACHE_CUDA_HOME", env.config.cuda_home.c_str(), 1);
  }
  // Read by the key derivation (deps/base_dir.hpp), in this process and its workers.
  if (env.config.base_dir.empty()) {
    ::unsetenv("KCACHE_BASE_DIR");
  } else {
    ::setenv("KCACHE_BASE_DIR", env.config.base_dir.c_str(), 1);
  }
  // A disabled or untrusted cache gets nothing written: no memo, no lock, no
  // entry; nor does a read-only bundle image (memo_dir_for).
  bool user_memos_only = false;
  if (env.config.disable || !problems.empty() || env.config.cache_dir.empty()) {
    no_cache = true;
  } else {
    env.memo_dir = memo_dir_for(env.config);
    // A bundle image's cache directory gets nothing, but the per-user memos
    // (`$XDG_CACHE_HOME/kcache-toolkit/`, shared by every cache directory)
    // are kept: without them every process would load NVRTC and scan its
    // headers again to derive a key the bundle serves.
    user_memos_only = env.memo_dir.empty();
  }
  Toolkit::instance().set_memo_dir(env.memo_dir);  // the header manifests follow it too
  if (user_memos_only) {
    Toolkit::instance().set_memo_file(Toolkit::user_memo_file());
  }
  if (!no_cache) {
    // One command, a few files: a memory tier in front of the disk would only
    // copy each payload once more before the process ends.
    Config store_config = env.config;
    store_config.memory_size_bytes = 0;
    // A command that makes one output waits for its one put before it exits
    // anyway: a background thread would only add its start (~0.3-0.5 ms of
    // CPU: a thread, its stack and malloc arena) to a cold compile and
    // overlap nothing but the output's write. So the local put is published
    // on this thread, before the output is written (`fsync = none` by
    // default: a few hundred microseconds), as `kcache run` does in a
    // single-threaded program. Remote uploads keep their own queue and
    // thread (docs/performance.md, "Cold CLI compile").
    if (one_output == OneOutput::yes) {
      env.config.put = PutMode::sync;
      store_config.put = PutMode::sync;
    }
    auto store = open_configured_store(store_config);
    if (store) {
      env.store = std::move(*store);
      env.remote_lease = open_configured_lease(store_config);
    } else {
      store_warnings::warn(store_warnings::Source::tier,
                           std::string(doing) + " without the cache: " + store.error().describe());
    }
  }
  return env;
}

// What a compile's lookups were (TieredStore::start_lookup_trace around it):
// "lookups", one object per tier asked, in order ({"tier", "us", "result"}:
// hit, miss or error; a compile that waited for another process's compile
// looks up twice), and "hit_tier", the tier that served a hit (null on a
// miss). `lookup_us` then counts at least the sum of the lookups' times.
inline void add_lookups_json(nlohmann::json& j, const std::vector<TierLookup>& lookups, bool hit) {
  nlohmann::json list = nlohmann::json::array();
  std::uint64_t sum = 0;
  nlohmann::json hit_tier = nullptr;
  for (const auto& l : lookups) {
    sum += l.us;
    const char* result = l.outcome == TierLookup::Outcome::hit    ? "hit"
                         : l.outcome == TierLookup::Outcome::miss ? "miss"
                                                                  : "error";
    list.push_back({{"tier", l.tier}, {"us", l.us}, {"result", result}});
    if (hit && l.outcome == TierLookup::Outcome::hit) {
      hit_tier = l.tier;
    }
  }
  j["lookups"] = std::move(list);
  j["hit_tier"] = std::move(hit_tier);
  if (j.value("lookup_us", std::uint64_t{0}) < sum) {
    j["lookup_us"] = sum;
  }
}

inline nlohmann::json info_json(const CompileInfo& info) {
  nlohmann::json j;
  j["key"] = info.key.hex();
  j["hit"] = info.hit;
  j["cacheable"] = info.cacheable;
  if (!info.not_cacheable_reason.empty()) {
    j["not_cacheable_reason"] = info.not_cacheable_reason;
  }
  j["stored"] = info.stored;
  j["store_queued"] = info.store_queued;
  j["toolkit_loaded"] = info.toolkit_loaded;
  j["toolkit_loads"] = Toolkit::instance().load_count();
  if (!info.store_warning.empty()) {
    j["store_warning"] = info.store_warning;
  }
  j["key_us"] = info.key_us;
  j["lookup_us"] = info.lookup_us;
  j["compile_us"] = info.compile_us;
  j["store_us"] = info.store_us;
  auto headers = nlohmann::json::array();
  for (const auto& h : info.headers) {
    headers.push_back({{"path", h.path}, {"sha256", h.sha256}});
  }
  j["disk_headers"] = headers;
  return j;
}

// Prints the fields that differ between two key records; returns how many.
inline std::size_t print_key_diff(const KeyRecord& a, const KeyRecord& b, const std::string& left_name,
                                  const std::string& right_name) {
  // A request compiled without the cache says why in its key record.
  for (const auto& [r, name] : {std::pair{&a, &left_name}, std::pair{&b, &right_name}}) {
    for (const auto& f : r->fields) {
      if (f.name == "not_cacheable") {
        std::printf("%s is not cacheable (never stored, never a hit): %s\n", name->c_str(), f.value.c_str());
      } else if (f.name == "base_dir" && f.value.rfind("absolute: ", 0) == 0) {
        std::printf("%s keeps absolute paths (base_dir): %s\n", name->c_str(), f.value.c_str() + 10);
      }
    }
  }
  const auto d = diff(a, b);
  if (d.empty()) {
    std::printf("the key records are equal\n");
    return 0;
  }
  std::printf("%zu field(s) differ (%s | %s):\n", d.size(), left_name.c_str(), right_name.c_str());
  for (const auto& f : d) {
    std::printf("  %s\n    %s: %s\n    %s: %s\n", f.name.c_str(), left_name.c_str(),
                f.left_present ? f.left.c_str() : "(absent)", right_name.c_str(),
                f.right_present ? f.right.c_str() : "(absent)");
  }
  return d.size();
}

}  // namespace kcache::cli
