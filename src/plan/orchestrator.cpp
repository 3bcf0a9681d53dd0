// The plan orchestrator: REUSED / FETCHED / BUILT per entry, atomic publish,
// events and outcomes (see kcache/orchestrator.hpp).
#include "kcache/orchestrator.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "kcache/engine_name.hpp"
#include "plan/sidecar.hpp"
#include "util/fd.hpp"
#include "util/hex.hpp"
#include "util/sha256.hpp"

namespace kcache {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

constexpr const char* k_staging = ".kcache-staging";

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<void> write_file(const fs::path& path, std::string_view bytes, Durability durability) {
  util::Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd) {
    return make_errno_error(errno, "create " + path.string());
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return make_errno_error(errno, "write " + path.string());
    }
    done += static_cast<std::size_t>(n);
  }
  if (durability == Durability::fsync && ::fsync(fd.get()) != 0) {
    return make_errno_error(errno, "fsync " + path.string());
  }
  return {};
}

Result<void> fsync_path(const fs::path& path, int flags) {
  util::Fd fd(::open(path.c_str(), flags | O_CLOEXEC));
  if (!fd) {
    return make_errno_error(errno, "open " + path.string());
  }
  if (::fsync(fd.get()) != 0) {
    return make_errno_error(errno, "fsync " + path.string());
  }
  return {};
}

Result<std::string> read_whole(const fs::path& path, std::size_t max) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return make_error(ErrorCode::not_found, path.string() + " cannot be read");
  }
  std::ostringstream s;
  s << in.rdbuf();
  std::string text = std::move(s).str();
  if (text.size() > max) {
    return make_error(ErrorCode::corrupt, path.string() + " is too large");
  }
  return text;
}

Result<void> rename_into(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return make_errno_error(errno, "rename " + from.string() + " -> " + to.string());
  }
  return {};
}

// Removes staging directories left by processes that no longer run.
void sweep_staging(const fs::path& staging_root) {
  std::error_code ec;
  for (const auto& dirent : fs::directory_iterator(staging_root, ec)) {
    const std::string name = dirent.path().filename().string();
    if (name == "locks") {
      continue;
    }
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str()));
    if (pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code ignore;
      fs::remove_all(dirent.path(), ignore);
    }
  }
}

// One exclusive lock per entry file name, held while the entry is processed.
class EntryLock {
 public:
  static Result<EntryLock> take(const fs::path& path) {
    util::Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (!fd) {
      return make_errno_error(errno, "open lock " + path.string());
    }
    while (::flock(fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) {
        return make_errno_error(errno, "lock " + path.string());
      }
    }
    EntryLock lock;
    lock.m_fd = std::move(fd);
    return lock;
  }

 private:
  util::Fd m_fd;
};

struct Shared {
  std::mutex mutex;
  std::atomic<bool> stop{false};
  std::size_t done = 0;
};

}  // namespace

fs::path plan_passport_path(const fs::path& file) {
  fs::path p = file;
  p += ".pass";
  return p;
}

Orchestrator::Orchestrator(OrchestratorOptions options) : m_options(std::move(options)) {
  if (m_options.jobs == 0) {
    m_options.jobs = 1;
  }
}

Result<void> Orchestrator::validate(const Plan& plan) const {
  if (m_options.builders == nullptr) {
    return make_error(ErrorCode::invalid_argument, "the orchestrator has no builder registry");
  }
  std::string log;
  std::string first;
  for (const auto& e : plan.entries) {
    const Builder* b = m_options.builders->find(e.builder);
    std::string problem;
    if (b == nullptr) {
      problem = "unknown builder '" + e.builder + "'; register it or use one of the shipped builders";
    } else if (auto ok = b->validate(e); !ok) {
      problem = ok.error().message;
    }
    if (!problem.empty()) {
      const std::string line = plan.file.string() + ":" + std::to_string(e.line) + ": " + problem;
      log += line + "\n";
      if (first.empty()) {
        first = line;
      }
    }
  }
  if (!first.empty()) {
    return make_error(ErrorCode::invalid_argument, first, log);
  }
  return {};
}

Result<std::string> Orchestrator::file_name(const PlanEntry& entry, const HostFingerprint& host) const {
  std::string kind = entry.kind;
  if (kind.empty() && m_options.builders != nullptr) {
    if (const Builder* b = m_options.builders->find(entry.builder)) {
      kind = b->default_kind();
    }
  }
  return EngineName{entry.name, host.sm, version_tag(host.jetpack), version_tag(host.trt), entry.precision,
                    extension_for_kind(kind)}
      .build();
}

Result<Key> Orchestrator::entry_key(const PlanEntry& entry, const HostFingerprint& host) const {
  auto kb = make_key_builder(entry, host);
  if (!kb) {
    return tl::unexpected(kb.error());
  }
  return kb->key();
}

Result<KeyBuilder> Orchestrator::make_key_builder(const PlanEntry& entry, const HostFingerprint& host) const {
  const Builder* b = m_options.builders == nullptr ? nullptr : m_options.builders->find(entry.builder);
  if (b == nullptr) {
    return make_error(ErrorCode::invalid_argument, "unknown builder '" + entry.builder + "'");
  }
  KeyBuilder kb("plan");
  kb.add("plan.key_schema", std::int64_t{1});
  kb.add("builder", entry.builder);
  kb.add("kind", entry.kind.empty() ? b->default_kind() : entry.kind);
  kb.add("precision", entry.precision);
  kb.add("host.sm", host.sm);
  kb.add("host.cuda", host.cuda);
  kb.add("host.trt", host.trt);
  kb.add("host.jp", host.jetpack);
  for (const auto& input : entry.inputs) {
    auto digest = plan::hash_file(input);
    if (!digest) {
      return make_error(digest.error().code, "cannot read input " + input.string() + ": " + digest.error().message);
    }
    const auto bytes = util::from_hex(digest->sha256);
    std::array<std::uint8_t, 32> raw{};
    std::copy(bytes->begin(), bytes->end(), raw.begin());
    kb.add_digest("input", raw);
  }
  for (const auto& f : entry.flags) {
    kb.add("flag", f);
  }
  for (const auto& [name, dims] : entry.shapes) {
    std::string text;
    for (const auto d : dims) {
      text += (text.empty() ? "" : "x") + std::to_string(d);
    }
    kb.add("shape." + name, text);
  }
  for (const auto& [k, v] : entry.options) {
    kb.add("option." + k, v);
  }
  b->add_key_fields(entry, host, kb);
  return kb;
}

Result<PlanReport> Orchestrator::run(const Plan& plan, const HostFingerprint& host) {
  const auto started = Clock::now();
  if (auto ok = validate(plan); !ok) {
    return tl::unexpected(ok.error());
  }
  PlanReport report;
  report.plan = plan.file.string();
  report.host = host.to_string();
  report.entries.resize(plan.entries.size());

  std::error_code ec;
  const fs::path staging_root = plan.output_dir / k_staging;
  fs::create_directories(staging_root / "locks", ec);
  if (ec) {
    return make_error(error_code_from_errno(ec.value()),
                      "cannot create output directory " + plan.output_dir.string() + ": " + ec.message() +
                          "; check output_dir in the plan and its permissions");
  }
  sweep_staging(staging_root);

  Shared shared;
  auto emit = [&](Json event) {
    if (!m_options.on_event) {
      return;
    }
    Json line;
    line["event"] = event["event"];
    line["ts_ms"] = now_unix_ms();
    for (auto it = event.begin(); it != event.end(); ++it) {
      if (it.key() != "event") {
        line[it.key()] = it.value();
      }
    }
    // Tool logs can hold any bytes: invalid UTF-8 is replaced, never thrown about.
    const std::string text = line.dump(-1, ' ', false, Json::error_handler_t::replace);
    std::lock_guard lock(shared.mutex);
    m_options.on_event(text);
  };

  std::atomic<std::size_t> next{0};
  std::atomic<unsigned> seq{0};
  std::map<std::string, std::mutex> serial_locks;
  for (const auto& name : m_options.builders->names()) {
    serial_locks[name];
  }

  auto process = [&](std::size_t index) {
    const PlanEntry& entry = plan.entries[index];
    EntryResult& r = report.entries[index];
    r.name = entry.name;
    const Builder& builder = *m_options.builders->find(entry.builder);
    const std::string kind = entry.kind.empty() ? builder.default_kind() : entry.kind;
    const auto finisher_it = m_options.finishers.find(kind);
    const ArtifactFinisher* finisher = finisher_it == m_options.finishers.end() ? nullptr : finisher_it->second.get();
    Json inputs = Json::array();
    for (const auto& in : entry.inputs) {
      inputs.push_back(in.string());
    }
    auto fail = [&](const Error& error) {
      r.outcome = Outcome::failed;
      r.error = error.message;
      r.log = error.log;
      emit(Json{{"event", "engine.build.error"}, {"name", entry.name}, {"builder", entry.builder},
                {"inputs", inputs},      {"path", r.path},        {"code", std::string(to_string(error.code))},
                {"error", error.message}, {"log", error.log.size() > 4096 ? error.log.substr(error.log.size() - 4096) : error.log}});
    };

    auto name = file_name(entry, host);
    if (!name) {
      fail(name.error());
      return;
    }
    const fs::path path = plan.output_dir / *name;
    const fs::path sidecar = plan::sidecar_path(path);
    const fs::path passport_path = plan_passport_path(path);
    r.path = path.string();
    r.sidecar = sidecar.string();

    auto lock = EntryLock::take(staging_root / "locks" / (*name + ".lock"));
    if (!lock) {
      fail(lock.error());
      return;
    }
    auto key_builder = make_key_builder(entry, host);
    if (!key_builder) {
      fail(key_builder.error());
      return;
    }
    const std::optional<Key> key = key_builder->key();
    r.key = key->hex();

    // 1. Reuse what is already published and verified.
    const plan::SidecarCheck check = plan::check_sidecar(path);
    std::string reason = "absent";
    switch (check.state) {
      case plan::SidecarState::ok: {
        auto text = read_whole(passport_path, k_passport_max_bytes);
        auto passport = text ? Passport::from_json(*text) : Result<Passport>(tl::unexpected(text.error()));
        if (!passport) {
          reason = "no valid passport beside the file";
        } else if (passport->key != *key) {
          reason = "stale: built from other inputs (key " + passport->key.hex().substr(0, 12) + ")";
        } else if (passport->payload_sha256 != check.digest.sha256) {
          reason = "passport digest differs from the file";
        } else if (auto fin = finisher != nullptr ? finisher->check(path, *key) : Result<void>(); !fin) {
          reason = "artifact check failed: " + fin.error().message;
        } else {
          r.outcome = Outcome::reused;
          r.sha256 = check.digest.sha256;
          r.size = check.digest.size;
          r.saved_seconds = static_cast<double>(passport->compile_duration_us) / 1e6;
          emit(Json{{"event", "engine.cache.hit"}, {"name", entry.name}, {"tier", "output"}, {"path", r.path},
                    {"key", r.key},                 {"sha256", r.sha256}, {"size", r.size}});
          return;
        }
        break;
      }
      case plan::SidecarState::mismatch:
      case plan::SidecarState::bad_sidecar:
        reason = "sidecar mismatch";
        emit(Json{{"event", "engine.sidecar.mismatch"}, {"name", entry.name}, {"path", r.path}, {"sidecar", r.sidecar},
                  {"expected", check.sidecar_sha256}, {"actual", check.digest.sha256},
                  {"state", std::string(plan::to_string(check.state))}});
        break;
      case plan::SidecarState::missing_sidecar:
        reason = "no sidecar (an unfinished publish)";
        break;
      case plan::SidecarState::missing_file:
        break;
    }

    // A private staging directory for this attempt.
    const fs::path work = staging_root / (std::to_string(::getpid()) + "-" + std::to_string(seq.fetch_add(1)) + "-" + *name);
    std::error_code wec;
    fs::remove_all(work, wec);
    if (!fs::create_directory(work, wec)) {
      fail(Error{error_code_from_errno(wec.value()), "cannot create staging directory " + work.string() + ": " + wec.message(), {}});
      return;
    }
    struct Cleanup {
      fs::path dir;
      ~Cleanup() {
        std::error_code ignore;
        fs::remove_all(dir, ignore);
      }
    } cleanup{work};
    const fs::path staged = work / *name;

    auto publish = [&](const Passport& passport) -> Result<void> {
      if (m_options.durability == Durability::fsync) {
        if (auto ok = fsync_path(staged, O_RDONLY); !ok) {
          return ok;
        }
      }
      if (auto ok = write_file(work / "passport", passport.to_json(), m_options.durability); !ok) {
        return ok;
      }
      if (auto ok = write_file(work / "sidecar", plan::sidecar_text(passport.payload_sha256, *name), m_options.durability);
          !ok) {
        return ok;
      }
      // The old sidecar goes first, so an old sidecar never vouches for a new file.
      for (const auto& old : {sidecar, passport_path}) {
        if (::unlink(old.c_str()) != 0 && errno != ENOENT) {
          return make_errno_error(errno, "remove " + old.string());
        }
      }
      if (auto ok = rename_into(staged, path); !ok) {
        return ok;
      }
      if (auto ok = rename_into(work / "passport", passport_path); !ok) {
        return ok;
      }
      if (auto ok = rename_into(work / "sidecar", sidecar); !ok) {
        return ok;
      }
      if (m_options.durability == Durability::fsync) {
        return fsync_path(plan.output_dir, O_RDONLY | O_DIRECTORY);
      }
      return {};
    };

    // 2. Fetch from the content cache.
    if (m_options.cache != nullptr) {
      auto got = m_options.cache->get(*key);
      if (got && got->has_value()) {
        const Artifact& artifact = **got;
        Result<void> ok = write_file(staged, artifact.payload, m_options.durability);
        if (ok && finisher != nullptr) {
          ok = finisher->check(staged, *key);
        }
        if (ok) {
          ok = publish(artifact.passport);
        }
        if (ok) {
          r.outcome = Outcome::fetched;
          r.sha256 = artifact.passport.payload_sha256;
          r.size = artifact.payload.size();
          r.saved_seconds = static_cast<double>(artifact.passport.compile_duration_us) / 1e6;
          emit(Json{{"event", "engine.cache.hit"}, {"name", entry.name}, {"tier", "store"}, {"path", r.path},
                    {"key", r.key},                 {"sha256", r.sha256}, {"size", r.size}});
          return;
        }
        reason += "; cached copy unusable: " + ok.error().message;
      }
    }

    // 3. Build.
    emit(Json{{"event", "engine.cache.miss"}, {"name", entry.name}, {"path", r.path}, {"key", r.key}, {"reason", reason}});
    r.reason = reason;
    const auto build_start = Clock::now();
    const BuildRequest request{entry, host, kind, staged, work, work / "build.log"};
    Result<BuildOutput> built = [&] {
      if (builder.concurrency() == Concurrency::serial) {
        // find() is safe to call from several threads at once (operator[] is not).
        std::lock_guard serial(serial_locks.find(entry.builder)->second);
        return builder.build(request);
      }
      return builder.build(request);
    }();
    if (!built) {
      fail(built.error());
      return;
    }
    struct stat st {};
    if (::lstat(staged.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
      fail(Error{ErrorCode::compile_failed,
                 "builder '" + entry.builder + "' finished but wrote no output (or an empty one) to {output}; check the "
                 "command writes its result to the {output} path", built->log});
      return;
    }
    if (finisher != nullptr) {
      if (auto ok = finisher->finish(staged, entry, *key); !ok) {
        fail(ok.error());
        return;
      }
    }
    const double build_seconds = seconds_since(build_start);
    auto payload = read_whole(staged, std::numeric_limits<std::size_t>::max());
    if (!payload) {
      fail(payload.error());
      return;
    }
    Passport passport;
    passport.key = *key;
    passport.key_record = key_builder->record();
    passport.kind = kind;
    passport.producer = built->producer;
    passport.target = Target{host.sm == "na" ? std::string() : "sm_" + host.sm, host.to_string()};
    passport.payload_size = payload->size();
    passport.payload_sha256 = util::sha256_hex(*payload);
    passport.created_unix_ms = now_unix_ms();
    passport.compile_duration_us = static_cast<std::uint64_t>(build_seconds * 1e6);
    passport.log = built->log.size() > k_passport_max_log_bytes ? built->log.substr(0, k_passport_max_log_bytes) : built->log;
    passport.labels = entry.labels;
    passport.labels["plan.entry"] = entry.name;
    passport.labels["plan.precision"] = entry.precision;
    if (auto ok = publish(passport); !ok) {
      fail(ok.error());
      return;
    }
    r.outcome = Outcome::built;
    r.sha256 = passport.payload_sha256;
    r.size = passport.payload_size;
    r.build_seconds = build_seconds;
    if (m_options.cache != nullptr) {
      // A broken cache never breaks a build: a failed put is only reported as an event field.
      (void)m_options.cache->put(Artifact{std::move(*payload), passport});
    }
  };

  auto worker = [&] {
    while (true) {
      const std::size_t index = next.fetch_add(1);
      if (index >= plan.entries.size()) {
        return;
      }
      EntryResult& r = report.entries[index];
      if (shared.stop.load()) {
        r.name = plan.entries[index].name;
        r.outcome = Outcome::not_started;
        if (auto n = file_name(plan.entries[index], host)) {
          r.path = (plan.output_dir / *n).string();
          r.sidecar = plan::sidecar_path(r.path).string();
        }
        continue;
      }
      process(index);
      if (r.outcome == Outcome::failed && m_options.keep_going == KeepGoing::no) {
        shared.stop.store(true);
      }
      if (m_options.on_progress) {
        std::lock_guard lock(shared.mutex);
        ++shared.done;
        m_options.on_progress(r, shared.done, plan.entries.size());
      }
    }
  };

  const unsigned threads = std::min<unsigned>(m_options.jobs, static_cast<unsigned>(std::max<std::size_t>(1, plan.entries.size())));
  if (threads <= 1) {
    worker();
  } else {
    std::vector<std::jthread> pool;
    for (unsigned i = 0; i < threads; ++i) {
      pool.emplace_back(worker);
    }
  }
  report.summary.seconds = seconds_since(started);
  report.summarise();
  emit(Json{{"event", "engine.build.summary"}, {"plan", report.plan}, {"host", report.host},
            {"entries", report.summary.entries}, {"built", report.summary.built}, {"reused", report.summary.reused},
            {"fetched", report.summary.fetched}, {"failed", report.summary.failed},
            {"not_started", report.summary.not_started}, {"hit_ratio", report.summary.hit_ratio},
            {"seconds", report.summary.seconds}, {"saved_seconds", report.summary.saved_seconds}});
  return report;
}

}  // namespace kcache
