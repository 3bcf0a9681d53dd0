#include "cli/output.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/exit_codes.hpp"
#include "bundle/bundle_store.hpp"
#include "cache/lazy_file_tier.hpp"
#include "kcache/config.hpp"
#include "util/posix_io.hpp"

namespace kcache::cli {

int exit_code_for(const Error& error) noexcept {
  switch (error.code) {
    case ErrorCode::invalid_argument: return k_exit_usage;
    case ErrorCode::corrupt: return k_exit_corrupt;
    case ErrorCode::compile_failed: return k_exit_compile;
    case ErrorCode::toolkit_missing: return k_exit_toolkit;
    default: return k_exit_error;
  }
}

std::string hint_for(const Error& error) {
  switch (error.code) {
    case ErrorCode::permission_denied:
      return "check the owner and mode of the cache directory (`kcache config` shows it), or point "
             "KCACHE_DIR / --cache-dir at a directory you own";
    case ErrorCode::no_space:
      return "free some disk space, or lower the cap: `kcache prune --max-size 1G` and max_size in the config";
    case ErrorCode::read_only:
      return "the cache directory is on a read-only filesystem; set KCACHE_DIR to a writable directory";
    case ErrorCode::corrupt:
      return "run `kcache verify --repair`: it removes damaged entries and repairs the cache's layout";
    case ErrorCode::io: return "check the disk and the cache directory; `kcache verify` checks every entry";
    case ErrorCode::toolkit_missing: return "install the CUDA toolkit or set KCACHE_CUDA_HOME to where it is";
    case ErrorCode::internal: return "this is a bug in kcache; please report it with the command you ran";
    default: return {};
  }
}

int report(const Error& error, std::string_view hint) {
  std::fprintf(stderr, "kcache: error: %s\n", error.describe().c_str());
  if (!error.log.empty()) {
    std::fprintf(stderr, "%s%s", error.log.c_str(), error.log.back() == '\n' ? "" : "\n");
  }
  const std::string h = hint.empty() ? hint_for(error) : std::string(hint);
  if (!h.empty()) {
    std::fprintf(stderr, "kcache: hint: %s\n", h.c_str());
  }
  return exit_code_for(error);
}

void note(std::string_view line) { std::fprintf(stderr, "kcache: %.*s\n", static_cast<int>(line.size()), line.data()); }

Result<std::unique_ptr<FileStore>> open_file_store(const Context& ctx) {
  auto config = ctx.config();
  if (!config) {
    return tl::unexpected(config.error());
  }
  return FileStore::open(config->file_store_options());
}

std::string format_time(std::int64_t unix_ms) {
  if (unix_ms <= 0) {
    return "-";
  }
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string format_duration_us(std::uint64_t us) {
  if (us < 1000) {
    return fmt::format("{} us", us);
  }
  if (us < 1'000'000) {
    return fmt::format("{:.1f} ms", static_cast<double>(us) / 1e3);
  }
  if (us < 60'000'000) {
    return fmt::format("{:.2f} s", static_cast<double>(us) / 1e6);
  }
  const std::uint64_t s = us / 1'000'000;
  if (s < 3600) {
    return fmt::format("{} min {} s", s / 60, s % 60);
  }
  return fmt::format("{} h {:02} min", s / 3600, (s % 3600) / 60);
}

void print_table(const std::vector<std::vector<std::string>>& rows, const std::vector<std::size_t>& right) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (std::size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      const bool is_right = std::find(right.begin(), right.end(), i) != right.end();
      const bool last = i + 1 == row.size();
      if (i > 0) {
        line += "  ";
      }
      if (is_right) {
        line += fmt::format("{:>{}}", row[i], width[i]);
      } else if (last) {
        line += row[i];
      } else {
        line += fmt::format("{:<{}}", row[i], width[i]);
      }
    }
    line += '\n';
    std::fputs(line.c_str(), stdout);
  }
}

Result<void> FetchedEntry::copy_to(int out_fd, std::string_view out_name) const {
  if (!bundled) {
    return file.copy_to(out_fd, out_name);
  }
  auto* tier = dynamic_cast<bundle::BundleStore*>(bundle_tier.get());
  if (tier == nullptr) {
    return make_error(ErrorCode::internal, "a bundle hit without its bundle tier");
  }
  auto copied = tier->copy_payload(bundled->passport.key, [&](std::string_view chunk) -> Result<void> {
    if (const int e = util::io::write_all(out_fd, chunk); e != 0) {
      return tl::unexpected(Error{ErrorCode::io, "cannot write " + std::string(out_name) + ": " + std::strerror(e), {}});
    }
    return {};
  });
  if (!copied) {
    return tl::unexpected(copied.error());
  }
  if (!*copied) {
    return make_error(ErrorCode::corrupt, "the bundle that held " + bundled->passport.key.hex() +
                                              " was refused while it was copied");
  }
  return {};
}

int fetch_entry(const Context& ctx, const std::string& key_text, FetchedEntry& out) {
  auto key = Key::parse(key_text);
  if (!key) {
    return report(Error{ErrorCode::invalid_argument, "'" + key_text + "' is not a key", {}},
                  "a key is exactly 64 lowercase hex characters, as printed by `kcache put` or `kcache ls`");
  }
  auto config = ctx.config();
  if (!config) {
    return report(config.error());
  }
  // A read-only bundle image (bundles set, no cache layout yet, or a cache
  // directory that cannot be opened): the bundles answer and nothing is
  // written (docs/bundles.md).
  // A hit of the bundle tier, kept in `out`; false when it holds no such entry.
  const auto bundle_hit = [&] {
    if (auto bundles = open_configured_bundle_tier(*config)) {
      auto bundled = bundles->get(*key);
      if (bundled && bundled->has_value()) {
        out.bundled = std::move(**bundled);
        out.bundle_tier = std::move(bundles);
        return true;
      }
    }
    return false;
  };
  const auto from_bundles = [&](const std::string& disk_note) {
    if (bundle_hit()) {
      return k_exit_ok;
    }
    note("no entry for " + key->hex() + " (a miss" + disk_note + ")");
    return k_exit_miss;
  };
  if (!config->bundles.empty() && !cache_layout_exists(config->cache_dir)) {
    return from_bundles("; the cache directory holds no entries yet");
  }
  // A damaged entry is removed by get() and is a miss; say what was wrong.
  std::string damage;
  FileStoreOptions options = config->file_store_options();
  options.damaged = [&damage](const Key&, const std::string& why) { damage = why; };
  auto store = FileStore::open(std::move(options));
  if (!store) {
    if (!config->bundles.empty()) {
      note("warning: the cache directory cannot be used (" + store.error().message + "); only the bundles are asked");
      return from_bundles("");
    }
    return report(store.error());
  }
  // get() verifies the payload: only an entry that would be served is shown or written.
  auto got = (*store)->open_payload(*key);
  if (!got) {
    return report(got.error());
  }
  if (!got->has_value() && damage.empty()) {
    // The disk tier first (no bundle is opened for a disk hit), then the
    // bundle tier, which holds the same bytes for a key.
    if (bundle_hit()) {
      return k_exit_ok;
    }
  }
  if (!got->has_value()) {
    if (!damage.empty()) {
      note("the entry for " + key->hex() + " was damaged (" + damage +
           ") and has been removed: a miss. Store it again (kcache put, or the compile that made it)");
    } else {
      note("no entry for " + key->hex() + " (a miss)");
    }
    return k_exit_miss;
  }
  out.file = std::move(**got);
  return k_exit_ok;
}

}  // namespace kcache::cli

namespace kcache::cli {

int parse_keys(const std::vector<std::string>& texts, std::vector<Key>& keys) {
  for (const auto& text : texts) {
    auto key = Key::parse(text);
    if (!key) {
      return report(key.error());
    }
    keys.push_back(*key);
  }
  return k_exit_ok;
}

void print_tally(const Context& ctx, const std::vector<Tally>& tally) {
  if (ctx.json) {
    nlohmann::json j = nlohmann::json::object();
    for (const Tally& t : tally) {
      j[t.json_name] = t.count;
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::string line;
  for (const Tally& t : tally) {
    line += fmt::format("{}{} {}", line.empty() ? "" : ", ", t.label, t.count);
  }
  std::printf("%s\n", line.c_str());
}

}  // namespace kcache::cli
