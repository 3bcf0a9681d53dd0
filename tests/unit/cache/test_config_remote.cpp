// The remote settings in the one settings table: list parsing, precedence,
// the TOML table form, and passwords that never reach a message.
#include "kcache/config.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "support/temp_dir.hpp"

using kcache::Config;
using kcache::ConfigInputs;
using kcache::SettingSource;

namespace {

ConfigInputs inputs(std::map<std::string, std::string> env, std::map<std::string, std::string> cli = {},
                    std::filesystem::path file = {}) {
  ConfigInputs in;
  in.command_line = std::move(cli);
  in.config_file = std::move(file);
  env.emplace("HOME", "/home/test");
  in.getenv = [env = std::move(env)](const std::string& name) -> std::optional<std::string> {
    const auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  return in;
}

std::string row(const Config& c, const std::string& key) {
  for (const auto& r : c.rows()) {
    if (r.key == key) {
      return r.value;
    }
  }
  return "(none)";
}

}  // namespace

TEST(ConfigRemote, EnvironmentListIsSpaceSeparatedAndTheCommandLineReplacesIt) {
  auto c = Config::load_from(inputs({{"KCACHE_REMOTE", "redis://a:1  redis+unix:///s.sock?read_only=true"}}));
  ASSERT_TRUE(c.has_value()) << c.error().message;
  ASSERT_EQ(c->remote.size(), 2U);
  EXPECT_EQ(c->remote[1], "redis+unix:///s.sock?read_only=true");
  EXPECT_EQ(c->origin["remote"], SettingSource::environment);
  auto d = Config::load_from(inputs({{"KCACHE_REMOTE", "redis://a:1"}}, {{"remote", "redis://b:2"}}));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->remote, std::vector<std::string>{"redis://b:2"});
  EXPECT_EQ(d->origin["remote"], SettingSource::command_line);
  auto none = Config::load_from(inputs({}));
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->remote.empty());
  EXPECT_EQ(none->remote_breaker_failures, 3U);
  EXPECT_EQ(none->remote_breaker_seconds, 30U);
  EXPECT_TRUE(none->remote_compression);
}

TEST(ConfigRemote, FileTakesListsOfUrlsAndTables) {
  kcache::test::TempDir dir;
  const auto file = dir.path() / "kcache.toml";
  std::ofstream(file) << "remote = [\"redis://a:6379\", {url = \"redis://u:pw@b:6380/1\", read_only = true, "
                         "ttl_s = 60}]\nremote_key_file = \"team.key\"\nremote_read_key_files = \"old.key new.key\"\n"
                         "remote_compression = \"none\"\nremote_breaker_failures = 5\n";
  auto c = Config::load_from(inputs({}, {}, file));
  ASSERT_TRUE(c.has_value()) << c.error().message;
  ASSERT_EQ(c->remote.size(), 2U);
  EXPECT_EQ(c->remote[1], "redis://u:pw@b:6380/1?read_only=true&ttl_s=60");
  EXPECT_EQ(c->remote_key_file, dir.path() / "team.key");  // relative to the file
  ASSERT_EQ(c->remote_read_key_files.size(), 2U);
  EXPECT_FALSE(c->remote_compression);
  EXPECT_EQ(c->remote_breaker_failures, 5U);
  EXPECT_EQ(row(*c, "remote"), "redis://a:6379 redis://u:***@b:6380/1?read_only=true&ttl_s=60");
}

TEST(ConfigRemote, BadUrlsAreSettingErrorsThatNeverShowThePassword) {
  for (const char* bad : {"redis://u:topsecret@h:port", "ftp://u:topsecret@h", "redis://u:topsecret@h?bogus=1"}) {
    auto c = Config::load_from(inputs({{"KCACHE_REMOTE", bad}}));
    ASSERT_FALSE(c.has_value()) << bad;
    EXPECT_EQ(c.error().message.find("topsecret"), std::string::npos) << c.error().message;
    EXPECT_NE(c.error().message.find("KCACHE_REMOTE"), std::string::npos) << c.error().message;
  }
  kcache::test::TempDir dir;
  const auto file = dir.path() / "kcache.toml";
  std::ofstream(file) << "remote = [{read_only = true}]\n";
  auto c = Config::load_from(inputs({}, {}, file));
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("without `url`"), std::string::npos) << c.error().message;
}
