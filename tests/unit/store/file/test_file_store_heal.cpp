// FileStore heals itself (issue 9 item 8): temporary files of writers that are
// gone are counted and swept (a running writer's never), verify(Repair::yes)
// re-syncs the shared accounting with the disk, and a layout directory that is
// not a directory is named on open and moved aside by repair_layout.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "file_store_test_util.hpp"
#include "kcache/blob.hpp"
#include "store/file/shared_counters.hpp"
#include "support/child.hpp"
#include "support/temp_dir.hpp"
#include "util/fd.hpp"
#include "util/process_identity.hpp"
#include "util/sha256.hpp"

namespace kcache::test {
namespace {

namespace fs = std::filesystem;

// The default age limit: a leftover must be found by its writer, not by its age.
FileStoreOptions real_age_options(const fs::path& root) {
  auto o = quiet_options(root);
  o.stale_temp_age = std::chrono::seconds(3600);
  return o;
}

std::vector<fs::path> temps_in(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root / "v1" / "tmp", ec)) {
    out.push_back(e.path());
  }
  return out;
}

std::uint64_t bytes_of(const std::vector<fs::path>& files) {
  std::uint64_t sum = 0;
  for (const auto& f : files) {
    sum += fs::file_size(f);
  }
  return sum;
}

// The complete entries on disk: (bytes, entries), counted without kcache.
std::pair<std::uint64_t, std::uint64_t> disk_entries(const fs::path& root) {
  std::uint64_t bytes = 0;
  std::uint64_t entries = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(root / "v1" / "entries", ec)) {
    const auto name = e.path().filename().string();
    if (e.is_regular_file() && name.size() == 69 && name.ends_with(".pass")) {
      const auto payload = e.path().parent_path() / name.substr(0, 64);
      if (fs::is_regular_file(payload)) {
        ++entries;
        bytes += e.file_size() + fs::file_size(payload);
      }
    }
  }
  return {bytes, entries};
}

void set_mtime_hours_ago(const fs::path& path, int hours) {
  timespec times[2];
  times[0].tv_sec = ::time(nullptr) - hours * 3600;
  times[0].tv_nsec = 0;
  times[1] = times[0];
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

// ---------------------------------------------------------------- temporary files

TEST(FileStoreHeal, KilledWritersTempsAreCountedThenRemovedByVerifyRepair) {
  TempDir dir;
  const auto root = dir.path() / "cache";
  { auto s = open_store(real_age_options(root)); }
  // Killed before its first rename: payload and passport are staged in v1/tmp.
  std::string out;
  const int status = run_program({KCACHE_STORE_TOOL_PATH, "put", root.string(), "5", "5", "30000", "file"},
                                  {{"KCACHE_FAULT", "op=rename,nth=1,action=kill"}}, &out);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << describe_status(status) << out;
  const auto left = temps_in(root);
  ASSERT_EQ(left.size(), 2U) << "the killed writer's staged payload and passport";
  const std::uint64_t left_bytes = bytes_of(left);
  EXPECT_GT(left_bytes, 30000U);

  auto o = real_age_options(root);
  o.sweep_on_open = OpenSweep::no;  // as `kcache stats` opens it
  auto store = open_store(o);
  auto stats = store->stats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->temp_files, 2U);
  EXPECT_EQ(stats->temp_bytes, left_bytes);
  EXPECT_EQ(stats->stale_temp_files, 2U) << "the writer is gone: stale however young";
  EXPECT_EQ(stats->stale_temp_bytes, left_bytes);
  EXPECT_EQ(stats->entries, 0U);

  auto seen = store->verify(Repair::no);
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->stale_temps, 2U);
  EXPECT_EQ(seen->stale_temps_removed, 0U);
  EXPECT_EQ(temps_in(root).size(), 2U) << "verify without repair changes nothing";

  auto repaired = store->verify(Repair::yes);
  ASSERT_TRUE(repaired.has_value());
  EXPECT_EQ(repaired->stale_temps, 2U);
  EXPECT_EQ(repaired->stale_temps_removed, 2U);
  EXPECT_TRUE(temps_in(root).empty());
  EXPECT_EQ(store->stats()->temp_files, 0U);
  EXPECT_FALSE(store->get(test_key(5))->has_value());
}

TEST(FileStoreHeal, KilledWritersTempsAreSweptWhenTheNextStoreOpens) {
  TempDir dir;
  const auto root = dir.path() / "cache";
  // Twice: the first open makes the directory, the second its check table
  // (made at open in a directory that exists), so the writer's first write is its payload's.
  { auto s = open_store(real_age_options(root)); }
  { auto s = open_store(real_age_options(root)); }
  const int status = run_program({KCACHE_STORE_TOOL_PATH, "put", root.string(), "6", "6", "5000", "file"},
                                 {{"KCACHE_FAULT", "op=write,nth=1,action=kill"}});
  ASSERT_TRUE(WIFSIGNALED(status)) << describe_status(status);
  ASSERT_EQ(temps_in(root).size(), 1U) << "the staged payload, created before its first write";
  auto store = open_store(real_age_options(root));
  EXPECT_TRUE(temps_in(root).empty());
}

// A put streaming from a pipe in another process: its temp stays in v1/tmp
// for as long as the writer runs, whatever its age and whoever sweeps.
TEST(FileStoreHeal, RunningWritersTempSurvivesEverySweep) {
  TempDir dir;
  const auto root = dir.path() / "cache";
  { auto s = open_store(quiet_options(root)); }
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const std::string payload = make_payload(91, 200000);
  const pid_t writer = fork_child([&] {
    ::close(pipe_fds[1]);
    auto s = FileStore::open(real_age_options(root));
    if (!s) {
      return 3;
    }
    auto put = (*s)->put_stream(pipe_fds[0], [](std::uint64_t size, const std::array<std::uint8_t, 32>& sha) {
      return make_blob_passport("blob", size, sha, {});
    });
    return put && put->outcome == PutOutcome::stored ? 0 : 4;
  });
  ASSERT_GT(writer, 0);
  ::close(pipe_fds[0]);
  // Half the bytes, then wait until the writer has staged them.
  const std::size_t half = payload.size() / 2;
  ASSERT_EQ(::write(pipe_fds[1], payload.data(), half), static_cast<ssize_t>(half));
  std::vector<fs::path> temps;
  for (int i = 0; i < 5000; ++i) {
    temps = temps_in(root);
    if (temps.size() == 1 && fs::file_size(temps[0]) == half) {
      break;
    }
    ::usleep(1000);
  }
  ASSERT_EQ(temps.size(), 1U);
  ASSERT_EQ(fs::file_size(temps[0]), half);
  set_mtime_hours_ago(temps[0], 5);  // far older than stale_temp_age: only the writer counts
  {
    auto o = quiet_options(root);  // stale_temp_age 0: any temp not known to be live would go
    auto store = open_store(o);    // sweeps on open
    ASSERT_TRUE(fs::exists(temps[0]));
    auto stats = store->stats();
    EXPECT_EQ(stats->temp_files, 1U);
    EXPECT_EQ(stats->temp_bytes, half);
    EXPECT_EQ(stats->stale_temp_files, 0U);
    auto report = store->verify(Repair::yes);
    ASSERT_TRUE(report.has_value());
    EXPECT_EQ(report->stale_temps, 0U);
    EXPECT_TRUE(fs::exists(temps[0]));
    ASSERT_TRUE(store->prune(1).has_value());
    EXPECT_TRUE(fs::exists(temps[0]));
    ASSERT_TRUE(store->clear().has_value());
    EXPECT_TRUE(fs::exists(temps[0])) << "a running writer's temp survives open, verify, prune and clear";
  }
  ASSERT_EQ(::write(pipe_fds[1], payload.data() + half, payload.size() - half),
            static_cast<ssize_t>(payload.size() - half));
  ::close(pipe_fds[1]);
  const int status = wait_child(writer);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe_status(status);
  auto store = open_store(quiet_options(root));
  const auto entries = store->list();
  ASSERT_EQ(entries->size(), 1U);
  auto got = store->get((*entries)[0].key);
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ((*got)->payload, payload) << "the writer finished its put with every byte";
  EXPECT_TRUE(temps_in(root).empty());
}

TEST(FileStoreHeal, TempsAreJudgedByTheirWriterThenByAge) {
  TempDir dir;
  const auto root = dir.path() / "cache";
  { auto s = open_store(real_age_options(root)); }
  const util::ProcessIdentity me = util::current_process_identity();
  util::ProcessIdentity reused = me;
  reused.start += 1;  // this pid, another process: the pid was reused
  util::ProcessIdentity elsewhere = me;
  elsewhere.domain ^= 0x5a5a;  // another machine or pid namespace
  const auto tmp = root / "v1" / "tmp";
  write_file(tmp / (me.to_string() + "-900.tmp"), "mine");
  write_file(tmp / (reused.to_string() + "-901.tmp"), "reused pid");
  write_file(tmp / (elsewhere.to_string() + "-902.tmp"), "young, elsewhere");
  write_file(tmp / (elsewhere.to_string() + "-903.tmp"), "old, elsewhere");
  write_file(tmp / "notes.txt", "young, unknown name");
  write_file(tmp / "123-4-00000000deadbeef.tmp", "old, unknown name");
  set_mtime_hours_ago(tmp / (me.to_string() + "-900.tmp"), 9);
  set_mtime_hours_ago(tmp / (elsewhere.to_string() + "-903.tmp"), 2);
  set_mtime_hours_ago(tmp / "123-4-00000000deadbeef.tmp", 2);

  auto o = real_age_options(root);
  o.sweep_on_open = OpenSweep::no;
  auto store = open_store(o);
  EXPECT_EQ(store->stats()->temp_files, 6U);
  EXPECT_EQ(store->stats()->stale_temp_files, 3U);
  auto report = store->verify(Repair::yes);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->stale_temps_removed, 3U);
  EXPECT_TRUE(fs::exists(tmp / (me.to_string() + "-900.tmp"))) << "a running writer, however old";
  EXPECT_FALSE(fs::exists(tmp / (reused.to_string() + "-901.tmp"))) << "a reused pid is another process";
  EXPECT_TRUE(fs::exists(tmp / (elsewhere.to_string() + "-902.tmp")));
  EXPECT_FALSE(fs::exists(tmp / (elsewhere.to_string() + "-903.tmp")));
  EXPECT_TRUE(fs::exists(tmp / "notes.txt"));
  EXPECT_FALSE(fs::exists(tmp / "123-4-00000000deadbeef.tmp"));
}

TEST(FileStoreHeal, TempNamesCarryTheWritersIdentity) {
  TempDir dir;
  const auto root = dir.path() / "cache";
  { auto s = open_store(quiet_options(root)); }
  std::string out;
  ASSERT_TRUE(WIFSIGNALED(run_program({KCACHE_STORE_TOOL_PATH, "put", root.string(), "9", "9", "1000", "file"},
                                      {{"KCACHE_FAULT", "op=rename,nth=1,action=kill"}}, &out)));
  const auto temps = temps_in(root);
  ASSERT_EQ(temps.size(), 2U);
  for (const auto& t : temps) {
    const std::string name = t.filename().string();
    std::string_view rest;
    const auto writer = util::ProcessIdentity::parse(name, rest);
    ASSERT_TRUE(writer.has_value()) << name;
    EXPECT_EQ(writer->domain, util::current_process_identity().domain) << name;
    EXPECT_NE(writer->pid, ::getpid());
    EXPECT_EQ(util::liveness_of(*writer), util::Liveness::gone) << name;
    EXPECT_TRUE(rest.starts_with("-") && rest.ends_with(".tmp")) << name;
  }
}

// ---------------------------------------------------------------- accounting

TEST(FileStoreHeal, VerifyRepairResyncsTheAccountingWithTheDisk) {
  TempDir dir;
  const auto root = dir.path() / "cache";
  auto store = open_store(quiet_options(root));
  std::vector<Key> keys;
  for (std::uint64_t i = 0; i < 12; ++i) {
    const Artifact a = make_artifact(300 + i, 300 + i, 1000 + i * 100);
    ASSERT_TRUE(store->put(a).has_value());
    keys.push_back(a.passport.key);
  }
  ASSERT_EQ(store->stats()->entries, 12U);
  // Behind kcache's back: the files of three entries, and a whole shard directory.
  for (int i = 0; i < 3; ++i) {
    fs::remove(passport_path(root, keys[static_cast<std::size_t>(i)]));
    fs::remove(payload_path(root, keys[static_cast<std::size_t>(i)]));
  }
  const fs::path shard = root / "v1" / "entries" / keys[5].shard();
  std::uint64_t in_shard = 0;
  for (const auto& k : keys) {
    in_shard += k.shard() == keys[5].shard() && fs::exists(passport_path(root, k)) ? 1 : 0;
  }
  fs::remove_all(shard);
  const auto [disk_bytes, disk_count] = disk_entries(root);
  ASSERT_EQ(disk_count, 12U - 3U - in_shard);
  EXPECT_EQ(store->stats()->entries, 12U) << "the accounting does not know yet";

  auto seen = store->verify(Repair::no);
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->counted_entries, 12U);
  EXPECT_EQ(seen->disk_entries, disk_count);
  EXPECT_EQ(seen->disk_bytes, disk_bytes);
  EXPECT_FALSE(seen->counters_resynced);
  EXPECT_EQ(store->stats()->entries, 12U) << "verify without repair changes nothing";

  auto repaired = store->verify(Repair::yes);
  ASSERT_TRUE(repaired.has_value());
  EXPECT_TRUE(repaired->counters_resynced);
  EXPECT_EQ(repaired->entries_bad, 0U);
  const auto stats = store->stats();
  EXPECT_EQ(stats->entries, disk_count);
  EXPECT_EQ(stats->size_bytes, disk_bytes);
  // And another process sees the same.
  auto again = open_store(quiet_options(root));
  EXPECT_EQ(again->stats()->entries, disk_count);
  EXPECT_EQ(again->stats()->size_bytes, disk_bytes);
  auto clean = again->verify(Repair::no);
  EXPECT_EQ(clean->counted_entries, clean->disk_entries);
  EXPECT_EQ(clean->counted_bytes, clean->disk_bytes);
}

TEST(FileStoreHeal, ResyncKeepsLiveReservationsAndReleasesThoseOfWritersThatAreGone) {
  TempDir dir;
  const auto root = dir.path() / "cache";
  auto o = quiet_options(root);
  o.max_size_bytes = 64 << 20;
  auto store = open_store(o);
  util::Fd stats_dir(::open((root / "v1" / "stats").c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_TRUE(stats_dir);
  auto counters = store::SharedCounters::open(stats_dir.get(), 0600);
  ASSERT_TRUE(counters->shared());
  const int live = counters->reserve_room(7000);  // this process: a put in flight
  ASSERT_GE(live, 0);
  // A writer killed with a room reserved.
  const pid_t child = fork_child([&] {
    util::Fd fd(::open((root / "v1" / "stats").c_str(), O_RDONLY | O_DIRECTORY));
    auto c = store::SharedCounters::open(fd.get(), 0600);
    if (c->reserve_room(5000) < 0) {
      return 3;
    }
    ::raise(SIGKILL);
    return 4;
  });
  const int status = wait_child(child);
  ASSERT_TRUE(WIFSIGNALED(status)) << describe_status(status);
  ASSERT_EQ(counters->reserved_bytes(), 12000U);
  auto report = store->verify(Repair::yes);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->reserved_bytes_released, 5000U);
  EXPECT_EQ(counters->reserved_bytes(), 7000U) << "the live reservation is kept";
  counters->release_room(live);
  EXPECT_EQ(counters->reserved_bytes(), 0U);
}

// ---------------------------------------------------------------- layout

class FileStoreLayout : public ::testing::TestWithParam<const char*> {};

TEST_P(FileStoreLayout, DirectoryThatIsAFileIsNamedOnOpenAndMovedAsideByRepair) {
  TempDir dir;
  const auto root = dir.path() / "cache";
  const std::string rel = GetParam();
  {
    auto s = open_store(quiet_options(root));
    ASSERT_TRUE(s->put(make_artifact(1, 1, 3000)).has_value());
  }
  fs::create_directories(root / "v1" / "toolkit");
  fs::remove_all(root / rel);
  write_file(root / rel, "the user's bytes");

  auto failed = FileStore::open(quiet_options(root));
  ASSERT_FALSE(failed.has_value()) << rel;
  const std::string message = failed.error().message;
  EXPECT_EQ(failed.error().code, ErrorCode::corrupt) << message;
  EXPECT_NE(message.find((root / rel).string() + " is a regular file"), std::string::npos) << message;
  EXPECT_NE(message.find("directory"), std::string::npos) << message;
  EXPECT_NE(message.find("kcache verify --repair"), std::string::npos) << message;
  EXPECT_EQ(message.find("Bad file descriptor"), std::string::npos) << message;

  auto repaired = FileStore::repair_layout(quiet_options(root));
  ASSERT_TRUE(repaired.has_value()) << repaired.error().describe();
  ASSERT_EQ(repaired->size(), 1U);
  EXPECT_NE((*repaired)[0].find(rel + " was a regular file"), std::string::npos) << (*repaired)[0];
  EXPECT_TRUE(fs::is_directory(root / rel));
  // Moved aside, beside it, with its bytes.
  std::vector<fs::path> aside;
  for (const auto& e : fs::directory_iterator((root / rel).parent_path())) {
    if (e.path().filename().string().starts_with(fs::path(rel).filename().string() + ".broken-")) {
      aside.push_back(e.path());
    }
  }
  ASSERT_EQ(aside.size(), 1U);
  EXPECT_EQ(read_file(aside[0]), "the user's bytes");
  EXPECT_NE((*repaired)[0].find(aside[0].filename().string()), std::string::npos) << (*repaired)[0];
  EXPECT_TRUE(FileStore::repair_layout(quiet_options(root))->empty()) << "sound now";

  auto store = open_store(quiet_options(root));
  ASSERT_TRUE(store);
  const Artifact a = make_artifact(2, 2, 4000);
  ASSERT_TRUE(store->put(a).has_value());
  auto got = store->get(a.passport.key);
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ((*got)->payload, a.payload);
}

INSTANTIATE_TEST_SUITE_P(EveryLayoutDirectory, FileStoreLayout,
                         ::testing::Values("v1", "v1/entries", "v1/tmp", "v1/locks", "v1/stats", "v1/toolkit"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           for (auto& c : name) {
                             c = c == '/' ? '_' : c;
                           }
                           return name;
                         });

TEST(FileStoreHeal, SymlinkInPlaceOfALayoutDirectoryIsMovedNotFollowed) {
  TempDir dir;
  const auto root = dir.path() / "cache";
  { auto s = open_store(quiet_options(root)); }
  const auto outside = dir.path() / "outside";
  fs::create_directories(outside);
  write_file(outside / "keep.txt", "not the cache's");
  fs::remove_all(root / "v1" / "tmp");
  fs::create_directory_symlink(outside, root / "v1" / "tmp");

  auto failed = FileStore::open(quiet_options(root));
  ASSERT_FALSE(failed.has_value());
  EXPECT_NE(failed.error().message.find("is a symbolic link"), std::string::npos) << failed.error().message;
  auto repaired = FileStore::repair_layout(quiet_options(root));
  ASSERT_TRUE(repaired.has_value());
  ASSERT_EQ(repaired->size(), 1U);
  EXPECT_TRUE(fs::is_directory(fs::symlink_status(root / "v1" / "tmp")));
  EXPECT_EQ(read_file(outside / "keep.txt"), "not the cache's");
  auto store = open_store(quiet_options(root));
  ASSERT_TRUE(store->put(make_artifact(3, 3, 2000)).has_value());
  EXPECT_EQ(read_file(outside / "keep.txt"), "not the cache's");
  EXPECT_EQ(std::distance(fs::directory_iterator(outside), fs::directory_iterator()), 1);
}

TEST(FileStoreHeal, RepairLayoutLeavesARootItWouldNotOpenAlone) {
  TempDir dir;
  const auto real = dir.path() / "real";
  { auto s = open_store(quiet_options(real)); }
  write_file(real / "v1" / "stray", "x");
  fs::remove_all(real / "v1" / "locks");
  write_file(real / "v1" / "locks", "user file");
  const auto link = dir.path() / "link";
  fs::create_directory_symlink(real, link);
  auto repaired = FileStore::repair_layout(quiet_options(link));
  ASSERT_TRUE(repaired.has_value());
  EXPECT_TRUE(repaired->empty());
  EXPECT_EQ(read_file(real / "v1" / "locks"), "user file") << "a symlinked root is never followed";
}

}  // namespace
}  // namespace kcache::test
