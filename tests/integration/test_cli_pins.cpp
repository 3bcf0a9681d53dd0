// kcache pin / unpin, clear --include-pinned, stats and prune with pins, and
// the eviction_policy setting (issue 21), through the real command.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "cli_shell.hpp"

namespace kcache::test {
namespace {

using Pins = CliShell;
using nlohmann::json;

TEST_F(Pins, PinUnpinStatsClearAndPruneKeepPinnedEntries) {
  const std::string a = put("a.bin", std::string(40000, 'a'));
  const std::string b = put("b.bin", std::string(1000, 'b'));
  ShellRun r = sh("\"$K\" pin " + a);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "pinned " + a + "\n");
  r = sh("\"$K\" pin " + a + " --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = json::parse(r.out);
  EXPECT_EQ(j["pinned"], 0);
  EXPECT_EQ(j["already_pinned"], 1);
  EXPECT_EQ(j["pinned_entries"], 1);
  r = sh("\"$K\" ls --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const auto& e : json::parse(r.out)) {
    EXPECT_EQ(e["pinned"].get<bool>(), e["key"] == a) << e.dump();
  }
  // A key that is not stored: named, exit 3; not a key: exit 2.
  r = sh("\"$K\" pin " + std::string(64, 'e'));
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.err.find("no entry " + std::string(64, 'e')), std::string::npos) << r.err;
  EXPECT_EQ(sh("\"$K\" pin nothex").rc, 2);
  // Pins alone over a lowered cap: stats says so, a put is refused, nothing is evicted.
  r = sh("KCACHE_MAX_SIZE=30000 \"$K\" stats --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_TRUE(j["pins_over_cap"].get<bool>());
  EXPECT_GE(j["pinned_bytes"].get<std::uint64_t>(), 40000U);
  EXPECT_EQ(j["eviction_policy"], "cost");
  r = sh("KCACHE_MAX_SIZE=30000 \"$K\" stats");
  EXPECT_NE(r.err.find("warning: pinned entries hold"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("OVER THE CAP"), std::string::npos) << r.out;
  write_file(dir() / "c.bin", std::string(500, 'c'));
  r = sh("KCACHE_MAX_SIZE=30000 \"$K\" put c.bin");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("pinned entries hold"), std::string::npos) << r.err;
  // prune below the pins: every other entry goes, the pinned one stays, exit 1 naming the pins.
  r = sh("\"$K\" prune --max-size 20000");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("pinned"), std::string::npos) << r.err;
  EXPECT_EQ(sh("\"$K\" get " + b + " -o /dev/null").rc, 3);
  EXPECT_EQ(sh("\"$K\" get " + a + " -o /dev/null").rc, 0);
  // clear keeps pins unless asked.
  put("b.bin", std::string(1000, 'b'));
  r = sh("\"$K\" clear --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j["entries_removed"], 1);
  EXPECT_EQ(j["pinned_kept"], 1);
  EXPECT_EQ(sh("\"$K\" get " + a + " -o /dev/null").rc, 0);
  r = sh("\"$K\" unpin " + a + " " + b);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "unpinned " + a + "\nnot pinned " + b + "\n");
  EXPECT_EQ(sh("\"$K\" pin " + a + " && \"$K\" clear --include-pinned").out, "pinned " + a + "\nremoved 1 entries\n");
  EXPECT_EQ(sh("\"$K\" get " + a + " -o /dev/null").rc, 3);
}

// `kcache put --build-ms` records the rebuild cost (passport and payload
// mtime), so the cost policy keeps a costly put entry over a cheap newer one
// when a put at the cap must evict one, where lru drops the older. Without
// --build-ms both cost 0 and cost acts as lru.
TEST_F(Pins, PutBuildMsIsARebuildCostThatEvictionWeighs) {
  write_file(dir() / "costly.bin", std::string(20000, 'c'));
  write_file(dir() / "cheap.bin", std::string(20000, 'd'));
  write_file(dir() / "third.bin", std::string(20000, 'e'));
  ShellRun r = sh(R"("$K" put costly.bin --build-ms 5000 && touch -d '-1 hour' "$KCACHE_DIR"/v1/entries/*/*.pass &&
"$K" put cheap.bin && cp -a "$KCACHE_DIR" lru-cache)");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string costly = r.out.substr(0, 64);
  const std::string cheap = r.out.substr(65, 64);
  r = sh("\"$K\" show " + costly);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["compile_duration_us"], 5000000) << r.out;
  // A cap with room for two of the three entries (and the metadata): the
  // third put evicts one.
  const std::string third = R"(KCACHE_MAX_SIZE=60000 "$K" put third.bin >/dev/null && "$K" --json ls)";
  r = sh("export KCACHE_DIR=\"$PWD/lru-cache\" KCACHE_EVICTION_POLICY=lru; " + third);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.find(costly), std::string::npos) << "lru drops the older, costly entry: " << r.out;
  EXPECT_NE(r.out.find(cheap), std::string::npos) << r.out;
  r = sh(third);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find(costly), std::string::npos) << "cost keeps the costly entry: " << r.out;
  EXPECT_EQ(r.out.find(cheap), std::string::npos) << "and drops the cheap one: " << r.out;
  EXPECT_EQ(sh("\"$K\" put cheap.bin --build-ms -1").rc, 2) << "a negative cost is bad usage";
}

TEST_F(Pins, EvictionPolicyIsASetting) {
  ShellRun r = sh("KCACHE_EVICTION_POLICY=lru \"$K\" stats --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["eviction_policy"], "lru");
  r = sh("KCACHE_EVICTION_POLICY=gds \"$K\" stats --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["eviction_policy"], "gds");
  r = sh("KCACHE_EVICTION_POLICY=lfu \"$K\" stats");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("eviction_policy"), std::string::npos) << r.err;
  r = sh("\"$K\" config eviction_policy");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("cost"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kcache::test
