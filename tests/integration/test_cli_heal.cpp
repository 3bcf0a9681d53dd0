// The cache heals itself (issue 9 item 8), seen from the kcache command: a put
// killed mid-way leaves temporary files that `stats` counts and `verify
// --repair` removes (a running put's file is never touched); `verify --repair`
// re-syncs `stats` with the disk after entries vanish behind kcache's back; a
// layout directory that is a file is named, with its fix, by every command,
// `compile` still compiles, and `verify --repair` puts it right.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "integration/cli_shell.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::test {
namespace {

namespace fs = std::filesystem;

using CliHeal = CliShell;

nlohmann::json stats_of(const ShellRun& r) {
  EXPECT_EQ(r.rc, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

std::size_t files_in(const fs::path& d) {
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = fs::directory_iterator(d, ec); !ec && it != fs::directory_iterator(); ++it) {
    ++n;
  }
  return n;
}

TEST_F(CliHeal, KilledPutLeavesTempsThatStatsCountsAndVerifyRepairRemoves) {
  write_file(dir() / "big.bin", std::string(300000, 'k'));
  ASSERT_EQ(sh("\"$K\" stats > /dev/null").rc, 0);
  // Killed after staging payload and passport, before its first rename.
  const ShellRun killed = sh("KCACHE_FAULT=op=rename,nth=1,action=kill \"$K\" put big.bin");
  ASSERT_EQ(killed.rc, 128 + 9) << killed.err;
  ASSERT_EQ(files_in(cache() / "v1" / "tmp"), 2U);

  const auto before = stats_of(sh("\"$K\" stats --json"));
  EXPECT_EQ(before["temp_files"], 2);
  EXPECT_GT(before["temp_bytes"].get<std::uint64_t>(), 300000U);
  EXPECT_EQ(before["stale_temp_files"], 2);
  EXPECT_EQ(before["stale_temp_bytes"], before["temp_bytes"]);
  const ShellRun table = sh("\"$K\" stats");
  EXPECT_NE(table.out.find("left by writers that are gone: `kcache verify --repair` removes them"), std::string::npos)
      << table.out;

  const ShellRun look = sh("\"$K\" verify");
  EXPECT_EQ(look.rc, 0) << look.err;
  EXPECT_NE(look.out.find("temporary file"), std::string::npos) << look.out;
  EXPECT_NE(look.out.find("of a writer that is gone"), std::string::npos) << look.out;
  EXPECT_EQ(files_in(cache() / "v1" / "tmp"), 2U) << "verify without --repair changes nothing";

  const ShellRun repair = sh("\"$K\" verify --repair --json");
  ASSERT_EQ(repair.rc, 0) << repair.err;
  const auto j = nlohmann::json::parse(repair.out);
  EXPECT_EQ(j["stale_temps"], 2);
  EXPECT_EQ(j["stale_temps_removed"], 2);
  EXPECT_EQ(files_in(cache() / "v1" / "tmp"), 0U);
  const auto after = stats_of(sh("\"$K\" stats --json"));
  EXPECT_EQ(after["temp_files"], 0);
  EXPECT_EQ(after["temp_bytes"], 0);
}

TEST_F(CliHeal, RunningPutsTempSurvivesVerifyRepairAndTheEntryIsComplete) {
  // A second process in the middle of a put: `kcache put -` reading a FIFO
  // that this script keeps open, with half of the bytes written.
  const ShellRun r = sh(R"SH(
mkfifo p
"$K" put - < p > key.txt 2> put.err &
PUT=$!
exec 3> p
head -c 100000 /dev/zero | tr '\0' 'a' >&3
for i in $(seq 500); do
  n=$(ls "$KCACHE_DIR/v1/tmp" 2>/dev/null | wc -l)
  [ "$n" = 1 ] && [ "$(stat -c %s "$KCACHE_DIR"/v1/tmp/*)" = 100000 ] && break
  sleep 0.01
done
touch -d '3 hours ago' "$KCACHE_DIR"/v1/tmp/*
"$K" stats --json > stats.json || exit 91
"$K" verify --repair --json > verify.json || exit 92
"$K" prune --max-size 1K > /dev/null || exit 93
ls "$KCACHE_DIR/v1/tmp" | wc -l > during.txt
head -c 50000 /dev/zero | tr '\0' 'b' >&3
exec 3>&-
wait $PUT || exit 94
"$K" get "$(cat key.txt)" > got.bin || exit 95
)SH");
  ASSERT_EQ(r.rc, 0) << r.err << read_file(dir() / "put.err");
  const auto stats = nlohmann::json::parse(read_file(dir() / "stats.json"));
  EXPECT_EQ(stats["temp_files"], 1);
  EXPECT_EQ(stats["temp_bytes"], 100000);
  EXPECT_EQ(stats["stale_temp_files"], 0) << "its writer runs, however old the file";
  const auto verify = nlohmann::json::parse(read_file(dir() / "verify.json"));
  EXPECT_EQ(verify["stale_temps"], 0);
  EXPECT_EQ(read_file(dir() / "during.txt"), "1\n") << "verify --repair and prune left the running put's file";
  EXPECT_EQ(read_file(dir() / "got.bin"), std::string(100000, 'a') + std::string(50000, 'b'));
  EXPECT_EQ(files_in(cache() / "v1" / "tmp"), 0U);
}

TEST_F(CliHeal, StatsFollowTheDiskAfterVerifyRepair) {
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) {
    keys.push_back(put("f" + std::to_string(i), std::string(1000 + static_cast<std::size_t>(i) * 500, 'a' + i)));
  }
  ASSERT_EQ(stats_of(sh("\"$K\" stats --json"))["entries"], 8);
  // Behind kcache's back: two entries' files, and the shard directory of a third.
  const auto entries = cache() / "v1" / "entries";
  for (int i = 0; i < 2; ++i) {
    fs::remove(entries / keys[i].substr(0, 2) / keys[i]);
    fs::remove(entries / keys[i].substr(0, 2) / (keys[i] + ".pass"));
  }
  fs::remove_all(entries / keys[2].substr(0, 2));
  std::uint64_t disk_entries = 0;
  std::uint64_t disk_bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(entries)) {
    if (e.is_regular_file()) {
      disk_bytes += e.file_size();
      disk_entries += e.path().extension() == ".pass" ? 1 : 0;
    }
  }
  ASSERT_LE(disk_entries, 5U);
  EXPECT_EQ(stats_of(sh("\"$K\" stats --json"))["entries"], 8) << "stats does not know yet";

  const ShellRun look = sh("\"$K\" verify");
  EXPECT_EQ(look.rc, 0) << look.err;
  EXPECT_NE(look.out.find("size accounting: 8 entries"), std::string::npos) << look.out;
  EXPECT_NE(look.out.find("run `kcache verify --repair` to re-sync"), std::string::npos) << look.out;
  EXPECT_EQ(stats_of(sh("\"$K\" stats --json"))["entries"], 8) << "verify without --repair changes nothing";

  const ShellRun repair = sh("\"$K\" verify --repair");
  EXPECT_EQ(repair.rc, 0) << repair.err;
  EXPECT_NE(repair.out.find(": re-synced"), std::string::npos) << repair.out;
  const auto after = stats_of(sh("\"$K\" stats --json"));
  EXPECT_EQ(after["entries"].get<std::uint64_t>(), disk_entries);
  EXPECT_EQ(after["size_bytes"].get<std::uint64_t>(), disk_bytes);
  const ShellRun again = sh("\"$K\" verify");
  EXPECT_EQ(again.out.find("size accounting"), std::string::npos) << again.out;
}

// Every layout directory, every command: the path, what is wrong, the fix.
TEST_F(CliHeal, LayoutDirectoryThatIsAFileIsNamedByEveryCommandAndRepaired) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  for (const std::string rel : {"v1/entries", "v1/tmp", "v1/locks", "v1/stats", "v1/toolkit", "v1"}) {
    SCOPED_TRACE(rel);
    fs::remove_all(cache());
    const std::string key = put("in.bin", "some bytes for " + rel);
    fs::create_directories(cache() / "v1" / "toolkit");
    fs::remove_all(cache() / rel);
    write_file(cache() / rel, "user data");
    const std::vector<std::string> commands{"put in.bin", "get " + key, "show " + key, "ls",   "stats",
                                            "stats --json", "verify",      "prune",       "clear"};
    for (const std::string& cmd : commands) {
      const ShellRun r = sh("\"$K\" " + cmd);
      EXPECT_EQ(r.rc, 4) << cmd << ": " << r.err;
      EXPECT_NE(r.err.find("kcache: error: corrupt: the cache at " + cache().string() + " is damaged: " +
                           (cache() / rel).string() + " is a regular file, where kcache keeps a directory"),
                std::string::npos)
          << cmd << ": " << r.err;
      EXPECT_NE(r.err.find("run `kcache verify --repair`"), std::string::npos) << cmd << ": " << r.err;
      EXPECT_NE(r.err.find("kcache: hint: "), std::string::npos) << cmd << ": " << r.err;
      EXPECT_EQ(r.err.find("Bad file descriptor"), std::string::npos) << cmd << ": " << r.err;
    }
    // A broken cache never breaks a build: one warning, and the compile's exit code.
    fs::remove(dir() / "k.cubin");
    const ShellRun compile = sh("\"$K\" compile " + src + " --arch sm_90 -o k.cubin");
    EXPECT_EQ(compile.rc, 0) << compile.err;
    EXPECT_TRUE(fs::is_regular_file(dir() / "k.cubin"));
    EXPECT_NE(compile.err.find("compiling without the cache"), std::string::npos) << compile.err;
    EXPECT_NE(compile.err.find("kcache verify --repair"), std::string::npos) << compile.err;
    EXPECT_EQ(compile.err.find("Bad file descriptor"), std::string::npos) << compile.err;

    const ShellRun repair = sh("\"$K\" verify --repair");
    EXPECT_EQ(repair.rc, 0) << repair.err;
    EXPECT_NE(repair.out.find(rel + " was a regular file, not a directory: moved aside to " + rel + ".broken-"),
              std::string::npos)
        << repair.out;
    EXPECT_TRUE(fs::is_directory(cache() / rel));
    std::string aside;
    for (const auto& e : fs::directory_iterator((cache() / rel).parent_path())) {
      if (e.path().filename().string().starts_with(fs::path(rel).filename().string() + ".broken-")) {
        aside = read_file(e.path());
      }
    }
    EXPECT_EQ(aside, "user data") << "moved aside, never deleted";
    const ShellRun ok = sh("\"$K\" put in.bin && \"$K\" get " + key + " && \"$K\" verify");
    EXPECT_EQ(ok.rc, 0) << ok.err;
    EXPECT_NE(ok.out.find("some bytes for " + rel), std::string::npos) << ok.out;
  }
}

}  // namespace
}  // namespace kcache::test
