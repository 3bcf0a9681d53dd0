// kcache bundle keygen|create|verify|ls|install: signed bundle files that ship
// cache entries to other machines (docs/bundles.md, docs/cli.md).
#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/host_spec.hpp"
#include "cli/output.hpp"
#include "cli/output_file.hpp"
#include "bundle/bundle_writer.hpp"
#include "kcache/bundle.hpp"
#include "kcache/orchestrator.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <unistd.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace kcache::cli {
namespace {

struct BundleArgs {
  // keygen
  std::string key_file;
  std::string public_file;
  // create
  std::string output;
  std::string sign;
  std::string plan;
  std::vector<std::string> hosts;
  std::vector<std::string> keys;
  std::vector<std::string> kinds;
  std::vector<std::string> archs;
  std::vector<std::string> targets;
  std::vector<std::string> origins;
  // verify, ls, install
  std::string file;
  std::vector<std::string> trust;
  bool pin = false;
};

// The exit code of a bundle error: refusals for trust exit 8, for bytes 4.
int report_bundle(const Error& error) {
  const std::string_view reason = bundle_refusal(error);
  if (reason == "unsigned" || reason == "untrusted-key") {
    report(error, "trust the signer's public key (bundle_trusted_keys, KCACHE_BUNDLE_TRUSTED_KEYS "
                  "or --trust FILE) "
                  "only if you trust whoever holds its private key");
    return k_exit_untrusted;
  }
  if (error.code == ErrorCode::unsupported && !reason.empty()) {
    // A newer format version: nothing is wrong with the bundle, this kcache is old.
    report(error, "upgrade kcache to read it, or create the bundle with this kcache's version");
    return k_exit_error;
  }
  if (!reason.empty()) {
    report(
        error,
        reason == "truncated"
            ? "the bundle is incomplete (a copy still running, or cut short?) or was overwritten in place: "
              "get it again from its source, and replace a bundle with a new file and `mv`"
            : "the bundle is damaged or was changed after it was signed: get it again from its source");
    return k_exit_corrupt;
  }
  if (error.code == ErrorCode::invalid_argument) {
    // A key file that is not one, or a file kcache refuses: bad input, not a damaged bundle.
    return report(error);
  }
  report(error);
  return k_exit_error;
}

// The keys a reader trusts: the files of --trust when given, else the
// `bundle_trusted_keys` setting.
Result<BundleTrust> trust_for(const Context& ctx, const BundleArgs& args) {
  std::vector<std::filesystem::path> files(args.trust.begin(), args.trust.end());
  if (files.empty()) {
    auto config = ctx.config();
    if (!config) {
      return tl::unexpected(config.error());
    }
    files = config->bundle_trusted_keys;
  }
  auto keys = read_bundle_public_keys(files);
  if (!keys) {
    return tl::unexpected(keys.error());
  }
  return BundleTrust{std::move(*keys)};
}

int run_keygen(const BundleArgs& args) {
  const std::string pub = args.public_file.empty() ? args.key_file + ".pub" : args.public_file;
  auto key = generate_bundle_keys(args.key_file, pub);
  if (!key) {
    return report(key.error(),
                  "give paths that do not exist yet; kcache never replaces a key file");
  }
  std::printf(
      "wrote a new bundle signing key to %s (mode 0600) and its public key to %s (key id %s)\n",
      args.key_file.c_str(), pub.c_str(), key->id().c_str());
  std::printf(
      "sign with `kcache bundle create --sign %s`; readers list %s in bundle_trusted_keys\n",
      args.key_file.c_str(), pub.c_str());
  return k_exit_ok;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// True when every field that `spec` names equals the field of the passport's host.
bool host_matches(const std::string& passport_host, const std::string& spec) {
  auto have = HostFingerprint::parse(passport_host);
  if (!have) {
    return false;
  }
  HostFingerprint want = *have;
  return overlay_host(want, spec).has_value() && want == *have;
}

// True when the artifact passes every filter given (each filter: any of its values).
bool selected(const Artifact& a, const BundleArgs& args) {
  const Passport& p = a.passport;
  const auto any = [](const std::vector<std::string>& values, const auto& match) {
    return values.empty() || std::any_of(values.begin(), values.end(), match);
  };
  return any(args.kinds, [&](const std::string& k) { return p.kind == k; }) &&
         any(args.archs, [&](const std::string& arch) { return p.target.arch == arch; }) &&
         any(args.targets, [&](const std::string& t) { return host_matches(p.target.host, t); }) &&
         any(args.origins, [&](const std::string& o) {
           return lower(o) == lower(p.producer.name) || lower(o) == lower(p.key_record.domain);
         });
}

// Appends the key of every entry of the plan for each of its host profiles
// (--host overrides the plan's `hosts`; neither: this machine). Returns
// k_exit_ok or reports why not.
int plan_keys(const BundleArgs& args, std::vector<Key>& keys) {
  const BuilderRegistry registry = BuilderRegistry::with_shipped_builders();
  PlanLoadOptions load;
  load.builders = registry.names();
  auto plan = Plan::load(args.plan, load);
  if (!plan) {
    return report(plan.error(), "fix the plan first; `kcache plan check PLAN` lists every problem");
  }
  std::vector<std::string> specs = args.hosts.empty() ? plan->hosts : args.hosts;
  if (specs.empty()) {
    specs.emplace_back(); // this machine, as probed
  }
  OrchestratorOptions options;
  options.builders = &registry;
  const Orchestrator orchestrator(std::move(options));
  const HostFingerprint probed = probe_host();
  for (const std::string& spec : specs) {
    HostFingerprint host = probed;
    if (auto given = overlay_host(host, spec); !given) {
      return report(given.error(),
                    "write host profiles as field=value,... with fields sm, driver, cuda, trt, jp");
    }
    for (const PlanEntry& entry : plan->entries) {
      auto key = orchestrator.entry_key(entry, host);
      if (!key) {
        return report(key.error());
      }
      keys.push_back(*key);
      std::fprintf(stderr, "kcache: plan entry '%s' for host %s: %s\n", entry.name.c_str(),
                   host.to_string().c_str(), key->hex().c_str());
    }
  }
  return k_exit_ok;
}

// How the errors of writing an output begin (util/atomic_write.cpp, the bundle writer).
constexpr std::string_view k_output_failures[] = {
    "cannot write ", "cannot create a temporary file beside ", "cannot rename the temporary file to ",
    "cannot fsync ", "cannot close ", "cannot open "};

int run_create(const Context& ctx, const BundleArgs& args) {
  std::vector<Key> keys;
  if (int rc = parse_keys(args.keys, keys); rc != k_exit_ok) {
    return rc;
  }
  if (!args.plan.empty()) {
    if (int rc = plan_keys(args, keys); rc != k_exit_ok) {
      return rc;
    }
  }
  auto store = open_file_store(ctx);
  if (!store) {
    return report(store.error());
  }
  const bool everything = args.plan.empty() && args.keys.empty();
  if (everything) {
    auto entries = (*store)->list();
    if (!entries) {
      return report(entries.error());
    }
    for (const auto& e : *entries) {
      keys.push_back(e.key);
    }
  }
  std::vector<Artifact> artifacts;
  std::set<Key> seen;
  for (const Key& key : keys) {
    if (!seen.insert(key).second) {
      continue;
    }
    auto a = (*store)->get(key);
    if (!a) {
      return report(a.error());
    }
    if (!a->has_value()) {
      if (everything) {
        continue; // evicted since it was listed
      }
      return report(
          Error{ErrorCode::not_found, fmt::format("{} is not in the local cache", key.hex()), {}},
          args.plan.empty()
              ? "check the key with `kcache ls`"
              : "build the plan for that host first (`kcache plan build PLAN --host ...`)");
    }
    if (selected(**a, args)) {
      artifacts.push_back(std::move(**a));
    }
  }
  if (artifacts.empty()) {
    // Still written (an empty bundle is a valid one), but never silently.
    std::fprintf(stderr,
                 "kcache: warning: the selection is empty: %s; %s holds no entries\n",
                 keys.empty() ? "the cache holds no entries"
                              : fmt::format("none of the {} entries looked at passes the filters given", seen.size()).c_str(),
                 args.output.c_str());
  }
  BundleCreateOptions options;
  options.sign_key_file = args.sign;
  // -o as every output a user names (docs/cli.md, "Output files"): `-` is
  // standard output, a device, FIFO or symlink's target is written in place.
  const bool to_stdout = args.output == "-";
  if (to_stdout) {
    std::fflush(stdout);
  }
  auto summary = to_stdout ? bundle::write_bundle_to(STDOUT_FILENO, "standard output", std::move(artifacts), options)
                           : create_bundle(args.output, std::move(artifacts), options);
  if (!summary) {
    // The output's own failures (util/atomic_write.cpp, the bundle writer) name it.
    const std::string& m = summary.error().message;
    const bool output_failed = std::any_of(
        std::begin(k_output_failures), std::end(k_output_failures),
        [&](std::string_view prefix) { return m.compare(0, prefix.size(), prefix) == 0; });
    if (output_failed) {
      report(summary.error(), k_output_write_hint);
      return k_exit_error;
    }
    return report(summary.error());
  }
  // With the bundle on standard output, what was written is said on stderr.
  std::FILE* say = to_stdout ? stderr : stdout;
  if (ctx.json) {
    const nlohmann::json out{{"file", args.output},
                             {"entries", summary->entries},
                             {"payload_bytes", summary->payload_bytes},
                             {"file_bytes", summary->file_bytes},
                             {"digest", summary->digest_hex},
                             {"signer", summary->signer_id}};
    std::fprintf(say, "%s\n", out.dump(2).c_str());
  } else {
    std::fprintf(say, "wrote %s: %llu entries, %s of payload, %s in all, %s\n",
                to_stdout ? "standard output" : args.output.c_str(),
                static_cast<unsigned long long>(summary->entries),
                format_size(summary->payload_bytes).c_str(),
                format_size(summary->file_bytes).c_str(),
                summary->signer_id.empty() ? "UNSIGNED (readers refuse it; add --sign KEY)"
                                           : ("signed by key " + summary->signer_id).c_str());
  }
  return k_exit_ok;
}

std::string signer_text(const BundleInfo& info) {
  return info.is_signed ? "signed by key " + info.signer_id : std::string("unsigned");
}

int run_verify(const Context& ctx, const BundleArgs& args) {
  auto trust = trust_for(ctx, args);
  if (!trust) {
    return report(trust.error());
  }
  auto info = verify_bundle(args.file, *trust);
  if (!info) {
    if (ctx.json) {
      const nlohmann::json out{{"file", args.file},
                               {"ok", false},
                               {"reason", bundle_refusal(info.error())},
                               {"error", info.error().message}};
      std::printf("%s\n", out.dump(2).c_str());
    }
    return report_bundle(info.error());
  }
  if (ctx.json) {
    const nlohmann::json out{{"file", args.file},
                             {"ok", true},
                             {"entries", info->entries.size()},
                             {"payload_bytes", info->payload_bytes},
                             {"digest", info->digest_hex},
                             {"signer", info->signer_id}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%s: OK: %zu entries, %s of payload, %s (trusted), digest %s\n", args.file.c_str(),
                info->entries.size(), format_size(info->payload_bytes).c_str(),
                signer_text(*info).c_str(), info->digest_hex.c_str());
  }
  return k_exit_ok;
}

int run_ls(const Context& ctx, const BundleArgs& args) {
  auto info = inspect_bundle(args.file);
  if (!info) {
    return report_bundle(info.error());
  }
  if (ctx.json) {
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& e : info->entries) {
      entries.push_back({{"key", e.key.hex()},
                         {"kind", e.passport.kind},
                         {"size", e.passport.payload_size},
                         {"arch", e.passport.target.arch},
                         {"host", e.passport.target.host},
                         {"producer", e.passport.producer.name},
                         {"compile_duration_us", e.passport.compile_duration_us}});
    }
    const nlohmann::json out{{"file", args.file},
                             {"signed", info->is_signed},
                             {"signer", info->signer_id},
                             {"digest", info->digest_hex},
                             {"entries", entries}};
    std::printf("%s\n", out.dump(2).c_str());
    return k_exit_ok;
  }
  std::vector<std::vector<std::string>> rows{{"KEY", "KIND", "SIZE", "ARCH", "HOST", "PRODUCER"}};
  for (const auto& e : info->entries) {
    rows.push_back({e.key.hex(), e.passport.kind, format_size(e.passport.payload_size),
                    e.passport.target.arch, e.passport.target.host, e.passport.producer.name});
  }
  print_table(rows, {2});
  note(fmt::format("{} entries, {} of payload, {} (not judged: `kcache bundle verify` checks it)",
                   info->entries.size(), format_size(info->payload_bytes), signer_text(*info)));
  return k_exit_ok;
}

// Pins one installed entry: every key `bundle install --pin` installs passes
// here once, after the store accepted it (stored or already present). An
// entry already pinned stays pinned.
Result<void> pin_installed(FileStore& store, const Key& key) {
  auto pinned = store.pin(key);
  if (!pinned) {
    return tl::unexpected(std::move(pinned.error()));
  }
  return {};
}

int run_install(const Context& ctx, const BundleArgs& args) {
  auto trust = trust_for(ctx, args);
  if (!trust) {
    return report(trust.error());
  }
  auto store = open_file_store(ctx);
  if (!store) {
    return report(store.error());
  }
  FileStore& target = **store;
  BundleInstalled each;
  if (args.pin) {
    each = [&target](const Artifact& a, PutOutcome) {
      return pin_installed(target, a.passport.key);
    };
  }
  auto installed = install_bundle(args.file, *trust, target, each);
  if (!installed) {
    return report_bundle(installed.error());
  }
  if (ctx.json) {
    const nlohmann::json out{{"entries", installed->entries},
                             {"installed", installed->stored},
                             {"already_present", installed->already_present},
                             {"bytes", installed->bytes},
                             {"pinned", args.pin ? installed->entries : 0}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("installed %llu, already present %llu (of %llu entries), %s written\n",
                static_cast<unsigned long long>(installed->stored),
                static_cast<unsigned long long>(installed->already_present),
                static_cast<unsigned long long>(installed->entries),
                format_size(installed->bytes).c_str());
  }
  return k_exit_ok;
}

void register_bundle(CLI::App& app, Context& ctx, std::function<int()>& run) {
  static BundleArgs args;
  CLI::App* bundle =
      app.add_subcommand("bundle", "Ship cache entries as signed bundle files (docs/bundles.md)");
  bundle->require_subcommand(1);

  CLI::App* keygen =
      bundle->add_subcommand("keygen", "Write a new Ed25519 signing key (0600) and its public key");
  keygen->add_option("KEYFILE", args.key_file, "The private key file to write (must not exist)")
      ->required();
  keygen->add_option("--public", args.public_file,
                     "The public key file to write (default: KEYFILE.pub)");
  keygen->callback([&run] { run = [] { return run_keygen(args); }; });

  CLI::App* create = bundle->add_subcommand(
      "create", "Write chosen entries of the local cache into one bundle file");
  create->add_option("-o,--output", args.output, "The bundle file to write")->required();
  create->add_option("--sign", args.sign,
                     "Private key file that signs the bundle (`bundle keygen`)");
  create->add_option("--plan", args.plan,
                     "Every entry of this plan, for each host profile it names (`hosts`)");
  create->add_option("--host", args.hosts,
                     "With --plan: host profiles instead of the plan's (e.g. sm=87,jp=6.2)");
  create->add_option("--key", args.keys, "Entries by key (64 hex characters); repeatable");
  create->add_option("--kind", args.kinds, "Only entries of this kind (cubin, ptx, engine, ...)");
  create->add_option("--arch", args.archs, "Only entries for this arch (sm_90a, compute_90, ...)");
  create->add_option("--target", args.targets,
                     "Only entries whose host matches this host-spec (e.g. sm=87,jp=6.2)");
  create->add_option("--origin", args.origins,
                     "Only entries made by this producer or key domain (nvrtc, triton, plan, ...)");
  create->footer(
      "Without --plan or --key every entry of the local cache is taken; filters narrow any "
      "selection.\n"
      "The same entries always give the same bytes. Exit 0 written; 1 an entry is missing or a\n"
      "file cannot be written; 2 bad usage.");
  create->callback([&ctx, &run] { run = [&ctx] { return run_create(ctx, args); }; });

  CLI::App* verify =
      bundle->add_subcommand("verify", "Check a bundle: structure, digest, signature, every entry");
  verify->add_option("FILE", args.file, "The bundle file")->required();
  verify->add_option("--trust", args.trust,
                     "Public key files to trust instead of bundle_trusted_keys");
  verify->footer("Exit 0 verified; 4 damaged or changed; 8 unsigned or signed by an untrusted key; "
                 "1 unreadable.");
  verify->callback([&ctx, &run] { run = [&ctx] { return run_verify(ctx, args); }; });

  CLI::App* ls =
      bundle->add_subcommand("ls", "List the entries of a bundle (without judging its signature)");
  ls->add_option("FILE", args.file, "The bundle file")->required();
  ls->callback([&ctx, &run] { run = [&ctx] { return run_ls(ctx, args); }; });

  CLI::App* install = bundle->add_subcommand(
      "install", "Check a whole bundle, then import every entry into the cache");
  install->add_option("FILE", args.file, "The bundle file")->required();
  install->add_option("--trust", args.trust,
                      "Public key files to trust instead of bundle_trusted_keys");
  install->add_flag("--pin", args.pin, "Pin every installed entry (never evicted by the size cap)");
  install->footer(
      "Nothing is installed unless every check passes. Exit 0 installed; 4 damaged or changed;\n"
      "8 unsigned or signed by an untrusted key; 1 the cache cannot be written.");
  install->callback([&ctx, &run] { run = [&ctx] { return run_install(ctx, args); }; });
}

} // namespace

KCACHE_COMMAND(bundle, register_bundle);

} // namespace kcache::cli
