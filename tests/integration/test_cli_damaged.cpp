// A damaged entry is named when it is found: `kcache get` says it was damaged
// and removed (issue 9 item 9), `kcache compile` warns once per process when
// it replaces one (issue 13 item 5), and a forged `kcache put` entry is
// refused by get and reported by verify (issue 9 item 1).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "kcache/passport.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"
#include "util/sha256.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int status = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs the kcache command with KCACHE_DIR=`cache`.
CliRun run_cli(const fs::path& dir, const std::string& args) {
  const fs::path err = dir / "stderr.txt";
  const std::string cmd = "cd '" + dir.string() + "' && KCACHE_DIR='" + (dir / "cache").string() + "' '" +
                          KCACHE_CLI_PATH + "' " + args + " 2>'" + err.string() + "'";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) {
    r.out.append(buf, n);
  }
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.err = test::read_file(err);
  return r;
}

fs::path entry_path(const fs::path& dir, const std::string& key, const char* suffix = "") {
  return dir / "cache" / "v1" / "entries" / key.substr(0, 2) / (key + suffix);
}

void replace_file(const fs::path& path, const std::string& bytes) {
  test::write_file(path.string() + ".edit", bytes);
  fs::rename(path.string() + ".edit", path);
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

std::string put(const test::TempDir& tmp, const std::string& bytes) {
  test::write_file(tmp.path() / "input.bin", bytes);
  const CliRun r = run_cli(tmp.path(), "put input.bin --kind cubin");
  EXPECT_EQ(r.status, 0) << r.err;
  return r.out.substr(0, 64);
}

TEST(CliDamaged, GetOfADamagedEntrySaysItWasDamagedAndRemoved) {
  test::TempDir tmp;
  const std::string key = put(tmp, std::string(5000, 'x'));
  std::string bytes = test::read_file(entry_path(tmp.path(), key));
  bytes[10] ^= 1;
  replace_file(entry_path(tmp.path(), key), bytes);

  const CliRun r = run_cli(tmp.path(), "get " + key);
  EXPECT_EQ(r.status, 3) << r.err;  // docs/cli.md: a damaged entry is a miss
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("the entry for " + key +
                       " was damaged (the payload's SHA-256 does not match the passport) and has been removed"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << "said once, as the miss itself: " << r.err;
  EXPECT_FALSE(fs::exists(entry_path(tmp.path(), key, ".pass")));

  const CliRun again = run_cli(tmp.path(), "get " + key);
  EXPECT_EQ(again.status, 3);
  EXPECT_NE(again.err.find("no entry for " + key + " (a miss)"), std::string::npos) << again.err;
}

// Issue 9 item 1: the payload is replaced and payload.sha256 (and size)
// edited to match; then the key record's content digest too.
TEST(CliDamaged, ForgedPutEntryIsRefusedByGetAndReportedByVerify) {
  for (const bool edit_record : {false, true}) {
    test::TempDir tmp;
    const std::string key = put(tmp, "the real cubin");
    auto passport = Passport::from_json(test::read_file(entry_path(tmp.path(), key, ".pass")));
    ASSERT_TRUE(passport.has_value());
    const std::string evil = "an attacker's cubin";
    passport->payload_size = evil.size();
    passport->payload_sha256 = util::sha256_hex(evil);
    if (edit_record) {
      passport->key_record.fields.at(1).value = passport->payload_sha256;
    }
    replace_file(entry_path(tmp.path(), key), evil);
    replace_file(entry_path(tmp.path(), key, ".pass"), passport->to_json());

    const CliRun verify = run_cli(tmp.path(), "verify");
    EXPECT_EQ(verify.status, 4) << verify.out << verify.err;
    EXPECT_NE(verify.out.find(key + ": the entry is not what its key says"), std::string::npos) << verify.out;

    const CliRun get = run_cli(tmp.path(), "get " + key);
    EXPECT_EQ(get.status, 3) << get.err;
    EXPECT_TRUE(get.out.empty()) << "forged bytes were returned";
    EXPECT_NE(get.err.find(edit_record ? "key record hashes to" : "content digest differs from payload.sha256"),
              std::string::npos)
        << get.err;
  }
}

// Issue 13 item 5: a compile that finds its entry damaged recompiles, exits 0
// and says so in one warning line naming the key and what was wrong, once per
// process however many damaged entries it meets.
TEST(CliDamaged, CompileWarnsOnceNamingTheKeyWhenItReplacesADamagedEntry) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const std::string src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  fs::copy_file(src, tmp.path() / "a.cu");
  fs::copy_file(src, tmp.path() / "b.cu");
  const std::string args = "compile a.cu b.cu --target ptx --arch sm_90 --json";
  const CliRun cold = run_cli(tmp.path(), args);
  ASSERT_EQ(cold.status, 0) << cold.err;
  std::vector<std::string> keys;
  for (const auto& result : nlohmann::json::parse(cold.out)) {
    keys.push_back(result["key"].get<std::string>());
  }
  ASSERT_EQ(keys.size(), 2U) << cold.out;
  for (const auto& key : keys) {
    std::string bytes = test::read_file(entry_path(tmp.path(), key));
    ASSERT_FALSE(bytes.empty());
    bytes[bytes.size() / 2] ^= 1;
    replace_file(entry_path(tmp.path(), key), bytes);
  }

  const CliRun warm = run_cli(tmp.path(), args);
  ASSERT_EQ(warm.status, 0) << warm.err;
  EXPECT_EQ(count(warm.err, "kcache: warning: cache entry "), 1U) << warm.err;
  const bool names_a_key = warm.err.find("cache entry " + keys[0]) != std::string::npos ||
                           warm.err.find("cache entry " + keys[1]) != std::string::npos;
  EXPECT_TRUE(names_a_key) << warm.err;
  EXPECT_NE(warm.err.find("(the payload's SHA-256 does not match the passport)"), std::string::npos) << warm.err;
  EXPECT_EQ(test::read_file(tmp.path() / "a.ptx"), test::read_file(tmp.path() / "b.ptx"));

  const CliRun hit = run_cli(tmp.path(), args);
  ASSERT_EQ(hit.status, 0) << hit.err;
  EXPECT_EQ(hit.err.find("warning"), std::string::npos) << "the entries were replaced: " << hit.err;
}

}  // namespace
}  // namespace kcache
