// `kcache remote ping / ls / rm` against a real redis-server (and a real
// Redis Cluster for ls), and what `compile --json` says of its lookups and of
// an entry over max_entry_size: real `kcache` processes with their own cache
// directories ("hosts"), real NVRTC where a compile is needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "integration/cli_shell.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::test {
namespace {

namespace fs = std::filesystem;

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

std::set<std::string> lines_of(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) {
      out.insert(line);
    }
  }
  return out;
}

class CliRemoteAdmin : public CliShell {
 protected:
  void SetUp() override {
    CliShell::SetUp();
    std::string why;
    m_server = RedisServer::start(root() / "redis", &why);
    ASSERT_NE(m_server, nullptr) << why;
    ASSERT_EQ(sh("\"$K\" remote keygen '" + key_file("a").string() + "' >/dev/null && \"$K\" remote keygen '" +
                 key_file("b").string() + "' >/dev/null")
                  .rc,
              0);
  }

  fs::path key_file(const std::string& name) const { return root() / (name + ".key"); }

  // "KCACHE_DIR=<root>/<host> KCACHE_REMOTE=<url> KCACHE_REMOTE_KEY_FILE=<key>" for a host.
  std::string host(const std::string& name, const std::string& key = "a", const std::string& url = {}) const {
    return "KCACHE_DIR='" + (root() / name).string() + "' KCACHE_REMOTE='" + (url.empty() ? m_server->url() : url) +
           "'" + (key.empty() ? std::string() : " KCACHE_REMOTE_KEY_FILE='" + key_file(key).string() + "'") + " ";
  }

  // Puts `bytes` into host `name`'s cache and pushes it; returns the key.
  std::string publish(const std::string& name, const std::string& bytes, const std::string& key = "a") {
    write_file(dir() / "blob", bytes);
    const ShellRun put = sh(host(name, key) + "\"$K\" put blob");
    EXPECT_EQ(put.rc, 0) << put.err;
    const std::string k = put.out.substr(0, 64);
    const ShellRun push = sh(host(name, key) + "\"$K\" push " + k);
    EXPECT_EQ(push.rc, 0) << push.err;
    return k;
  }

  std::unique_ptr<RedisServer> m_server;
};

TEST_F(CliRemoteAdmin, PingWritesReadsBackAndRemovesASignedProbeAndLeavesNothing) {
  const ShellRun ping = sh(host("h") + "\"$K\" remote ping");
  ASSERT_EQ(ping.rc, 0) << ping.out << ping.err;
  EXPECT_NE(ping.out.find("read: ok"), std::string::npos) << ping.out;
  EXPECT_NE(ping.out.find("write: ok"), std::string::npos) << ping.out;
  EXPECT_NE(ping.out.find("team key: ok, a signed probe read back verified"), std::string::npos) << ping.out;
  EXPECT_NE(ping.out.find("objects: none on the server yet"), std::string::npos) << ping.out;
  // The probe was removed: the server holds no key at all.
  EXPECT_EQ(m_server->cli({"DBSIZE"}), "0");

  const ShellRun json = sh(host("h") + "\"$K\" remote ping --json");
  ASSERT_EQ(json.rc, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out).at(0);
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_EQ(j["read"], "ok");
  EXPECT_EQ(j["write"], "ok");
  EXPECT_EQ(j["team_key"], "ok");
  EXPECT_EQ(j["key_id"].get<std::string>().size(), 16U);
  EXPECT_TRUE(j["listable"].get<bool>());
}

TEST_F(CliRemoteAdmin, PingOnAReadOnlyRemoteSendsNoWriteAndSaysSo) {
  m_server->cli({"CONFIG", "RESETSTAT"});
  const ShellRun ping = sh(host("h", "a", m_server->url() + "?read_only=true") + "\"$K\" remote ping --json");
  ASSERT_EQ(ping.rc, 0) << ping.err;
  const auto j = nlohmann::json::parse(ping.out).at(0);
  EXPECT_EQ(j["write"], "read_only");
  EXPECT_EQ(j["team_key"], "not_checked");
  // Not one write command reached the server.
  const std::string stats = m_server->cli({"INFO", "commandstats"});
  EXPECT_EQ(stats.find("cmdstat_set:"), std::string::npos) << stats;
  EXPECT_EQ(stats.find("cmdstat_del:"), std::string::npos) << stats;
  const ShellRun text = sh(host("h", "a", m_server->url() + "?read_only=true") + "\"$K\" remote ping");
  EXPECT_NE(text.out.find("write: not checked, the remote is read_only"), std::string::npos) << text.out;
}

TEST_F(CliRemoteAdmin, PingFailsWithExit1WhenTheCredentialsAreRefusedOrTheUserMayOnlyRead) {
  m_server->cli({"ACL", "SETUSER", "reader", "on", ">rpw", "~*", "&*", "+@all", "-@write"});
  m_server->cli({"ACL", "SETUSER", "default", "on", ">secret", "~*", "&*", "+@all"});
  const std::string port = std::to_string(m_server->port());

  const ShellRun noauth = sh(host("h") + "\"$K\" remote ping");
  EXPECT_EQ(noauth.rc, 1) << noauth.out << noauth.err;
  EXPECT_NE(noauth.err.find("NOAUTH"), std::string::npos) << noauth.err;
  EXPECT_NE(noauth.err.find("kcache: hint: the server refused the credentials"), std::string::npos) << noauth.err;

  const ShellRun wrong = sh(host("h", "a", "redis://default:nope@127.0.0.1:" + port) + "\"$K\" remote ping");
  EXPECT_EQ(wrong.rc, 1) << wrong.out << wrong.err;
  EXPECT_EQ(wrong.err.find("nope"), std::string::npos) << "the password is printed: " << wrong.err;

  const std::string reader = "redis://reader:rpw@127.0.0.1:" + port;
  const ShellRun ro = sh(host("h", "a", reader) + "\"$K\" remote ping");
  EXPECT_EQ(ro.rc, 1) << ro.out << ro.err;
  EXPECT_NE(ro.out.find("read: ok"), std::string::npos) << ro.out;
  EXPECT_NE(ro.err.find("NOPERM"), std::string::npos) << ro.err;
  EXPECT_NE(ro.err.find("set read_only=true on this URL"), std::string::npos) << ro.err;
  const ShellRun declared = sh(host("h", "a", reader + "?read_only=true") + "\"$K\" remote ping");
  EXPECT_EQ(declared.rc, 0) << declared.out << declared.err;
}

TEST_F(CliRemoteAdmin, PingReportsObjectsSignedWithAnotherTeamKey) {
  publish("a", "entry of team a, one");
  publish("a", "entry of team a, two");
  // Host b holds another key: its own probe verifies, but every object on
  // the server would be refused.
  const ShellRun other = sh(host("b", "b") + "\"$K\" remote ping --json");
  EXPECT_EQ(other.rc, 1) << other.out << other.err;
  const auto j = nlohmann::json::parse(other.out).at(0);
  EXPECT_EQ(j["team_key"], "ok");
  EXPECT_EQ(j["sampled"], 2);
  EXPECT_EQ(j["foreign_signed"], 2);
  const std::string key_a = nlohmann::json::parse(sh(host("a") + "\"$K\" remote ping --json").out)[0]["key_id"];
  EXPECT_EQ(j["signers"][key_a], 2) << j.dump();
  EXPECT_NE(j["error"].get<std::string>().find("none of the 2 objects sampled"), std::string::npos) << j.dump();
  // Host a's own objects are fine; with a's key among b's read keys, b is fine too.
  EXPECT_EQ(sh(host("a") + "\"$K\" remote ping").rc, 0);
  const ShellRun rotated =
      sh(host("b", "b") + "KCACHE_REMOTE_READ_KEY_FILES='" + key_file("a").string() + "' \"$K\" remote ping");
  EXPECT_EQ(rotated.rc, 0) << rotated.out << rotated.err;
  EXPECT_NE(rotated.out.find("2 signed by key " + key_a), std::string::npos) << rotated.out;
}

TEST_F(CliRemoteAdmin, LsListsEveryObjectKeyInBatchesAndNothingElse) {
  std::set<std::string> keys;
  for (int i = 0; i < 3; ++i) {
    keys.insert(publish("h", "listed entry " + std::to_string(i)));
  }
  // 2500 more objects (SCAN walks them in several batches), a lease and a
  // stranger that are not listed.
  m_server->cli({"EVAL",
                 "for i = 1, 2500 do redis.call('SET', string.format('kcache:v1:%064x', i), 'x') end return 1", "0"});
  m_server->cli({"SET", "kcache:v1:lease:" + std::string(64, 'a'), "token"});
  m_server->cli({"SET", "somebody-else", "x"});
  const ShellRun ls = sh(host("h") + "\"$K\" remote ls");
  ASSERT_EQ(ls.rc, 0) << ls.err;
  const auto listed = lines_of(ls.out);
  EXPECT_EQ(listed.size(), 2503U);
  for (const auto& k : keys) {
    EXPECT_TRUE(listed.contains(k)) << k;
  }
  char first[65];
  std::snprintf(first, sizeof first, "%064x", 1);
  EXPECT_TRUE(listed.contains(first));
  const ShellRun json = sh(host("h") + "\"$K\" remote ls --json");
  ASSERT_EQ(json.rc, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out).at(0);
  EXPECT_EQ(j["count"], 2503);
  EXPECT_EQ(j["keys"].size(), 2503U);
}

TEST_F(CliRemoteAdmin, RmRemovesExits3WhenAbsentAndRefusesAReadOnlyRemote) {
  const std::string k1 = publish("h", "to remove, one");
  const std::string k2 = publish("h", "to remove, two");
  const std::string k3 = publish("h", "kept");

  const ShellRun ro = sh(host("h", "a", m_server->url() + "?read_only=true") + "\"$K\" remote rm " + k1);
  EXPECT_EQ(ro.rc, 2) << ro.out << ro.err;
  EXPECT_NE(ro.err.find("read_only"), std::string::npos) << ro.err;
  EXPECT_EQ(m_server->cli({"EXISTS", "kcache:v1:" + k1}), "1");

  const ShellRun rm = sh(host("h") + "\"$K\" remote rm " + k1 + " " + k2);
  EXPECT_EQ(rm.rc, 0) << rm.out << rm.err;
  EXPECT_EQ(count_of(rm.out, "removed "), 2U) << rm.out;
  EXPECT_EQ(m_server->cli({"EXISTS", "kcache:v1:" + k1}), "0");
  EXPECT_EQ(m_server->cli({"EXISTS", "kcache:v1:" + k2}), "0");
  EXPECT_EQ(m_server->cli({"EXISTS", "kcache:v1:" + k3}), "1");

  const ShellRun again = sh(host("h") + "\"$K\" remote rm " + k1 + " --json");
  EXPECT_EQ(again.rc, 3) << again.out << again.err;
  EXPECT_FALSE(nlohmann::json::parse(again.out).at(0)["removed"].get<bool>());
  EXPECT_EQ(lines_of(sh(host("h") + "\"$K\" remote ls").out), std::set<std::string>{k3});

  EXPECT_EQ(sh(host("h") + "\"$K\" remote rm not-a-key").rc, 2);
  m_server->kill();
  const ShellRun dead = sh(host("h", "a", m_server->url() + "?connect_timeout_ms=200") + "\"$K\" remote rm " + k3);
  EXPECT_EQ(dead.rc, 1) << dead.out << dead.err;
}

TEST(CliRemoteAdminCluster, LsWalksEveryMasterAndRmRemovesWhereverTheSlotLives) {
  TempDir tmp;
  std::string why;
  auto cluster = RedisCluster::start(tmp.path() / "cluster", &why);
  ASSERT_NE(cluster, nullptr) << why;
  const std::string env = "KCACHE_DIR='" + (tmp.path() / "h").string() + "' KCACHE_REMOTE='" + cluster->url() + "' ";
  auto run = [&](const std::string& args) {
    const std::string cmd = env + "'" + KCACHE_CLI_PATH + "' " + args + " 2>/dev/null";
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) {
      out.append(buf, n);
    }
    const int st = ::pclose(p);
    return std::make_pair(WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
  };
  std::set<std::string> keys;
  for (int i = 0; i < 12; ++i) {  // 12 keys: every master holds some, almost surely
    write_file(tmp.path() / "blob", "cluster entry " + std::to_string(i));
    auto put = run("put '" + (tmp.path() / "blob").string() + "'");
    ASSERT_EQ(put.first, 0);
    keys.insert(put.second.substr(0, 64));
    ASSERT_EQ(run("push " + put.second.substr(0, 64)).first, 0);
  }
  auto ls = run("remote ls");
  ASSERT_EQ(ls.first, 0) << ls.second;
  EXPECT_EQ(lines_of(ls.second), keys);
  const std::string one = *keys.begin();
  EXPECT_EQ(run("remote rm " + one).first, 0);
  EXPECT_EQ(run("remote rm " + one).first, 3);
  keys.erase(one);
  EXPECT_EQ(lines_of(run("remote ls").second), keys);
}

// compile --json: every lookup is timed and the tier that hit is named.
TEST_F(CliRemoteAdmin, CompileJsonTimesEveryLookupAndNamesTheTierThatHit) {
  KCACHE_REQUIRE_TOOLKIT();
  write_file(dir() / "k.cu", "extern \"C\" __global__ void k(int* p) { p[0] = 7; }\n");
  const std::string compile = "\"$K\" compile k.cu --arch sm_90 --json -o k.cubin";
  const ShellRun miss = sh(host("a") + compile);
  ASSERT_EQ(miss.rc, 0) << miss.err;
  const auto m = nlohmann::json::parse(miss.out);
  EXPECT_FALSE(m["hit"].get<bool>());
  EXPECT_TRUE(m["hit_tier"].is_null());
  ASSERT_GE(m["lookups"].size(), 2U) << m.dump();
  std::uint64_t sum = 0;
  for (const auto& l : m["lookups"]) {
    EXPECT_EQ(l["result"], "miss") << m.dump();
    sum += l["us"].get<std::uint64_t>();
  }
  EXPECT_EQ(m["lookups"][0]["tier"], "local");
  EXPECT_EQ(m["lookups"][1]["tier"], m_server->url());
  EXPECT_GT(m["lookups"][1]["us"].get<std::uint64_t>(), 0U);  // a network round trip
  EXPECT_GE(m["lookup_us"].get<std::uint64_t>(), sum);
  EXPECT_GT(m["lookup_us"].get<std::uint64_t>(), 0U);

  // Another host: a remote hit, named by its URL.
  const ShellRun remote = sh(host("b") + compile);
  ASSERT_EQ(remote.rc, 0) << remote.err;
  const auto r = nlohmann::json::parse(remote.out);
  EXPECT_TRUE(r["hit"].get<bool>());
  EXPECT_EQ(r["hit_tier"], m_server->url()) << r.dump();
  // Then the same host again: a local hit.
  const auto local = nlohmann::json::parse(sh(host("b") + compile).out);
  EXPECT_EQ(local["hit_tier"], "local") << local.dump();
  EXPECT_EQ(local["lookups"].size(), 1U) << local.dump();
  // A password in the URL is masked in the tier's name.
  m_server->cli({"CONFIG", "SET", "requirepass", "s3cret"});
  const std::string url = "redis://:s3cret@127.0.0.1:" + std::to_string(m_server->port());
  const ShellRun masked = sh(host("c", "a", url) + compile);
  ASSERT_EQ(masked.rc, 0) << masked.err;
  EXPECT_EQ(masked.out.find("s3cret"), std::string::npos) << masked.out;
  EXPECT_EQ(nlohmann::json::parse(masked.out)["hit_tier"], "redis://:***@127.0.0.1:" + std::to_string(m_server->port()));
}

// An entry over max_entry_size: one warning per process, naming the size and
// the setting, and every such entry counted.
TEST_F(CliRemoteAdmin, EntryOverMaxEntrySizeIsOneWarningAndCounted) {
  KCACHE_REQUIRE_TOOLKIT();
  for (const std::string name : {"k1", "k2", "k3"}) {
    write_file(dir() / (name + ".cu"),
               "extern \"C\" __global__ void " + name + "(int* p) { p[0] = " + std::to_string(name[1]) + "; }\n");
  }
  const std::string env = host("h", "a", m_server->url() + "?max_entry_size=100");
  const ShellRun one = sh(env + "\"$K\" compile k1.cu --arch sm_90");
  ASSERT_EQ(one.rc, 0) << one.err;
  EXPECT_EQ(count_of(one.err, "kcache: warning:"), 1U) << one.err;
  EXPECT_NE(one.err.find("above max_entry_size (100 bytes); not uploaded to " + m_server->url() + "?max_entry_size=100"),
            std::string::npos)
      << one.err;
  EXPECT_NE(one.err.find(" bytes as a remote object"), std::string::npos) << one.err;
  // Two more in one process (-j 1: both in this process): still one line.
  const ShellRun two = sh(env + "\"$K\" compile k2.cu k3.cu --arch sm_90 -j 1");
  ASSERT_EQ(two.rc, 0) << two.err;
  EXPECT_EQ(count_of(two.err, "kcache: warning:"), 1U) << two.err;
  const ShellRun stats = sh(env + "\"$K\" stats --json");
  ASSERT_EQ(stats.rc, 0) << stats.err;
  EXPECT_EQ(nlohmann::json::parse(stats.out)["remote"]["puts_too_large"], 3) << stats.out;
  EXPECT_EQ(m_server->cli({"DBSIZE"}), "0");
}

}  // namespace
}  // namespace kcache::test
