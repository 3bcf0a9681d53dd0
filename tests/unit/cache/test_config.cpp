#include "kcache/config.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "support/temp_dir.hpp"

using kcache::Config;
using kcache::ConfigInputs;
using kcache::ErrorCode;
using kcache::FsyncPolicy;
using kcache::ReadVerify;
using kcache::SettingSource;
using kcache::Sharing;

namespace {

// Inputs that see only `env` (never the test runner's own environment).
ConfigInputs inputs(std::map<std::string, std::string> env, std::map<std::string, std::string> cli = {},
                    std::filesystem::path file = {}) {
  ConfigInputs in;
  in.command_line = std::move(cli);
  in.config_file = std::move(file);
  in.getenv = [env = std::move(env)](const std::string& name) -> std::optional<std::string> {
    const auto it = env.find(name);
    if (it == env.end()) {
      return std::nullopt;
    }
    return it->second;
  };
  return in;
}

void write(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string value_of(const Config& c, const std::string& key) {
  for (const auto& row : c.rows()) {
    if (row.key == key) {
      return row.value;
    }
  }
  return "<no such row>";
}

}  // namespace

TEST(Config, DefaultsWithOnlyHomeSet) {
  kcache::test::TempDir home;
  auto c = Config::load_from(inputs({{"HOME", home.path().string()}}));
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  EXPECT_EQ(c->cache_dir, home.path() / ".cache" / "kcache");
  EXPECT_EQ(c->max_size_bytes, std::uint64_t{5} << 30);
  EXPECT_EQ(c->memory_size_bytes, std::uint64_t{256} << 20);
  EXPECT_EQ(c->fsync, FsyncPolicy::none);
  EXPECT_EQ(c->sharing, Sharing::private_to_user);
  EXPECT_EQ(c->verify, ReadVerify::fast_when_unchanged);
  EXPECT_FALSE(c->disable);
  EXPECT_TRUE(c->config_file.empty());
  for (const auto& row : c->rows()) {
    EXPECT_EQ(row.source, SettingSource::default_value) << row.key;
    EXPECT_FALSE(row.description.empty()) << row.key;
    EXPECT_FALSE(row.accepted.empty()) << row.key;
    EXPECT_EQ(row.env.rfind("KCACHE_", 0), 0U) << row.key;
  }
}

TEST(Config, DefaultCacheDirFollowsXdgAndIsNeverTmp) {
  EXPECT_EQ(kcache::default_cache_dir([](const std::string& n) -> std::optional<std::string> {
              if (n == "XDG_CACHE_HOME") return "/srv/cache";
              if (n == "HOME") return "/home/u";
              return std::nullopt;
            }).value(),
            "/srv/cache/kcache");
  // A relative XDG_CACHE_HOME is invalid per the XDG spec and is ignored.
  EXPECT_EQ(kcache::default_cache_dir([](const std::string& n) -> std::optional<std::string> {
              if (n == "XDG_CACHE_HOME") return "relative";
              if (n == "HOME") return "/home/u";
              return std::nullopt;
            }).value(),
            "/home/u/.cache/kcache");
  auto none = kcache::default_cache_dir([](const std::string&) { return std::optional<std::string>(); });
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(none.error().message.find("KCACHE_DIR"), std::string::npos);
  // And the loader refuses rather than inventing a directory.
  auto c = Config::load_from(inputs({}));
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("never defaults to /tmp"), std::string::npos);
}

TEST(Config, PrecedenceIsCommandLineThenEnvironmentThenFileThenDefault) {
  kcache::test::TempDir home;
  const auto file = home.path() / ".config" / "kcache" / "kcache.toml";
  write(file, "max_size = \"1G\"\nmemory_size = \"8M\"\nfsync = \"none\"\njobs = 3\n");
  auto c = Config::load_from(inputs({{"HOME", home.path().string()}, {"KCACHE_MAX_SIZE", "2G"}, {"KCACHE_FSYNC", "file+directory"}},
                               {{"max_size", "3G"}}));
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  EXPECT_EQ(c->config_file, file);
  EXPECT_EQ(c->max_size_bytes, std::uint64_t{3} << 30);
  EXPECT_EQ(c->origin.at("max_size"), SettingSource::command_line);
  EXPECT_EQ(c->fsync, FsyncPolicy::file_and_directory);
  EXPECT_EQ(c->origin.at("fsync"), SettingSource::environment);
  EXPECT_EQ(c->memory_size_bytes, std::uint64_t{8} << 20);
  EXPECT_EQ(c->origin.at("memory_size"), SettingSource::config_file);
  EXPECT_EQ(c->jobs, 3U);
  EXPECT_EQ(c->origin.at("sharing"), SettingSource::default_value);
  EXPECT_EQ(value_of(*c, "max_size"), "3G");
  EXPECT_EQ(value_of(*c, "fsync"), "file+directory");
}

TEST(Config, ConfigFileFromXdgConfigHomeAndKcacheConfig) {
  kcache::test::TempDir dir;
  write(dir.path() / "xdg" / "kcache" / "kcache.toml", "verify = \"full\"\n");
  write(dir.path() / "other.toml", "sharing = \"group\"\n");
  auto xdg = Config::load_from(inputs({{"HOME", "/nonexistent"}, {"XDG_CONFIG_HOME", (dir.path() / "xdg").string()}}));
  ASSERT_TRUE(xdg.has_value()) << xdg.error().describe();
  EXPECT_EQ(xdg->verify, ReadVerify::always_full);
  auto env = Config::load_from(inputs({{"HOME", "/nonexistent"},
                                  {"XDG_CONFIG_HOME", (dir.path() / "xdg").string()},
                                  {"KCACHE_CONFIG", (dir.path() / "other.toml").string()}}));
  ASSERT_TRUE(env.has_value()) << env.error().describe();
  EXPECT_EQ(env->sharing, Sharing::group);
  EXPECT_EQ(env->verify, ReadVerify::fast_when_unchanged);
  EXPECT_EQ(env->config_file, dir.path() / "other.toml");
}

TEST(Config, ExplicitConfigFileThatDoesNotExistIsAnError) {
  auto c = Config::load_from(inputs({{"HOME", "/nonexistent"}, {"KCACHE_CONFIG", "/nonexistent/k.toml"}}));
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, ErrorCode::not_found);
  EXPECT_NE(c.error().message.find("KCACHE_CONFIG"), std::string::npos);
  auto flag = Config::load_from(inputs({{"HOME", "/nonexistent"}}, {}, "/nonexistent/k.toml"));
  ASSERT_FALSE(flag.has_value());
  EXPECT_NE(flag.error().message.find("--config"), std::string::npos);
}

TEST(Config, UnknownKeyInFileNamesFileLineAndSuggestsTheRightKey) {
  kcache::test::TempDir dir;
  const auto file = dir.path() / "k.toml";
  write(file, "# comment\nmax_size = \"1G\"\nmax_sise = \"2G\"\n");
  auto c = Config::load_from(inputs({{"HOME", "/h"}}, {}, file));
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, ErrorCode::invalid_argument);
  const std::string& m = c.error().message;
  EXPECT_NE(m.find(file.string() + ":3"), std::string::npos) << m;
  EXPECT_NE(m.find("max_sise"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'max_size'"), std::string::npos) << m;
}

TEST(Config, BadValueInFileNamesFileLineSettingAndAcceptedValues) {
  kcache::test::TempDir dir;
  const auto file = dir.path() / "k.toml";
  write(file, "\n\nfsync = \"sometimes\"\n");
  auto c = Config::load_from(inputs({{"HOME", "/h"}}, {}, file));
  ASSERT_FALSE(c.has_value());
  const std::string& m = c.error().message;
  EXPECT_NE(m.find(file.string() + ":3"), std::string::npos) << m;
  EXPECT_NE(m.find("'fsync'"), std::string::npos) << m;
  EXPECT_NE(m.find("sometimes"), std::string::npos) << m;
  EXPECT_NE(m.find("none, file, or file+directory"), std::string::npos) << m;
}

TEST(Config, WrongTomlTypeAndSyntaxErrorsAreReported) {
  kcache::test::TempDir dir;
  write(dir.path() / "a.toml", "disable = [1, 2]\n");
  auto a = Config::load_from(inputs({{"HOME", "/h"}}, {}, dir.path() / "a.toml"));
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message.find("must be a string, an integer or a boolean"), std::string::npos);
  write(dir.path() / "b.toml", "max_size = = 3\n");
  auto b = Config::load_from(inputs({{"HOME", "/h"}}, {}, dir.path() / "b.toml"));
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.error().message.find("b.toml:1"), std::string::npos) << b.error().message;
  EXPECT_NE(b.error().message.find("not valid TOML"), std::string::npos) << b.error().message;
}

TEST(Config, TomlIntegersAndBooleansAreAccepted) {
  kcache::test::TempDir dir;
  write(dir.path() / "k.toml", "max_size = 1048576\ndisable = true\n");
  auto c = Config::load_from(inputs({{"HOME", "/h"}}, {}, dir.path() / "k.toml"));
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  EXPECT_EQ(c->max_size_bytes, 1048576U);
  EXPECT_TRUE(c->disable);
}

TEST(Config, BadEnvironmentValueNamesTheVariableAndWhatToDo) {
  auto c = Config::load_from(inputs({{"HOME", "/h"}, {"KCACHE_MAX_SIZE", "12Q"}}));
  ASSERT_FALSE(c.has_value());
  const std::string& m = c.error().message;
  EXPECT_NE(m.find("KCACHE_MAX_SIZE"), std::string::npos) << m;
  EXPECT_NE(m.find("12Q"), std::string::npos) << m;
  EXPECT_NE(m.find("512M"), std::string::npos) << m;
  EXPECT_NE(m.find("unset KCACHE_MAX_SIZE"), std::string::npos) << m;
}

// With ConfigInputs::problems, bad settings outside the command line are
// collected and skipped (the layer below stays); the command line still fails.
TEST(Config, ProblemsOutsideTheCommandLineAreCollectedAndSkipped) {
  kcache::test::TempDir dir;
  write(dir.path() / "k.toml", "max_size = \"1M\"\nmax_sise = \"2M\"\nfsync = \"sometimes\"\nsharing = \"group\"\n");
  std::vector<kcache::Error> problems;
  auto in = inputs({{"HOME", "/h"}, {"KCACHE_MAX_SIZE", "garbage"}, {"KCACHE_VERIFY", "full"}}, {{"put", "sync"}},
                   dir.path() / "k.toml");
  in.problems = &problems;
  auto c = Config::load_from(in);
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  ASSERT_EQ(problems.size(), 3U);
  // The file's keys come in key order.
  EXPECT_NE(problems[0].message.find("k.toml:3: invalid value \"sometimes\" for setting 'fsync'"), std::string::npos)
      << problems[0].message;
  EXPECT_NE(problems[1].message.find("k.toml:2: unknown setting 'max_sise'"), std::string::npos) << problems[1].message;
  EXPECT_NE(problems[2].message.find("environment variable KCACHE_MAX_SIZE: invalid value \"garbage\""),
            std::string::npos)
      << problems[2].message;
  EXPECT_EQ(c->max_size_bytes, 1048576U) << "a bad value keeps the layer below";
  EXPECT_EQ(c->sharing, Sharing::group) << "the file's good keys still apply";
  EXPECT_EQ(c->verify, ReadVerify::always_full);
  EXPECT_EQ(c->fsync, FsyncPolicy::none);
  EXPECT_EQ(c->put, kcache::PutMode::sync);

  // The file as a whole: not TOML, or named by KCACHE_CONFIG and missing.
  write(dir.path() / "bad.toml", "max_size = [\n");
  problems.clear();
  auto bad = inputs({{"HOME", "/h"}, {"KCACHE_CONFIG", (dir.path() / "bad.toml").string()}});
  bad.problems = &problems;
  ASSERT_TRUE(Config::load_from(bad).has_value());
  ASSERT_EQ(problems.size(), 1U);
  EXPECT_NE(problems[0].message.find("not valid TOML"), std::string::npos) << problems[0].message;
  problems.clear();
  auto missing = inputs({{"HOME", "/h"}, {"KCACHE_CONFIG", (dir.path() / "none.toml").string()}});
  missing.problems = &problems;
  ASSERT_TRUE(Config::load_from(missing).has_value());
  ASSERT_EQ(problems.size(), 1U);
  EXPECT_NE(problems[0].message.find("named by KCACHE_CONFIG"), std::string::npos) << problems[0].message;

  // The command line is not collected: a bad value there, or --config naming nothing, fails.
  problems.clear();
  auto cli = inputs({{"HOME", "/h"}}, {{"max_size", "garbage"}});
  cli.problems = &problems;
  EXPECT_FALSE(Config::load_from(cli).has_value());
  auto flag = inputs({{"HOME", "/h"}}, {}, dir.path() / "none.toml");
  flag.problems = &problems;
  EXPECT_FALSE(Config::load_from(flag).has_value());
  EXPECT_TRUE(problems.empty());
}

TEST(Config, EmptyEnvironmentVariableCountsAsUnset) {
  auto c = Config::load_from(inputs({{"HOME", "/h"}, {"KCACHE_DISABLE", ""}, {"KCACHE_MAX_SIZE", ""}}));
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  EXPECT_FALSE(c->disable);
  EXPECT_EQ(c->origin.at("disable"), SettingSource::default_value);
}

TEST(Config, UnknownCommandLineSettingIsAnError) {
  auto c = Config::load_from(inputs({{"HOME", "/h"}}, {{"cache-dir", "/x"}}));
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("did you mean 'cache_dir'"), std::string::npos) << c.error().message;
}

TEST(Config, RelativeCacheDirInFileIsRelativeToTheFile) {
  kcache::test::TempDir dir;
  write(dir.path() / "conf" / "k.toml", "cache_dir = \"../store\"\n");
  auto c = Config::load_from(inputs({{"HOME", "/h"}}, {}, dir.path() / "conf" / "k.toml"));
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  EXPECT_EQ(c->cache_dir, dir.path() / "store");
  EXPECT_EQ(c->file_store_options().root, dir.path() / "store");
}

TEST(Config, BaseDirIsAnAbsoluteDirectoryOtherThanRoot) {
  kcache::test::TempDir dir;
  auto env = Config::load_from(inputs({{"HOME", "/h"}, {"KCACHE_BASE_DIR", "/src/team/"}}));
  ASSERT_TRUE(env.has_value()) << env.error().describe();
  EXPECT_EQ(env->base_dir, "/src/team");
  EXPECT_EQ(value_of(*env, "base_dir"), "/src/team");
  write(dir.path() / "conf" / "k.toml", "base_dir = \"../checkouts\"\n");
  auto file = Config::load_from(inputs({{"HOME", "/h"}}, {}, dir.path() / "conf" / "k.toml"));
  ASSERT_TRUE(file.has_value()) << file.error().describe();
  EXPECT_EQ(file->base_dir, (dir.path() / "checkouts").string());
  auto root = Config::load_from(inputs({{"HOME", "/h"}, {"KCACHE_BASE_DIR", "/"}}));
  ASSERT_FALSE(root.has_value());
  EXPECT_NE(root.error().message.find("KCACHE_BASE_DIR"), std::string::npos) << root.error().message;
  auto unset = Config::load_from(inputs({{"HOME", "/h"}}));
  ASSERT_TRUE(unset.has_value());
  EXPECT_EQ(unset->base_dir, "");
}

TEST(Config, EveryRowValueParsesBackToTheSameSettings) {
  auto c = Config::load_from(inputs({{"HOME", "/h"},
                                {"KCACHE_MAX_SIZE", "1536M"},
                                {"KCACHE_MEMORY_SIZE", "12345"},
                                {"KCACHE_SHARING", "group"},
                                {"KCACHE_JOBS", "7"},
                                {"KCACHE_LOG_LEVEL", "debug"},
                                {"KCACHE_DISABLE", "yes"},
                                {"KCACHE_BASE_DIR", "/src/team"}}));
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  std::map<std::string, std::string> again;
  for (const auto& row : c->rows()) {
    again[row.key] = row.value;
  }
  auto d = Config::load_from(inputs({{"HOME", "/other"}}, again));
  ASSERT_TRUE(d.has_value()) << d.error().describe();
  EXPECT_EQ(d->rows().size(), c->rows().size());
  for (std::size_t i = 0; i < c->rows().size(); ++i) {
    EXPECT_EQ(d->rows()[i].value, c->rows()[i].value) << c->rows()[i].key;
  }
  EXPECT_EQ(d->max_size_bytes, 1536U << 20);
  EXPECT_EQ(d->memory_size_bytes, 12345U);
  EXPECT_TRUE(d->disable);
}

TEST(ParseSize, AcceptsBinaryUnitsAndRejectsTheRest) {
  EXPECT_EQ(kcache::parse_size("0").value(), 0U);
  EXPECT_EQ(kcache::parse_size("1048576").value(), 1048576U);
  EXPECT_EQ(kcache::parse_size("64k").value(), 64U << 10);
  EXPECT_EQ(kcache::parse_size("512M").value(), 512U << 20);
  EXPECT_EQ(kcache::parse_size("10G").value(), std::uint64_t{10} << 30);
  EXPECT_EQ(kcache::parse_size("10GiB").value(), std::uint64_t{10} << 30);
  EXPECT_EQ(kcache::parse_size("10 GB").value(), std::uint64_t{10} << 30);
  EXPECT_EQ(kcache::parse_size("1.5G").value(), std::uint64_t{3} << 29);
  EXPECT_EQ(kcache::parse_size("2T").value(), std::uint64_t{2} << 40);
  EXPECT_EQ(kcache::parse_size("100B").value(), 100U);
  for (const char* bad : {"", "G", "-1", "1.5", "12Q", "10GiBs", "1e9", " 5M", "5M ", "99999999999999999999",
                          "20000000T"}) {
    auto r = kcache::parse_size(bad);
    EXPECT_FALSE(r.has_value()) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    }
  }
}

TEST(FormatSize, PrintsForPeople) {
  EXPECT_EQ(kcache::format_size(0), "0 B");
  EXPECT_EQ(kcache::format_size(1023), "1023 B");
  EXPECT_EQ(kcache::format_size(1536), "1.5 KiB");
  EXPECT_EQ(kcache::format_size(std::uint64_t{10} << 30), "10.0 GiB");
}

#include "kcache/blob.hpp"
#include "kcache/tiered_store.hpp"
#include "kcache/write_behind_store.hpp"

TEST(ConfiguredStore, MemoryInFrontOfFileUnlessTurnedOff) {
  kcache::test::TempDir dir;
  auto c = Config::load_from(inputs({{"HOME", dir.path().string()}, {"KCACHE_DIR", (dir.path() / "c").string()}}));
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  auto store = kcache::open_configured_store(*c);
  ASSERT_TRUE(store.has_value()) << store.error().describe();
  // Default `put = background`: the chain is behind a WriteBehindStore.
  auto* behind = dynamic_cast<kcache::WriteBehindStore*>(store->get());
  ASSERT_NE(behind, nullptr);
  auto* tiered = dynamic_cast<kcache::TieredStore*>(&behind->inner());
  ASSERT_NE(tiered, nullptr);
  ASSERT_EQ(tiered->tier_count(), 2U);
  EXPECT_EQ(tiered->tier(0).name(), "memory");
  EXPECT_EQ(tiered->tier(1).name(), "file");
  const auto a = kcache::make_blob("blob", "payload").value();
  EXPECT_EQ((*store)->put(a).value(), kcache::PutOutcome::queued);
  ASSERT_TRUE(behind->flush().has_value());
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "c" / "v1" / "entries" / a.passport.key.shard() /
                                      a.passport.key.hex()));

  c->memory_size_bytes = 0;
  c->put = kcache::PutMode::sync;
  auto no_memory = kcache::open_configured_store(*c);
  ASSERT_TRUE(no_memory.has_value());
  EXPECT_EQ(dynamic_cast<kcache::TieredStore*>(no_memory->get())->tier_count(), 1U);
  auto got = (*no_memory)->get(a.passport.key);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ(**got, a);
}

TEST(ConfiguredStore, SyncPutPublishesBeforeReturning) {
  kcache::test::TempDir dir;
  auto c = Config::load_from(inputs({{"HOME", dir.path().string()},
                                     {"KCACHE_DIR", (dir.path() / "c").string()},
                                     {"KCACHE_PUT", "sync"}}));
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  EXPECT_EQ(c->put, kcache::PutMode::sync);
  auto store = kcache::open_configured_store(*c);
  ASSERT_TRUE(store.has_value());
  EXPECT_EQ(dynamic_cast<kcache::WriteBehindStore*>(store->get()), nullptr);
  const auto a = kcache::make_blob("blob", "payload").value();
  EXPECT_EQ((*store)->put(a).value(), kcache::PutOutcome::stored);
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "c" / "v1" / "entries" / a.passport.key.shard() /
                                      (a.passport.key.hex() + ".pass")));
  auto bad = Config::load_from(inputs({{"HOME", dir.path().string()}, {"KCACHE_PUT", "later"}}));
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, kcache::ErrorCode::invalid_argument);
  EXPECT_NE(bad.error().message.find("KCACHE_PUT"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("background"), std::string::npos) << bad.error().message;
}

TEST(ConfiguredStore, DisabledNeverHitsAndKeepsNothing) {
  kcache::test::TempDir dir;
  auto c = Config::load_from(inputs({{"HOME", dir.path().string()},
                                {"KCACHE_DIR", (dir.path() / "c").string()},
                                {"KCACHE_DISABLE", "1"}}));
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  auto store = kcache::open_configured_store(*c);
  ASSERT_TRUE(store.has_value());
  const auto a = kcache::make_blob("blob", "payload").value();
  EXPECT_TRUE((*store)->put(a).has_value());
  auto got = (*store)->get(a.passport.key);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
  EXPECT_TRUE((*store)->list()->empty());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "c"));
  EXPECT_EQ((*store)->stats()->misses, 1U);
}

TEST(Blob, KeyCoversKindAndContentOnly) {
  const auto a = kcache::make_blob("ptx", "same bytes").value();
  const auto b = kcache::make_blob("ptx", "same bytes", {{"label", "x"}}).value();
  const auto c = kcache::make_blob("cubin", "same bytes").value();
  const auto d = kcache::make_blob("ptx", "other bytes").value();
  EXPECT_EQ(a.passport.key, b.passport.key);
  EXPECT_NE(a.passport.key, c.passport.key);
  EXPECT_NE(a.passport.key, d.passport.key);
  EXPECT_EQ(a.passport.key, kcache::blob_key("ptx", "same bytes").key());
  EXPECT_EQ(a.passport.key_record.domain, "blob");
  EXPECT_EQ(b.passport.labels.at("label"), "x");
  EXPECT_EQ(a.passport.producer.name, "kcache");
  EXPECT_TRUE(a.verify().has_value());
  auto bad = kcache::make_blob("Not A Kind", "x");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
  EXPECT_FALSE(kcache::make_blob("ptx", "x", {{"", "v"}}).has_value());
}

TEST(Config, BundleFilesAndTrustedKeysFromAListInTheFileOrWordsInTheEnvironment) {
  kcache::test::TempDir dir;
  write(dir.path() / "kcache.toml",
        "bundles = [\"a.kcb\", \"/opt/b.kcb\"]\nbundle_trusted_keys = \"ci.pub\"\n");
  auto file = Config::load_from(inputs({{"HOME", "/nonexistent"}}, {}, dir.path() / "kcache.toml"));
  ASSERT_TRUE(file.has_value()) << file.error().describe();
  EXPECT_EQ(file->bundles,
            (std::vector<std::filesystem::path>{dir.path() / "a.kcb", std::filesystem::path("/opt/b.kcb")}));
  EXPECT_EQ(file->bundle_trusted_keys, (std::vector<std::filesystem::path>{dir.path() / "ci.pub"}));
  auto env = Config::load_from(
      inputs({{"HOME", "/nonexistent"}, {"KCACHE_BUNDLES", "/x.kcb /y.kcb"}}, {}, dir.path() / "kcache.toml"));
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->bundles.size(), 2U);
  EXPECT_EQ(value_of(*env, "bundles"), "/x.kcb /y.kcb");
  write(dir.path() / "bad.toml", "bundles = [1]\n");
  EXPECT_FALSE(Config::load_from(inputs({{"HOME", "/nonexistent"}}, {}, dir.path() / "bad.toml")).has_value());
}
