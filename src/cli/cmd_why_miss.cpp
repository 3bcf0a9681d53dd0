// kcache why-miss A B: the key-record fields that differ between two keys.
// Each of A and B is a key (its passport is read from the cache) or a file
// holding a passport or a key record as JSON.
#include <cstdio>
#include <string>

#include "cli/compile_cli_support.hpp"
#include "kcache/key.hpp"
#include "kcache/passport.hpp"

namespace kcache::cli {

namespace {

Result<KeyRecord> record_of(const std::string& what, Store* store) {
  if (Key::is_valid_hex(what)) {
    if (store == nullptr) {
      return make_error(ErrorCode::not_found, "no cache to look " + what + " up in");
    }
    auto key = Key::parse(what);
    auto got = store->get(*key);
    if (!got) {
      return tl::unexpected(got.error());
    }
    if (!*got) {
      return make_error(ErrorCode::not_found, "the cache holds no entry " + what +
                                                  "; pass a passport or key record JSON file instead");
    }
    return (*got)->passport.key_record;
  }
  if (auto ok = check_input_file(what); !ok) {
    Error e = ok.error();
    e.message = "'" + what + "' is not a key (64 lowercase hex), and " + e.message;
    return tl::unexpected(std::move(e));
  }
  std::string error;
  auto text = read_whole_file(what, error);
  if (!text) {
    return make_error(ErrorCode::io, error);
  }
  if (auto p = Passport::from_json(*text)) {
    return p->key_record;
  }
  // A bare key record: {"schema": N, "domain": "...", "fields": [{"name","value","digest"}...]}.
  const auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("fields") || !j["fields"].is_array()) {
    return make_error(ErrorCode::corrupt, what + " holds neither a passport nor a key record");
  }
  KeyRecord r;
  r.schema = j.value("schema", 0u);
  r.domain = j.value("domain", std::string());
  for (const auto& f : j["fields"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("value") ||
        !f["value"].is_string()) {
      return make_error(ErrorCode::corrupt, what + ": a field lacks a string name or value");
    }
    r.fields.push_back({f["name"].get<std::string>(), f["value"].get<std::string>(), f.value("digest", false)});
  }
  return r;
}

int run_why_miss(const Context& ctx, const std::string& a, const std::string& b) {
  auto env = open_compile_environment(ctx, false, BadSettings::refuse);
  if (!env) {
    return report_error(env.error());
  }
  constexpr std::string_view hint =
      "give two keys from `kcache ls` or `kcache compile --json`, or passport / key record JSON files";
  auto ra = record_of(a, env->store.get());
  if (!ra) {
    return report_error(ra.error(), hint);
  }
  auto rb = record_of(b, env->store.get());
  if (!rb) {
    return report_error(rb.error(), hint);
  }
  print_key_diff(*ra, *rb, "A", "B");
  return k_exit_ok;
}

void register_why_miss(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto a = std::make_shared<std::string>();
  auto b = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("why-miss", "Print the key-record fields that differ between two keys");
  cmd->add_option("A", *a, "A key in the cache, or a passport / key record JSON file")->required();
  cmd->add_option("B", *b, "Another key or file")->required();
  cmd->callback([&ctx, &run, a, b] { run = [&ctx, a, b] { return run_why_miss(ctx, *a, *b); }; });
}

}  // namespace

KCACHE_COMMAND(why_miss, register_why_miss);

}  // namespace kcache::cli
