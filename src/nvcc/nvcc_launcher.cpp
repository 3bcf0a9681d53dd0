// The nvcc launcher (kcache/nvcc_launcher.hpp): a lookup through the local
// memo, then the dependency manifests, then a compile once per key.
#include "kcache/nvcc_launcher.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kcache/artifact.hpp"
#include "kcache/key_builder.hpp"
#include "kcache/passport.hpp"
#include "nvcc/child_process.hpp"
#include "nvcc/dependency_file.hpp"
#include "nvcc/file_stamp.hpp"
#include "nvcc/header_state.hpp"
#include "nvcc/nvcc_command.hpp"
#include "nvcc/nvcc_counters.hpp"
#include "nvcc/nvcc_keys.hpp"
#include "nvcc/nvcc_manifest.hpp"
#include "nvcc/path_rewrite.hpp"
#include "nvcc/toolchain.hpp"
#include "deps/base_dir.hpp"
#include "util/atomic_write.hpp"
#include "util/clock.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache {

namespace fs = std::filesystem;
using namespace kcache::nvcc;

namespace {

constexpr int k_max_manifest_chain = 8;
constexpr std::size_t k_max_source_bytes = std::size_t{1} << 30;
constexpr std::size_t k_max_output_bytes = std::size_t{2} << 30;
constexpr std::size_t k_max_depfile_bytes = std::size_t{16} << 20;

std::uint64_t micros_since(std::chrono::steady_clock::time_point t0) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
}

// The working directory as the host compiler records it (DW_AT_comp_dir):
// $PWD when it is absolute and names ".", else getcwd().
std::string working_directory() {
  if (const char* pwd = std::getenv("PWD"); pwd != nullptr && pwd[0] == '/') {
    struct stat a {};
    struct stat b {};
    if (::stat(pwd, &a) == 0 && ::stat(".", &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
      return pwd;
    }
  }
  std::error_code ec;
  return fs::current_path(ec).string();
}

// What nvcc's environment flags hold that kcache must not add to: a
// dependency option there would clash with the -MD -MF kcache adds.
bool environment_names_dependency_options() {
  for (const char* name : {"NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"}) {
    if (const char* v = std::getenv(name)) {
      for (const auto& w : split_environment_flags(v)) {
        if (w.rfind("-M", 0) == 0 || w.rfind("--generate-dep", 0) == 0 || w.rfind("--generate-nonsystem", 0) == 0 ||
            w.rfind("--dependency", 0) == 0 || w.rfind("-o", 0) == 0 || w.rfind("--output-file", 0) == 0) {
          return true;
        }
      }
    }
  }
  return false;
}

// The command parsed, with the environment's vetoes applied.
NvccCommand parse_with_environment(const std::vector<std::string>& args) {
  NvccCommand cmd = parse_command(args, NvccEnvironment::from_process());
  if (!cmd.cacheable()) {
    return cmd;
  }
  for (const char* name : {"DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES"}) {
    if (std::getenv(name) != nullptr) {
      cmd.reason = Uncacheable::environment;
      cmd.reason_text = std::string(name) + " is set: the host compiler writes a dependency file of its own";
      return cmd;
    }
  }
  if (environment_names_dependency_options()) {
    cmd.reason = Uncacheable::environment;
    cmd.reason_text = "NVCC_PREPEND_FLAGS or NVCC_APPEND_FLAGS names a dependency-file or output option";
    return cmd;
  }
  return cmd;
}

std::string temporary_depfile_path() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp") + "/kcache-nvcc-XXXXXX.d";
  const int fd = ::mkstemps(pattern.data(), 2);
  if (fd < 0) {
    return {};
  }
  ::close(fd);
  return pattern;
}

// Every header the compile of `cmd` reads, as `nvcc -M` lists them (the
// command without its output, phase and dependency options); nullopt when
// nvcc fails to list them.
std::optional<std::string> list_every_header(const NvccRequest& request, const NvccCommand& cmd) {
  const std::string path = temporary_depfile_path();
  if (path.empty()) {
    return std::nullopt;
  }
  std::vector<std::string> argv{request.nvcc.string()};
  for (std::size_t i = 0; i < request.args.size(); ++i) {
    if (std::find(cmd.listing_drops.begin(), cmd.listing_drops.end(), i) == cmd.listing_drops.end()) {
      argv.push_back(request.args[i]);
    }
  }
  argv.insert(argv.end(), {"-M", "-MF", path});
  auto ran = run_captured(request.nvcc, argv, std::size_t{1} << 20);
  std::optional<std::string> text;
  if (ran && ran->status() == 0) {
    text = util::io::read_small_file(path, k_max_depfile_bytes);
  }
  ::unlink(path.c_str());
  return text;
}

// The outputs of an entry, written where nvcc would write them.
Result<void> write_outputs(const NvccCommand& cmd, const Artifact& object, bool has_depfile, const std::string& depfile) {
  if (auto w = util::write_output_file(cmd.output, std::string_view(object.payload.data(), object.payload.size()));
      !w) {
    return tl::unexpected(w.error());
  }
  if (cmd.deps.mode != DepMode::none && has_depfile) {
    if (auto w = util::write_output_file(cmd.deps.file, depfile); !w) {
      return tl::unexpected(w.error());
    }
  }
  return {};
}

// Whether `memo` applies although the directories `changed` are not as it
// remembers them: it was made with no absent name present, and every absent
// name of its manifest in those directories is still missing. Each
// directory's identity is taken before its names are checked and kept in
// `memo` (zero when racy); true also means `memo` should be saved when
// `refreshed`.
bool absent_names_still_missing(LocalMemo& memo, const std::vector<std::string>& changed, Store& store,
                                const PathRewrite& rewrite, bool& refreshed) {
  const auto key = Key::parse(memo.manifest_key);
  if (memo.present != 0 || !key) {
    return false;
  }
  auto got = store.get(*key);
  if (!got || !*got) {
    return false;
  }
  const auto manifest =
      DependencyManifest::parse(std::string_view((*got)->payload.data(), (*got)->payload.size()));
  if (!manifest) {
    return false;
  }
  const std::int64_t now = util::realtime_ns();
  std::set<std::string> dirs(changed.begin(), changed.end());
  for (auto& [dir, stamp] : memo.dirs) {
    if (dirs.count(dir) != 0) {
      const auto s = stamp_of(dir);
      const FileStamp fresh = s && !s->is_racy(now) ? *s : FileStamp{};
      refreshed = refreshed || !(fresh == stamp);
      stamp = fresh;
    }
  }
  for (const auto& a : manifest->absent) {
    const std::string dir = rewrite.expand(a.dir);
    if (dirs.count(dir) != 0 && !still_missing(dir, a.name)) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string_view to_string(NvccOutcome outcome) noexcept {
  switch (outcome) {
    case NvccOutcome::hit:
      return "hit";
    case NvccOutcome::compiled:
      return "compiled";
    case NvccOutcome::failed:
      return "failed";
    case NvccOutcome::uncached:
      return "uncached";
    case NvccOutcome::fallback:
      return "fallback";
  }
  return "?";
}

struct NvccLauncher::Impl {
  NvccLauncherOptions options;
  std::unique_ptr<NvccCounters> counters;
  fs::path memo_dir;

  void warn(const std::string& line) const {
    if (options.warn) {
      options.warn(line);
    } else {
      std::fprintf(stderr, "kcache: warning: %s\n", line.c_str());
    }
  }

  // nvcc run as it would be without kcache.
  Result<NvccResult> run_plain(const NvccRequest& request, NvccOutcome outcome, std::string reason) {
    std::vector<std::string> argv{request.nvcc.string()};
    argv.insert(argv.end(), request.args.begin(), request.args.end());
    auto ran = run_captured(request.nvcc, argv, SIZE_MAX);
    if (!ran) {
      return tl::unexpected(ran.error());
    }
    NvccResult r;
    r.outcome = outcome;
    r.exit_code = ran->status();
    r.out = std::move(ran->out);
    r.err = std::move(ran->err);
    r.reason = std::move(reason);
    return r;
  }

  Result<NvccResult> finish(Result<NvccResult> r) {
    if (r) {
      counters->add(r->outcome);
    }
    return r;
  }

  Result<NvccResult> run(const NvccRequest& request);
};

NvccLauncher::NvccLauncher(NvccLauncherOptions options) : m_impl(std::make_unique<Impl>()) {
  m_impl->options = std::move(options);
  m_impl->counters = NvccCounters::open(m_impl->options.cache_dir);
  if (!m_impl->options.cache_dir.empty()) {
    m_impl->memo_dir = m_impl->options.cache_dir / "v1" / "nvcc";
  }
}

NvccLauncher::~NvccLauncher() = default;

NvccCheck NvccLauncher::classify(const std::vector<std::string>& args) {
  const NvccCommand cmd = parse_with_environment(args);
  NvccCheck c;
  c.cacheable = cmd.cacheable();
  if (!c.cacheable) {
    c.reason = std::string(to_string(cmd.reason));
    c.detail = cmd.reason_text;
  }
  return c;
}

void NvccLauncher::record_uncached(const std::string& reason) {
  m_impl->counters->add(NvccOutcome::uncached);
  m_impl->counters->add(reason_named(reason));
}

Result<NvccResult> NvccLauncher::run(const NvccRequest& request) { return m_impl->finish(m_impl->run(request)); }

Result<NvccResult> NvccLauncher::Impl::run(const NvccRequest& request) {
  const NvccCommand cmd = parse_with_environment(request.args);
  if (!cmd.cacheable()) {
    counters->add(cmd.reason);
    return run_plain(request, NvccOutcome::uncached, std::string(to_string(cmd.reason)) + ": " + cmd.reason_text);
  }
  if (options.store == nullptr || options.cache == nullptr) {
    return run_plain(request, NvccOutcome::fallback, "no cache");
  }
  Store& store = *options.store;
  Toolchain toolchain(memo_dir.empty() ? fs::path() : memo_dir / "toolchain");
  auto nvcc_id = toolchain.nvcc(request.nvcc);
  if (!nvcc_id) {
    warn("compiling without the cache: " + nvcc_id.error().describe());
    return run_plain(request, NvccOutcome::fallback, nvcc_id.error().describe());
  }
  auto host = toolchain.host_compiler(cmd, *nvcc_id);
  if (!host) {
    // nvcc will say the same in its own words; no warning of ours.
    return run_plain(request, NvccOutcome::fallback, host.error().describe());
  }
  const auto source_stamp = stamp_of(cmd.input);
  auto source = source_stamp && source_stamp->size <= k_max_source_bytes
                    ? util::io::read_small_file(cmd.input, k_max_source_bytes)
                    : std::nullopt;
  if (!source) {
    // A missing or unreadable input: nvcc says so.
    return run_plain(request, NvccOutcome::fallback, "cannot read the input " + cmd.input);
  }
  KeyInputs in;
  in.command = &cmd;
  in.nvcc = &*nvcc_id;
  in.host = &*host;
  in.environment = keyed_environment(*nvcc_id);
  if (cmd.output_names_paths) {
    in.working_directory = working_directory();
  }
  in.source_sha256 = util::sha256_hex(*source);
  // base_dir: paths keyed without it, unless the output names them.
  PathRewrite rewrite;
  std::optional<Key> relative_root;
  if (const std::string base = jit::base_dir_setting(); !base.empty()) {
    std::string why = cmd.output_names_paths ? "the output names the files it reads (-g, -G, -lineinfo)"
                                             : PathRewrite::unusable_because(base);
    if (why.empty()) {
      rewrite = PathRewrite(base);
      in.rewrite = &rewrite;
      in.base_dir = "relative";
      relative_root = root_manifest_key(in);
      if (auto verdict = jit::remembered_verdict(relative_root->hex(), memo_dir);
          verdict && verdict->rfind("absolute: ", 0) == 0) {
        why = verdict->substr(10);
      }
    }
    if (!why.empty()) {
      rewrite = PathRewrite();
      in.rewrite = nullptr;
      in.base_dir = "absolute: " + why;
    }
  }
  const KeyBuilder root_record = root_manifest_record(in);
  const Key root = root_record.key();

  NvccResult result;
  result.manifest_key = root;

  // The local memo: while every header and directory it names is unchanged,
  // it knows the object key.
  std::optional<LocalMemo> memo = LocalMemo::load(memo_dir, root.hex());
  if (memo && memo->base_dir != rewrite.base()) {
    memo.reset();  // made in another checkout
  }
  KnownDigests known;
  if (memo) {
    for (const auto& h : memo->headers) {
      if (h.sha256 != "missing" && h.stamp.ctime_ns != 0) {
        known.emplace(h.path, std::make_pair(h.stamp, h.sha256));
      }
    }
  }
  const auto serve = [&](const Artifact& object, bool has_depfile, const std::string& depfile) -> Result<NvccResult> {
    if (auto w = write_outputs(cmd, object, has_depfile, depfile); !w) {
      return tl::unexpected(w.error());
    }
    result.outcome = NvccOutcome::hit;
    result.exit_code = 0;
    result.err = object.passport.log;
    if (const auto it = object.passport.labels.find("stdout"); it != object.passport.labels.end()) {
      result.out = it->second;
    }
    result.object_key = object.passport.key;
    result.compile_us = object.passport.compile_duration_us;
    return result;
  };
  if (memo) {
    // While every header is as remembered, the object key is known; a
    // directory that changed (the build directory, an editor's save) only
    // needs its absent names checked.
    const auto changed = memo->changed_dirs();
    bool refreshed = false;
    if (changed && (changed->empty() || absent_names_still_missing(*memo, *changed, store, rewrite, refreshed))) {
      if (auto key = Key::parse(memo->object_key)) {
        auto got = store.get(*key);
        if (got && *got) {
          toolchain.save();
          if (refreshed) {
            memo->save(memo_dir);
          }
          return serve(**got, memo->has_depfile, memo->depfile);
        }
      }
    }
  }

  // The manifests: the root one, then one per state whose object was not
  // stored, each compiled at most once per key (Cache::get_or_compile).
  KeyBuilder record = root_record;
  Key manifest_key = root;
  for (int depth = 0; depth < k_max_manifest_chain; ++depth) {
    std::optional<ChildOutput> ran;
    std::uint64_t compile_us = 0;
    std::optional<Key> stored_object;
    CacheOutcome outcome = CacheOutcome::hit;
    auto got = options.cache->get_or_compile(
        manifest_key,
        [&]() -> Result<CompileOutput> {
          const std::int64_t started_ns = util::realtime_ns();
          std::vector<std::string> argv{request.nvcc.string()};
          argv.insert(argv.end(), request.args.begin(), request.args.end());
          std::string depfile_path = cmd.deps.file;
          if (cmd.deps.mode == DepMode::none) {
            depfile_path = temporary_depfile_path();
            if (depfile_path.empty()) {
              return make_error(ErrorCode::io, "cannot make a temporary dependency file");
            }
            argv.insert(argv.end(), {"-MD", "-MF", depfile_path});
          }
          const auto t0 = std::chrono::steady_clock::now();
          auto child = run_captured(request.nvcc, argv);
          compile_us = micros_since(t0);
          std::optional<std::string> depfile_text;
          if (child && child->status() == 0) {
            depfile_text = util::io::read_small_file(depfile_path, k_max_depfile_bytes);
          }
          if (cmd.deps.mode == DepMode::none) {
            ::unlink(depfile_path.c_str());
          }
          if (!child) {
            return tl::unexpected(child.error());
          }
          ran = std::move(*child);
          if (ran->status() != 0) {
            return make_error(ErrorCode::compile_failed, "nvcc failed", ran->err);
          }
          std::optional<std::string> listing_text = depfile_text;
          if (cmd.deps.mode == DepMode::nonsystem) {
            // -MMD leaves the system headers out of the file nvcc wrote;
            // kcache asks nvcc for every header (`-M`, no compile).
            listing_text = list_every_header(request, cmd);
          }
          auto deps = listing_text ? parse_dependency_file(*listing_text) : std::nullopt;
          auto output = util::io::read_small_file(cmd.output, k_max_output_bytes);
          if (!deps || deps->prerequisites.empty() || !output) {
            return make_error(ErrorCode::internal, "nvcc wrote no readable output or dependency file");
          }
          auto search = toolchain.search_dirs(*nvcc_id, *host, cmd.host_options);
          if (!search) {
            return tl::unexpected(search.error());
          }
          std::vector<std::string> dirs = cmd.include_dirs;
          dirs.insert(dirs.end(), cmd.system_dirs.begin(), cmd.system_dirs.end());
          dirs.insert(dirs.end(), search->toolkit.begin(), search->toolkit.end());
          dirs.insert(dirs.end(), search->host.begin(), search->host.end());
          for (std::size_t i = 0; i < cmd.host_options.size(); ++i) {
            const std::string& o = cmd.host_options[i];
            for (const std::string_view flag : {"-I", "-isystem", "-iquote", "-idirafter"}) {
              if (o == flag && i + 1 < cmd.host_options.size()) {
                dirs.push_back(cmd.host_options[i + 1]);
              } else if (o.size() > flag.size() && o.compare(0, flag.size(), flag) == 0 &&
                         (flag != "-I" || o[2] != 's')) {
                dirs.push_back(o.substr(flag.size()));
              }
            }
          }
          DependencyManifest manifest;
          const std::vector<std::string> headers(deps->prerequisites.begin() + 1, deps->prerequisites.end());
          // nvcc pre-includes cuda_runtime.h; -include and the host's -include / -imacros add more.
          std::vector<std::string> pre_includes{"cuda_runtime.h"};
          pre_includes.insert(pre_includes.end(), cmd.pre_includes.begin(), cmd.pre_includes.end());
          for (std::size_t i = 0; i + 1 < cmd.host_options.size(); ++i) {
            if (cmd.host_options[i] == "-include" || cmd.host_options[i] == "-imacros") {
              pre_includes.push_back(cmd.host_options[i + 1]);
            }
          }
          // The manifest keeps the paths as keyed (without base_dir).
          for (const auto& h : headers) {
            manifest.headers.push_back(rewrite.to_key(h));
          }
          for (auto& a : absent_names(headers, cmd.input, dirs, pre_includes)) {
            manifest.absent.push_back(AbsentName{rewrite.to_key(a.dir), std::move(a.name)});
          }
          std::sort(manifest.absent.begin(), manifest.absent.end());
          manifest.absent.erase(std::unique(manifest.absent.begin(), manifest.absent.end()), manifest.absent.end());
          manifest.has_depfile = cmd.deps.mode != DepMode::none;
          if (manifest.has_depfile) {
            manifest.depfile = rewrite.to_key(*depfile_text);
          }
          const HeaderState state = header_state(manifest.headers, manifest.absent, rewrite, &known);
          const auto source_after = stamp_of(cmd.input);
          bool cacheable = !ran->truncated && ran->err.size() <= k_passport_max_log_bytes &&
                           state.settled_ns < started_ns && source_after && *source_after == *source_stamp &&
                           source_stamp->settled_ns() < started_ns;
          const KeyBuilder object_kb = object_record(in, manifest, state);
          Artifact object = Artifact::make(object_kb, std::string(kind_name(cmd.output_kind)), Payload(std::move(*output)),
                                           Producer{"nvcc", nvcc_id->version}, Target{"", host->machine});
          object.passport.log = ran->err;
          object.passport.compile_duration_us = compile_us;
          object.passport.labels["source"] = cmd.input;
          if (!ran->out.empty()) {
            object.passport.labels["stdout"] = ran->out;
          }
          stored_object = object.passport.key;
          if (rewrite.active() &&
              jit::output_names_base(std::string_view(object.payload.data(), object.payload.size()), rewrite.base())) {
            // Keyed without base_dir, but the output names a path under it
            // (`__FILE__`, `assert`): not stored; keyed absolute from now on.
            cacheable = false;
            jit::remember_verdict(relative_root->hex(), memo_dir,
                                  "absolute: the output names a path under base_dir");
          }
          if (cacheable) {
            if (auto put = store.put(object); !put) {
              warn("the compiled object was not stored: " + put.error().describe());
              cacheable = false;
            }
          }
          if (cacheable) {
            LocalMemo::make(root.hex(), manifest_key.hex(), object.passport.key.hex(), state, manifest, rewrite)
                .save(memo_dir);
          }
          Artifact m = Artifact::make(record, "nvcc-deps", Payload(manifest.serialize()),
                                      Producer{"kcache", KCACHE_VERSION}, Target{});
          m.passport.compile_duration_us = compile_us;
          return CompileOutput{std::move(m), cacheable};
        },
        &outcome);
    toolchain.save();
    if (!got) {
      if (ran && ran->status() != 0) {
        result.outcome = NvccOutcome::failed;
        result.exit_code = ran->status();
        result.out = std::move(ran->out);
        result.err = std::move(ran->err);
        result.compile_us = compile_us;
        return result;
      }
      if (ran) {
        // nvcc compiled, but kcache could not read what it wrote: its outputs stand.
        warn("the compile was not stored: " + got.error().describe());
        result.outcome = NvccOutcome::fallback;
        result.reason = got.error().describe();
        result.out = std::move(ran->out);
        result.err = std::move(ran->err);
        result.compile_us = compile_us;
        return result;
      }
      warn("compiling without the cache: " + got.error().describe());
      return run_plain(request, NvccOutcome::fallback, got.error().describe());
    }
    if (outcome == CacheOutcome::compiled || outcome == CacheOutcome::compiled_only) {
      result.outcome = NvccOutcome::compiled;
      result.exit_code = ran ? ran->status() : 0;
      if (ran) {
        result.out = std::move(ran->out);
        result.err = std::move(ran->err);
      }
      result.compile_us = compile_us;
      if (stored_object) {
        result.object_key = *stored_object;
      }
      return result;
    }
    // A manifest (found, or published by the process we waited for): the
    // state of its headers now names the object.
    auto manifest = DependencyManifest::parse(std::string_view(got->payload.data(), got->payload.size()));
    if (!manifest) {
      warn("dependency manifest " + manifest_key.hex() + " cannot be read; compiling without the cache");
      return run_plain(request, NvccOutcome::fallback, "unreadable dependency manifest");
    }
    const HeaderState state = header_state(manifest->headers, manifest->absent, rewrite, &known);
    const Key object_key = object_record(in, *manifest, state).key();
    auto object = store.get(object_key);
    if (object && *object) {
      LocalMemo::make(root.hex(), manifest_key.hex(), object_key.hex(), state, *manifest, rewrite).save(memo_dir);
      return serve(**object, manifest->has_depfile, rewrite.expand(manifest->depfile));
    }
    // Not stored for this state: the next manifest in the chain.
    record = next_manifest_record(manifest_key, state);
    manifest_key = record.key();
  }
  return run_plain(request, NvccOutcome::fallback, "more than 8 dependency manifests for one command");
}

}  // namespace kcache
