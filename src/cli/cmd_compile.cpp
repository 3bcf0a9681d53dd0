// kcache compile: CUDA C++ to PTX, cubin or LTO-IR through the cache (docs/jit.md).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cache/store_warnings.hpp"
#include "cli/compile_cli_support.hpp"
#include "compile/backends.hpp"
#include "kcache/cache.hpp"
#include "kcache/compiler.hpp"
#include "kcache/passport.hpp"
#include "kcache/worker_pool.hpp"
#include "worker/compile_progress.hpp"

namespace kcache::cli {

namespace {

struct CompileArgs {
  std::vector<std::string> files;
  std::string target = "cubin";
  std::string arch;
  std::vector<std::string> include_dirs;
  std::vector<std::string> defines;
  std::vector<std::string> name_expressions;
  std::vector<std::string> extra_options;
  std::string output;
  std::string extra_digest;
  bool no_cache = false;
  bool json = false;
  bool explain = false;
  bool quiet = false;
  unsigned jobs = 0;  // 0: the `jobs` setting (0 there: the number of cores)
};

// With --explain on a miss: the stored entry of the same backend whose key
// record is nearest (fewest differing fields), and the fields that differ.
void explain_miss(Store* store, const Key& key, const KeyBuilder& record) {
  std::printf("key %s: miss\n", key.hex().c_str());
  if (store == nullptr) {
    std::printf("no cache in use (--no-cache, the cache is disabled, or it could not be opened)\n");
    return;
  }
  auto entries = store->list();
  if (!entries) {
    std::printf("cannot list the cache: %s\n", entries.error().describe().c_str());
    return;
  }
  std::optional<Passport> best;
  std::size_t best_diff = SIZE_MAX;
  std::size_t looked = 0;
  for (const auto& e : *entries) {
    if (e.key == key || ++looked > 2000) {
      continue;
    }
    auto got = store->get(e.key);
    if (!got || !*got || (*got)->passport.key_record.domain != record.record().domain) {
      continue;
    }
    const auto n = diff((*got)->passport.key_record, record.record()).size();
    if (n < best_diff) {
      best_diff = n;
      best = (*got)->passport;
    }
  }
  if (!best) {
    std::printf("the cache holds no entry of this backend to compare with; this key record:\n");
    for (const auto& f : record.record().fields) {
      std::printf("  %s = %s%s\n", f.name.c_str(), f.digested ? "sha256:" : "", f.value.c_str());
    }
    return;
  }
  std::printf("nearest cached entry: %s\n", best->key.hex().c_str());
  print_key_diff(best->key_record, record.record(), "cached", "this");
}

CompileRequest make_request(const CompileArgs& args, const std::string& file, std::string source) {
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = file;  // NVRTC resolves quoted includes relative to the name's directory
  r.source = std::move(source);
  r.source_path = file;
  r.target_kind = args.target;
  if (!args.arch.empty()) {
    r.options.push_back("--gpu-architecture=" + args.arch);
  }
  for (const auto& d : args.include_dirs) {
    r.options.push_back("--include-path=" + d);
  }
  for (const auto& d : args.defines) {
    r.options.push_back("--define-macro=" + d);
  }
  for (const auto& o : args.extra_options) {
    r.options.push_back(o);
  }
  r.name_expressions = args.name_expressions;
  r.extra_digest = args.extra_digest;
  return r;
}

std::string output_path(const CompileArgs& args, const std::string& file) {
  if (!args.output.empty()) {
    return args.output;
  }
  return std::filesystem::path(file).filename().replace_extension("." + args.target).string();
}

// One line per output on a terminal (docs/cli.md, "What compile prints"):
// nothing with -q, --json or --explain, or when stdout is not a terminal, so
// scripts and build logs stay clean.
bool says_what_it_did(const CompileArgs& args) {
  return !args.quiet && !args.json && !args.explain && ::isatty(STDOUT_FILENO) != 0;
}

// Refuses, before anything is compiled, inputs whose outputs would overwrite
// one another (`s3/k.cu s4/k.cu` both make ./k.cubin) or an input.
int check_outputs_apart(const CompileArgs& args) {
  namespace fs = std::filesystem;
  // One input: its output can only overwrite it when both names are one
  // file already. An output that does not exist, or is another file (device,
  // inode), is apart without resolving every component of both paths
  // (two getcwd and a readlink per component: a tenth of a cache hit's
  // system calls). The same file under two names (a hard link) is judged by
  // the paths below, as before.
  if (args.files.size() == 1) {
    const std::string out = output_path(args, args.files.front());
    struct stat out_st {};
    struct stat in_st {};
    if (out == "-") {
      return k_exit_ok;
    }
    if (::stat(out.c_str(), &out_st) != 0) {
      if (errno == ENOENT) {
        return k_exit_ok;
      }
    } else if (::stat(args.files.front().c_str(), &in_st) != 0 || in_st.st_dev != out_st.st_dev ||
               in_st.st_ino != out_st.st_ino) {
      return k_exit_ok;
    }
  }
  std::map<std::string, std::string> input_of;  // output, as a normalised absolute path -> input
  for (const auto& file : args.files) {
    std::error_code ec;
    const std::string out = output_path(args, file);
    const std::string where = fs::weakly_canonical(fs::absolute(out, ec), ec).string();
    if (const auto [it, fresh] = input_of.emplace(where, file); !fresh) {
      std::fprintf(stderr,
                   "kcache: error: invalid_argument: %s and %s would both be written to %s, one over the other\n"
                   "kcache: hint: compile them one at a time with -o, from different directories, or rename one\n",
                   it->second.c_str(), file.c_str(), out.c_str());
      return k_exit_usage;
    }
  }
  for (const auto& file : args.files) {
    std::error_code ec;
    const auto it = input_of.find(fs::weakly_canonical(fs::absolute(file, ec), ec).string());
    if (it != input_of.end()) {
      std::fprintf(stderr,
                   "kcache: error: invalid_argument: the output of %s would overwrite the input %s\n"
                   "kcache: hint: name another output with -o\n",
                   it->second.c_str(), file.c_str());
      return k_exit_usage;
    }
  }
  return k_exit_ok;
}

// The single-flight cache over the environment's store: its locks, its
// cross-host lease (if any), and its warnings said once (store_warnings.hpp).
std::unique_ptr<Cache> make_cache(CompileEnvironment& env) {
  CacheOptions options;
  options.lock_dir = env.config.cache_dir / "v1" / "locks";
  options.remote_lease = env.remote_lease;
  options.warn = store_warnings::sink(store_warnings::Source::layer);
  return std::make_unique<Cache>(*env.store, options);
}

// Several files with more than one job: compile in the worker pool, one
// compile per key across processes (single-flight), results in input order.
int run_compile_in_pool(const CompileArgs& args, CompileEnvironment& env,
                        const std::vector<CompileRequest>& requests, unsigned jobs) {
  WorkerPoolOptions options;
  options.workers = jobs;
  // Workers keep their memos where this process does, and none when it keeps none.
  options.arguments = env.memo_dir.empty() ? std::vector<std::string>{"worker", "--no-memo"}
                                           : std::vector<std::string>{"worker", "--memo-dir", env.memo_dir.string()};
  if (!env.store) {
    options.arguments.emplace_back("--no-cache");  // each worker compiles with no key derived
  }
  auto pool = WorkerPool::create(options);
  if (!pool) {
    return report_error(pool.error());
  }
  std::unique_ptr<Cache> cache;
  if (env.store) {
    cache = make_cache(env);
  }
  const auto results = (*pool)->compile_many(
      requests, cache.get(), worker::make_progress_printer(stderr, worker::progress_style_for(stderr)));
  nlohmann::json report = nlohmann::json::array();
  int status = k_exit_ok;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const std::string& file = requests[i].source_path;
    if (!results[i]) {
      status = report_error(results[i].error());
      continue;
    }
    const std::string out = output_path(args, file);
    if (auto w = write_atomically(out, results[i]->payload); !w) {
      return report_output_error(w.error());
    }
    if (says_what_it_did(args) && out != "-") {
      std::printf("%s -> %s\n", file.c_str(), out.c_str());
    }
    if (args.json) {
      nlohmann::json j;
      j["input"] = file;
      j["output"] = out;
      j["key"] = results[i]->passport.key.hex();
      j["passport"] = nlohmann::json::parse(results[i]->passport.to_json());
      report.push_back(std::move(j));
    }
  }
  if (args.json) {
    std::printf("%s\n", report.dump(2).c_str());
  }
  return status;
}

// With a cross-host lease (a Redis team remote): compile through the
// single-flight Cache, so that one process per key on this host, and one host
// per key in the team, compiles it. Fills `info` as compile() does.
Result<Artifact> compile_with_lease(const CompileRequest& request, Cache& cache, bool queued_puts,
                                    CompileInfo& info) {
  using Clock = std::chrono::steady_clock;
  const auto micros = [](Clock::time_point since) {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - since).count());
  };
  info = CompileInfo{};
  const auto t0 = Clock::now();
  auto key = derive_key(request, &info.headers);
  info.key_us = micros(t0);
  if (!key) {
    // Not cacheable, or a bad request: the plain path reports it as always.
    return compile(request, &cache.store(), &info);
  }
  info.key = key->key();
  const auto t1 = Clock::now();
  CacheOutcome outcome = CacheOutcome::hit;
  auto artifact = cache.get_or_compile(
      info.key,
      [&]() -> Result<CompileOutput> {
        CompileInfo compiled;
        auto a = compile_uncached(request, &compiled);
        info.compile_us = compiled.compile_us;
        info.toolkit_loaded = compiled.toolkit_loaded;
        info.cacheable = compiled.cacheable;
        info.not_cacheable_reason = compiled.not_cacheable_reason;
        if (!a && compiled.failed_entry) {
          return CompileOutput{std::move(*compiled.failed_entry), true};  // the Cache stores it, returns the error
        }
        if (!a) {
          return tl::unexpected(a.error());
        }
        return CompileOutput{std::move(*a), compiled.cacheable};
      },
      &outcome);
  if (!artifact) {
    return artifact;
  }
  info.hit = outcome == CacheOutcome::hit || outcome == CacheOutcome::hit_after_wait;
  if (info.hit) {
    info.lookup_us = micros(t1);
  }
  info.stored = outcome == CacheOutcome::compiled;
  info.store_queued = info.stored && queued_puts;
  return artifact;
}

int run_compile(const Context& ctx, const CompileArgs& args) {
  if (args.files.size() > 1 && !args.output.empty()) {
    std::fputs("kcache: error: -o needs exactly one input file\n", stderr);
    return k_exit_usage;
  }
  if (const int status = check_outputs_apart(args); status != k_exit_ok) {
    return status;
  }
  auto env = open_compile_environment(ctx, args.no_cache, BadSettings::compile_without_cache, "compiling",
                                      args.files.size() == 1 ? OneOutput::yes : OneOutput::no);
  if (!env) {
    return report_error(env.error());
  }
  std::vector<CompileRequest> requests;
  for (const auto& file : args.files) {
    int read_status = k_exit_error;
    auto source = read_input_file(file, read_status, jit::k_nvrtc_max_text_bytes, NulBytes::refused);
    if (!source) {
      return read_status;
    }
    requests.push_back(make_request(args, file, std::move(*source)));
  }
  const unsigned jobs = args.jobs != 0 ? args.jobs : env->config.jobs;  // 0: number of cores
  if (requests.size() > 1 && jobs != 1 && !args.explain) {
    return run_compile_in_pool(args, *env, requests, jobs);
  }
  std::unique_ptr<Cache> leased;
  if (env->store && env->remote_lease) {
    leased = make_cache(*env);
  }
  nlohmann::json results = nlohmann::json::array();
  int status = k_exit_ok;
  for (const auto& r : requests) {
    const std::string& file = r.source_path;
    CompileInfo info;
    const auto started = std::chrono::steady_clock::now();
    TieredStore::start_lookup_trace();
    auto artifact = leased ? compile_with_lease(r, *leased, env->config.put == PutMode::background, info)
                           : compile(r, env->store.get(), &info);
    const auto lookups = TieredStore::take_lookup_trace();
    const auto took_us = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started).count());
    if (!artifact) {
      status = report_error(artifact.error());
      continue;
    }
    if (!info.store_warning.empty()) {
      store_warnings::warn(store_warnings::Source::layer, info.store_warning);
    }
    const std::string out = output_path(args, file);
    if (auto w = write_atomically(out, artifact->payload); !w) {
      return report_output_error(w.error());
    }
    if (says_what_it_did(args) && out != "-") {
      std::printf("%s -> %s: %s, %.1f ms\n", file.c_str(), out.c_str(), info.hit ? "hit" : "compiled (miss)",
                  static_cast<double>(took_us) / 1e3);
    }
    if (args.explain) {
      if (info.hit) {
        std::printf("key %s: hit\n", info.key.hex().c_str());
      } else if (auto kb = derive_key(r)) {
        explain_miss(env->store.get(), info.key, *kb);
      } else {
        std::printf("not cacheable: %s\n", info.not_cacheable_reason.c_str());
      }
    }
    if (args.json) {
      auto j = info_json(info);
      add_lookups_json(j, lookups, info.hit);
      j["input"] = file;
      j["output"] = out;
      j["passport"] = nlohmann::json::parse(artifact->passport.to_json());
      results.push_back(std::move(j));
    } else if (ctx.verbose) {
      std::fprintf(stderr, "%s -> %s (%s, key %s)\n", file.c_str(), out.c_str(), info.hit ? "hit" : "compiled",
                   info.key.hex().c_str());
    }
  }
  if (args.json) {
    std::printf("%s\n", (results.size() == 1 ? results[0] : results).dump(2).c_str());
  }
  return status;
}

// (parse_compile_quickly() below knows these names: a change here is checked
// by CliQuickParserTest.*.)
void register_compile(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto args = std::make_shared<CompileArgs>();
  auto* cmd = app.add_subcommand("compile", "Compile CUDA C++ with NVRTC through the cache");
  cmd->add_option("files", args->files, "CUDA C++ source files")->required();
  cmd->add_option("--target", args->target, "What to produce")
      ->check(CLI::IsMember({"ptx", "cubin", "ltoir"}))
      ->capture_default_str();
  cmd->add_option("--arch,-a", args->arch, "GPU architecture: sm_90, sm_90a, compute_90 ...");
  cmd->add_option("-I,--include-path", args->include_dirs, "Add an include directory")->type_name("DIR");
  cmd->add_option("-D,--define-macro", args->defines, "Define a macro: X or X=Y")->type_name("DEF");
  cmd->add_option("--name-expression,-e", args->name_expressions,
                  "A name expression whose lowered name goes into the symbol map (\"kernel<float>\")");
  cmd->add_option("-X,--option", args->extra_options, "Pass an NVRTC option through (\"-lineinfo\")")
      ->allow_extra_args(false);
  cmd->add_option("-o,--output", args->output, "Output file (default: <stem>.<target> here; `-` is stdout). A regular file is replaced "
                  "atomically, a device, FIFO or symlink target is written in place");
  cmd->add_option("--extra-digest", args->extra_digest, "Mix anything kcache cannot see into the key");
  cmd->add_flag("--no-cache", args->no_cache, "Compile without looking up or storing");
  cmd->add_option("-j,--jobs", args->jobs,
                  "With several files: compile in N worker processes (default: the jobs setting, "
                  "0 = number of cores; 1 = one after another in this process)")
      ->type_name("N");
  cmd->add_flag("--json", args->json, "Print what happened and the passport as JSON");
  cmd->add_flag("-q,--quiet", args->quiet,
                "Print nothing on success (without -q: one line per file when stdout is a terminal)");
  cmd->add_flag("--explain", args->explain, "Say why the compile missed: the fields that differ from the nearest entry");
  cmd->callback([&ctx, &run, args] { run = [&ctx, args] { return run_compile(ctx, *args); }; });
}

// The quick parser of `kcache compile` (command.hpp): it takes the words
// only when CLI11, given the same words, would set the same CompileArgs and
// global options, and otherwise leaves them to CLI11 (errors, help, `--x=y`,
// joined short options, `--`, a value that starts with '-', an option given
// twice, `--set` / `--remote`, global options before the command). A value
// of -I, -D, -e or -X followed by a plain word is left to CLI11 too: CLI11
// gives such options every plain word up to the next option.
// Test: CliQuickParserTest.* runs each spelling both ways and compares.
bool parse_compile_quickly(const std::vector<std::string_view>& words, Context& ctx, std::function<int()>& run) {
  auto args = std::make_shared<CompileArgs>();
  std::set<std::string_view> seen;  // options that take one value or are flags: once each
  const auto once = [&seen](std::string_view name) { return seen.insert(name).second; };
  const auto plain = [](std::string_view w) { return !w.empty() && w.front() != '-'; };
  std::map<std::string, std::string> overrides;
  std::optional<std::string> config_file;
  bool verbose = false;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string_view w = words[i];
    if (plain(w)) {
      if (commands().contains(std::string(w))) {
        return false;  // CLI11 may take it for a command
      }
      args->files.emplace_back(w);
      continue;
    }
    // Flags.
    bool* flag = w == "--no-cache" ? &args->no_cache
                 : w == "--json"   ? &args->json
                 : (w == "-q" || w == "--quiet") ? &args->quiet
                 : w == "--explain" ? &args->explain
                 : (w == "-v" || w == "--verbose") ? &verbose
                                                   : nullptr;
    if (flag != nullptr) {
      if (!once(w == "-q" ? "--quiet" : w == "-v" ? "--verbose" : w)) {
        return false;
      }
      *flag = true;
      continue;
    }
    // Options with one value: the next word, which must be plain.
    if (i + 1 >= words.size() || !plain(words[i + 1])) {
      return false;
    }
    const std::string value(words[i + 1]);
    std::vector<std::string>* list = (w == "-I" || w == "--include-path")         ? &args->include_dirs
                                     : (w == "-D" || w == "--define-macro")       ? &args->defines
                                     : (w == "-e" || w == "--name-expression")    ? &args->name_expressions
                                     : (w == "-X" || w == "--option")             ? &args->extra_options
                                                                                  : nullptr;
    if (list != nullptr) {
      if (i + 2 < words.size() && plain(words[i + 2])) {
        return false;  // CLI11 would give the option that word too
      }
      list->push_back(value);
      ++i;
      continue;
    }
    std::string* single = w == "--target"                      ? &args->target
                          : (w == "--arch" || w == "-a")       ? &args->arch
                          : (w == "-o" || w == "--output")     ? &args->output
                          : w == "--extra-digest"              ? &args->extra_digest
                          : w == "--cache-dir"                 ? &overrides["cache_dir"]
                          : w == "--max-size"                  ? &overrides["max_size"]
                                                               : nullptr;
    const std::string_view canonical = w == "-a" ? "--arch" : w == "-o" ? "--output" : w;
    if (single != nullptr) {
      if (!once(canonical) || (w == "--target" && value != "ptx" && value != "cubin" && value != "ltoir")) {
        return false;
      }
      *single = value;
      ++i;
      continue;
    }
    if (w == "-j" || w == "--jobs") {
      // Plain decimal only (CLI11 reads 010 as octal and 0x10 as hex).
      if (!once("--jobs") || value.size() > 9 || (value.size() > 1 && value.front() == '0') ||
          value.find_first_not_of("0123456789") != std::string::npos) {
        return false;
      }
      args->jobs = static_cast<unsigned>(std::stoul(value));
      ++i;
      continue;
    }
    if (w == "--config") {
      if (!once(w)) {
        return false;
      }
      config_file = value;
      ++i;
      continue;
    }
    return false;  // an option the quick parser does not know
  }
  if (args->files.empty()) {
    return false;  // CLI11 says what is missing
  }
  // Taken: only now is `ctx` changed.
  for (auto& [key, value] : overrides) {
    ctx.overrides[key] = std::move(value);
  }
  if (config_file) {
    ctx.config_file = std::move(*config_file);
  }
  ctx.verbose = verbose;
  run = [&ctx, args] { return run_compile(ctx, *args); };
  return true;
}

}  // namespace

KCACHE_COMMAND(compile, register_compile);
KCACHE_QUICK_PARSER(compile, parse_compile_quickly);

}  // namespace kcache::cli
