// kcache remote keygen FILE | ping | ls | rm KEY...: the team tier's commands
// (docs/cli.md, "kcache remote").
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/remote_tiers.hpp"
#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"
#include "store/remote/remote_backend.hpp"
#include "store/remote/remote_probe.hpp"
#include "store/remote/team_key.hpp"

namespace kcache::cli {
namespace {

constexpr std::string_view k_object_prefix = "kcache:v1:";

int run_keygen(const std::string& file) {
  auto key = remote::generate_team_key_file(file);
  if (!key) {
    report(key.error(), "give a path that does not exist yet; kcache never replaces a key file");
    return k_exit_error;
  }
  // The id identifies the key in `kcache remote ping` and docs; it reveals nothing of it.
  std::printf("wrote a new team key to %s (mode 0600, key id %s)\n", file.c_str(), key->id_hex().c_str());
  std::printf("set remote_key_file = \"%s\" on every host that publishes to or reads from the team cache\n",
              file.c_str());
  return k_exit_ok;
}

// One configured remote, talked to through its backend directly: these are
// commands a person runs on purpose, so the circuit breaker (which protects
// compiles from a failing remote) does not apply.
struct Target {
  remote::RemoteSpec spec;
  std::unique_ptr<remote::RemoteBackend> backend;
};

// Loads the settings (into `config`) and the configured remotes, in order.
// Returns k_exit_ok, or reports why there are none (bad settings; no remote
// configured: exit 2; a URL that does not parse: its exit code) and returns
// the exit code.
int open_targets(const Context& ctx, Config& config, std::vector<Target>& out) {
  auto loaded = ctx.config();
  if (!loaded) {
    return report(loaded.error());
  }
  config = std::move(*loaded);
  if (config.remote.empty()) {
    return report(Error{ErrorCode::invalid_argument, "no remote is configured", {}},
                  "set `remote` in the config file, KCACHE_REMOTE, or pass --remote URL");
  }
  for (const std::string& url : config.remote) {
    auto spec = configured_remote_spec(config, url);
    if (!spec) {
      return report(spec.error());
    }
    auto backend = remote::make_backend(*spec);
    if (!backend) {
      return report(backend.error());
    }
    out.push_back(Target{std::move(*spec), std::move(*backend)});
  }
  return k_exit_ok;
}

const char* check_name(remote::ProbeReport::Check c) {
  switch (c) {
    case remote::ProbeReport::Check::ok:
      return "ok";
    case remote::ProbeReport::Check::failed:
      return "failed";
    case remote::ProbeReport::Check::skipped:
      break;
  }
  return "not_checked";
}

// What to do about the failure of a ping, by the step that failed.
std::string ping_hint(const remote::ProbeReport& r, const remote::RemoteSpec& spec) {
  const Error& e = *r.error;
  const bool http = spec.scheme == remote::Scheme::http || spec.scheme == remote::Scheme::https;
  const auto says = [&](std::string_view text) { return e.message.find(text) != std::string::npos; };
  const bool refused = e.code == ErrorCode::permission_denied || says("NOAUTH") || says("WRONGPASS");
  const bool s3 = spec.scheme == remote::Scheme::s3;
  if (s3 && e.code == ErrorCode::not_found) {
    return "create the bucket (aws s3 mb s3://BUCKET, or the store's own tool), or fix the bucket name, endpoint "
           "and region in the URL; kcache compiles without this remote meanwhile";
  }
  if (r.reach == remote::ProbeReport::Check::failed && !refused) {
    return "check the host, port and that the server runs; kcache compiles without this remote meanwhile";
  }
  if (refused) {
    if (r.write == remote::ProbeReport::Check::failed) {
      return "the server lets this user read but not write: grant it writes, or set read_only=true on this URL "
             "(a reader sends no write)";
    }
    if (s3) {
      return "the server refused the credentials: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or the AWS "
             "profile (AWS_PROFILE or ?profile=, in ~/.aws/credentials), and that the bucket's policy lets them in";
    }
    return http ? "the server refused the credentials: check user:password in the URL, basic_auth_file / "
                  "basic_auth_env or bearer_token_file / bearer_token_env"
                : "the server refused the credentials: check user:password in the URL and the server's ACL";
  }
  if (http && (says("HTTP 405") || says("HTTP 404") || says("HTTP 403"))) {
    return "this URL is not a writable WebDAV location: enable PUT and DELETE for it (nginx: dav_methods PUT "
           "DELETE; create_full_put_path on; see docs/remote-format.md), or set read_only=true";
  }
  if (http && says("HTTP 5")) {
    return "the server failed to store the probe; see its error log (nginx: its worker user must own the root and "
           "client_body_temp_path, as docs/remote-format.md shows)";
  }
  if (r.team_key == remote::ProbeReport::Check::failed) {
    return "this host cannot verify what it signs: check remote_key_file and remote_read_key_files";
  }
  return "see the error above; compiles go on without this remote meanwhile";
}

std::string signer_line(const remote::ProbeReport& r) {
  std::string line;
  for (const auto& [signer, n] : r.signers) {
    line += fmt::format("{}{} {}", line.empty() ? "" : ", ", n,
                        signer == "unsigned" ? std::string("unsigned")
                        : signer == r.key_id ? "signed by this host's key " + signer
                                             : "signed by key " + signer);
  }
  return line;
}

// `no_write`: check reach and read only (no probe object is written), as for
// a read_only remote.
int run_ping(const Context& ctx, bool no_write) {
  Config config;
  std::vector<Target> targets;
  if (int rc = open_targets(ctx, config, targets); rc != k_exit_ok) {
    return rc;
  }
  auto codec = remote_codec_options(config);
  if (!codec) {
    return report(codec.error());
  }
  int rc = k_exit_ok;
  nlohmann::json all = nlohmann::json::array();
  for (Target& t : targets) {
    auto codec_of = *codec;
    codec_of.max_entry_size = t.spec.max_entry_size;
    remote::RemoteSpec probed = t.spec;
    probed.read_only = probed.read_only || no_write;
    const remote::ProbeReport r = remote::probe_remote(*t.backend, probed, codec_of);
    const std::string where = t.spec.masked();
    std::string problem;  // why it fails, when not an error of a step
    if (!r.error && !r.ok()) {
      problem = fmt::format("none of the {} objects sampled on the server is signed with a key this host holds ({}); "
                            "every read would be refused",
                            r.sampled, signer_line(r));
    }
    std::string hint;
    if (r.error) {
      hint = ping_hint(r, t.spec);
    } else if (!problem.empty()) {
      hint = "use the team's key file (remote_key_file), or add the other key to remote_read_key_files";
    }
    if (!r.ok()) {
      rc = k_exit_error;
    }
    if (ctx.json) {
      nlohmann::json signers = nlohmann::json::object();
      for (const auto& [signer, n] : r.signers) {
        signers[signer] = n;
      }
      all.push_back({{"remote", where},
                     {"ok", r.ok()},
                     {"latency_ms", r.reach_ms},
                     {"server", r.server},
                     {"read_only", t.spec.read_only},
                     {"reach", check_name(r.reach)},
                     {"read", check_name(r.read)},
                     {"write", t.spec.read_only && !r.error ? "read_only" : check_name(r.write)},
                     {"write_checked", !probed.read_only},
                     {"team_key", !r.key_id.empty() ? check_name(r.team_key) : "none"},
                     {"key_id", r.key_id},
                     {"listable", r.listable},
                     {"sampled", r.sampled},
                     {"foreign_signed", r.foreign},
                     {"signers", signers},
                     {"error", r.error ? r.error->describe() : problem},
                     {"hint", hint}});
      continue;
    }
    if (r.reach == remote::ProbeReport::Check::ok) {
      std::printf("%s: %s, %.2f ms\n", where.c_str(), r.server.c_str(), r.reach_ms);
      std::printf("  read: %s\n", check_name(r.read));
      if (t.spec.read_only) {
        std::printf("  write: not checked, the remote is read_only (kcache sends it no write)\n");
      } else if (no_write) {
        std::printf("  write: not checked (--no-write)\n");
      } else if (r.write != remote::ProbeReport::Check::skipped) {
        std::printf("  write: %s%s\n", check_name(r.write),
                    r.write == remote::ProbeReport::Check::ok ? " (a probe object was written, read back and removed)"
                                                              : "");
      }
      if (r.key_id.empty()) {
        std::printf("  team key: none (objects are written unsigned)\n");
      } else if (r.team_key != remote::ProbeReport::Check::skipped) {
        std::printf("  team key: %s (key id %s)\n",
                    r.team_key == remote::ProbeReport::Check::ok ? "ok, a signed probe read back verified" : "failed",
                    r.key_id.c_str());
      } else {
        std::printf("  team key: key id %s (not checked by a write)\n", r.key_id.c_str());
      }
      if (r.listable) {
        std::printf("  objects: %s\n", r.sampled == 0 ? "none on the server yet"
                                                      : fmt::format("{} sampled: {}", r.sampled, signer_line(r)).c_str());
      }
    }
    if (r.error) {
      std::fprintf(stderr, "kcache: error: %s: %s\nkcache: hint: %s\n", where.c_str(), r.error->describe().c_str(),
                   hint.c_str());
    } else if (!problem.empty()) {
      std::fprintf(stderr, "kcache: error: %s: %s\nkcache: hint: %s\n", where.c_str(), problem.c_str(), hint.c_str());
    } else if (r.foreign > 0) {
      std::fprintf(stderr, "kcache: warning: %s: %llu of %llu sampled objects are signed with a key this host does not "
                   "hold (or unsigned); this host refuses them\n",
                   where.c_str(), static_cast<unsigned long long>(r.foreign),
                   static_cast<unsigned long long>(r.sampled));
    }
  }
  if (ctx.json) {
    std::printf("%s\n", all.dump(2).c_str());
  }
  return rc;
}

int run_remote_ls(const Context& ctx) {
  Config config;
  std::vector<Target> targets;
  if (int rc = open_targets(ctx, config, targets); rc != k_exit_ok) {
    return rc;
  }
  int rc = k_exit_ok;
  nlohmann::json all = nlohmann::json::array();
  for (Target& t : targets) {
    const std::string where = t.spec.masked();
    if (!ctx.json && targets.size() > 1) {
      std::printf("%s:\n", where.c_str());
    }
    nlohmann::json keys = nlohmann::json::array();
    std::uint64_t count = 0;
    auto listed = t.backend->list(k_object_prefix, [&](std::string_view name) {
      const std::string_view hex = name.substr(std::min(name.size(), k_object_prefix.size()));
      if (!Key::parse(hex)) {
        return true;  // a lease, or not kcache's
      }
      ++count;
      if (ctx.json) {
        keys.push_back(std::string(hex));
      } else {
        std::printf("%.*s\n", static_cast<int>(hex.size()), hex.data());
      }
      return true;
    });
    if (!listed) {
      const bool unsupported = listed.error().code == ErrorCode::unsupported;
      const int code = unsupported ? k_exit_usage : k_exit_error;
      rc = rc == k_exit_error ? rc : code;
      if (ctx.json) {
        all.push_back({{"remote", where}, {"supported", !unsupported}, {"error", listed.error().describe()}});
      } else {
        std::fprintf(stderr, "kcache: error: %s: %s\nkcache: hint: %s\n", where.c_str(),
                     unsupported ? "listing is not supported by this backend" : listed.error().describe().c_str(),
                     unsupported ? "an HTTP remote is not enumerated (WebDAV's PROPFIND is often not served); use "
                                   "the server's own tools, or `kcache remote rm KEY` for known keys"
                                 : "check that the server runs and answers");
      }
      continue;
    }
    if (ctx.json) {
      all.push_back({{"remote", where}, {"supported", true}, {"count", count}, {"keys", std::move(keys)}});
    }
  }
  if (ctx.json) {
    std::printf("%s\n", all.dump(2).c_str());
  }
  return rc;
}

int run_rm(const Context& ctx, const std::vector<std::string>& texts) {
  std::vector<Key> keys;
  if (int rc = parse_keys(texts, keys); rc != k_exit_ok) {
    return rc;
  }
  Config config;
  std::vector<Target> targets;
  if (int rc = open_targets(ctx, config, targets); rc != k_exit_ok) {
    return rc;
  }
  std::size_t writable = 0;
  for (const Target& t : targets) {
    if (t.spec.read_only) {
      if (!ctx.json) {
        note(fmt::format("{} is read_only: kcache sends it no write, so nothing is removed from it", t.spec.masked()));
      }
    } else {
      ++writable;
    }
  }
  if (writable == 0) {
    report(Error{ErrorCode::read_only,
                 targets.size() == 1 ? std::string("refusing to remove: the configured remote is read_only")
                                     : std::string("refusing to remove: the configured remotes are all read_only"),
                 {}},
           "kcache never writes to a read_only remote; remove read_only=true from the URL (with credentials that "
           "may write) to remove objects");
    return k_exit_usage;
  }
  std::uint64_t removed = 0, absent = 0, failed = 0;
  nlohmann::json all = nlohmann::json::array();
  for (const Key& key : keys) {
    bool found = false;
    for (Target& t : targets) {
      if (t.spec.read_only) {
        continue;
      }
      auto r = t.backend->remove(remote::object_name(key));
      nlohmann::json j{{"key", key.hex()}, {"remote", t.spec.masked()}};
      if (!r) {
        ++failed;
        j["removed"] = false;
        j["error"] = r.error().describe();
        if (!ctx.json) {
          std::fprintf(stderr, "kcache: error: remove %s from %s: %s\n", key.hex().c_str(), t.spec.masked().c_str(),
                       r.error().describe().c_str());
        }
      } else {
        j["removed"] = *r;
        found = found || *r;
        if (!ctx.json) {
          const std::string where = (*r ? "from " : "on ") + t.spec.masked();
          std::printf("%s %s %s\n", *r ? "removed" : "not there:", key.hex().c_str(), where.c_str());
        }
      }
      all.push_back(std::move(j));
    }
    if (found) {
      ++removed;
    } else {
      ++absent;
    }
  }
  if (ctx.json) {
    std::printf("%s\n", all.dump(2).c_str());
  }
  if (failed > 0) {
    return k_exit_error;
  }
  return absent > 0 ? k_exit_miss : k_exit_ok;
}

void register_remote(CLI::App& app, Context& ctx, std::function<int()>& run) {
  CLI::App* sub = app.add_subcommand("remote", "The team tier: make a team key, check, list and prune the remotes");
  sub->require_subcommand(1);
  CLI::App* keygen = sub->add_subcommand("keygen", "Write a new random team key (32 bytes, hex) to FILE, mode 0600");
  static std::string file;
  keygen->add_option("FILE", file, "Where to write the key (must not exist)")->required();
  keygen->callback([&run] { run = [] { return run_keygen(file); }; });
  CLI::App* ping = sub->add_subcommand(
      "ping", "Check every configured remote: reachable, readable, writable (a probe object, unless read_only), "
              "and the team key (a signed probe read back verified; the signers of a sample of objects)");
  ping->footer("Exit 0 when every check passed on every remote, 1 when one failed (unreachable, credentials "
               "refused, not writable, team key mismatch). Passwords are never printed.");
  static bool no_write = false;
  ping->add_flag("--no-write", no_write,
                 "Check reach, credentials and read access only: write no probe object (credentials that may "
                 "only read then pass)");
  ping->callback([&ctx, &run] { run = [&ctx] { return run_ping(ctx, no_write); }; });
  CLI::App* ls = sub->add_subcommand("ls", "List the keys of the objects on every configured remote (Redis, Redis "
                                           "Cluster: SCAN in batches; S3: ListObjectsV2 by prefix; HTTP remotes cannot "
                                           "be listed)");
  ls->footer("Exit 0 when listed, 2 when a backend cannot list (HTTP), 1 when a remote failed.");
  ls->callback([&ctx, &run] { run = [&ctx] { return run_remote_ls(ctx); }; });
  CLI::App* rm = sub->add_subcommand("rm", "Remove the objects of KEY... from every configured writable remote");
  static std::vector<std::string> keys;
  rm->add_option("KEY", keys, "Keys (64 hex characters)")->required();
  rm->footer("Exit 0 when every key was removed, 3 when one was on no remote, 1 when a remote failed, 2 when "
             "every remote is read_only (nothing is sent).");
  rm->callback([&ctx, &run] { run = [&ctx] { return run_rm(ctx, keys); }; });
}

}  // namespace

KCACHE_COMMAND(remote, register_remote);

}  // namespace kcache::cli
