// A cache directory made by its first process (issue 23, a cold compile into
// a new directory): the layout made without fchmod where mkdir gave the exact
// mode, a stats file mapped from the descriptor it was written through (not
// reopened), and a first put killed at any step leaving a directory that works.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "file_store_test_util.hpp"
#include "store/file/shared_counters.hpp"
#include "store/file/shared_file.hpp"
#include "support/child.hpp"
#include "support/temp_dir.hpp"
#include "util/fault.hpp"
#include "util/fd.hpp"

namespace kcache::test {
namespace {

namespace fault = util::fault;

struct FaultReset {
  ~FaultReset() { fault::reset(); }
};

mode_t mode_of(const std::filesystem::path& p) {
  struct stat st {};
  ::lstat(p.c_str(), &st);
  return st.st_mode & 07777;
}

std::set<std::string> names_in(const std::filesystem::path& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

store::SharedFileFormat test_format() {
  store::SharedFileFormat f;
  f.name = "t";
  std::memcpy(f.magic.data(), "KCTEST01", 8);
  f.version = 1;
  f.count = 1;
  f.size = 4096;
  return f;
}

// The modes of a new directory hold under every umask, whether mkdir gave
// the root its exact mode (then its layout directories are not fchmod-ed)
// or not (then each is).
TEST(NewDirectory, LayoutModesHoldUnderEveryUmask) {
  for (Sharing sharing : {Sharing::private_to_user, Sharing::group}) {
    for (mode_t mask : {0000, 0022, 0027, 0077, 0277, 0070}) {
      TempDir dir;
      const mode_t old = ::umask(mask);
      auto o = quiet_options(dir.path() / "cache");
      o.sharing = sharing;
      auto store = open_store(o);
      const bool put = store && store->put(make_artifact(1, 1, 100)).has_value();
      ::umask(old);
      ASSERT_TRUE(put) << "umask " << mask;
      const mode_t want_dir = sharing == Sharing::private_to_user ? 0700 : 02770;
      std::size_t dirs = 0;
      EXPECT_EQ(mode_of(dir.path() / "cache"), want_dir) << "umask " << mask;
      for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path() / "cache")) {
        if (e.is_directory()) {
          ++dirs;
          EXPECT_EQ(mode_of(e.path()), want_dir) << e.path() << " umask " << mask;
        }
      }
      EXPECT_EQ(dirs, 5U) << "v1, entries, tmp, stats and the shard";
    }
  }
}

// The root is made with one mkdir when its parent exists, and with its
// parents when they do not (made only after that mkdir fails).
TEST(NewDirectory, RootUnderMissingParentsIsMadeWithThem) {
  TempDir dir;
  const auto root = dir.path() / "a" / "b" / "cache";
  auto store = open_store(quiet_options(root));
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->put(make_artifact(3, 3, 300)).has_value());
  EXPECT_EQ(mode_of(root), 0700);
  EXPECT_TRUE(std::filesystem::is_directory(root / "v1" / "stats"));
  auto again = open_store(quiet_options(root));
  ASSERT_TRUE(again);
  auto hit = again->get(test_key(3));
  ASSERT_TRUE(hit.has_value() && hit->has_value());
  EXPECT_EQ(check_payload((*hit)->payload), 3U);
}

// A missing stats file is staged, mapped and linked: its directory then
// holds its name and nothing else (the staged name is gone), with the whole
// header, and a second map sees what the first mapping wrote (one file).
TEST(NewDirectory, SharedFileMadeMappedAndLinkedLeavesOnlyItsName) {
  TempDir dir;
  util::Fd fd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  const auto format = test_format();
  auto made = store::map_shared_file(fd.get(), format, 0600);
  ASSERT_NE(made.data, nullptr);
  EXPECT_TRUE(made.fresh);
  EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"t"});
  EXPECT_EQ(std::filesystem::file_size(dir.path() / "t"), 4096U);
  EXPECT_EQ(mode_of(dir.path() / "t"), 0600);
  EXPECT_EQ(std::memcmp(made.data, "KCTEST01", 8), 0);
  // Written through the first mapping, read through a second one.
  static_cast<unsigned char*>(made.data)[100] = 42;
  auto again = store::map_shared_file(fd.get(), format, 0600);
  ASSERT_NE(again.data, nullptr);
  EXPECT_FALSE(again.fresh);
  EXPECT_EQ(static_cast<unsigned char*>(again.data)[100], 42);
  store::unmap_shared_file(made.data, format);
  store::unmap_shared_file(again.data, format);
}

// Where the first try fails (the staged file cannot be created or written,
// the link fails, or another process's file "won" and is then found
// unusable), the file is still made, once, and nothing is left beside it.
TEST(NewDirectory, SharedFileMadeDespiteAFailedFirstTry) {
  FaultReset guard;
  for (const char* rule : {"op=open,nth=2,err=EACCES", "op=link,nth=1,err=EEXIST", "op=link,nth=1,err=ENOENT",
                           "op=write,nth=1,err=ENOSPC"}) {
    TempDir dir;
    util::Fd fd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(fd);
    const auto format = test_format();
    ASSERT_TRUE(fault::configure(rule));
    auto made = store::map_shared_file(fd.get(), format, 0600);
    const auto injected = fault::injected();
    fault::reset();
    EXPECT_EQ(injected, 1U) << rule;
    ASSERT_NE(made.data, nullptr) << rule;
    EXPECT_TRUE(made.fresh) << rule;
    EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"t"}) << rule;
    EXPECT_EQ(std::memcmp(made.data, "KCTEST01", 8), 0) << rule;
    store::unmap_shared_file(made.data, format);
  }
}

// The sweep of staged stats files: a young one with one link (a maker at
// work) stays; an old one, or a second link of the published file, goes;
// other names stay.
TEST(NewDirectory, StagedStatsFilesAreSweptOnlyWhenLeftBehind) {
  TempDir dir;
  util::Fd fd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  write_file(dir.path() / ".counters-1-young.tmp", "x");
  write_file(dir.path() / ".counters-2-old.tmp", "x");
  write_file(dir.path() / "counters", "published");
  write_file(dir.path() / "remote-0123456789abcdef", "r");
  ASSERT_EQ(::link((dir.path() / "counters").c_str(), (dir.path() / ".counters-3-linked.tmp").c_str()), 0);
  const struct timespec hour_ago[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir.path() / ".counters-2-old.tmp").c_str(), hour_ago, 0), 0);
  const auto swept = store::sweep_staged_shared_files(fd.get(), 10);
  EXPECT_EQ(std::set<std::string>(swept.begin(), swept.end()),
            (std::set<std::string>{".counters-2-old.tmp", ".counters-3-linked.tmp"}));
  EXPECT_EQ(names_in(dir.path()),
            (std::set<std::string>{".counters-1-young.tmp", "counters", "remote-0123456789abcdef"}));
  EXPECT_EQ(read_file(dir.path() / "counters"), "published");
}

// Many threads make the same missing file at once: one file wins, and every
// mapping is of it (a word written through one is seen through all).
TEST(NewDirectory, SharedFileRaceEndsWithOneFile) {
  for (int round = 0; round < 20; ++round) {
    TempDir dir;
    util::Fd fd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(fd);
    const auto format = test_format();
    std::vector<void*> maps(6, nullptr);
    std::atomic<int> fresh{0};
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < maps.size(); ++i) {
      threads.emplace_back([&, i] {
        auto m = store::map_shared_file(fd.get(), format, 0600);
        maps[i] = m.data;
        fresh += m.fresh ? 1 : 0;
      });
    }
    for (auto& t : threads) {
      t.join();
    }
    EXPECT_EQ(fresh.load(), 1) << "one file made";
    ASSERT_NE(maps[0], nullptr);
    static_cast<unsigned char*>(maps[0])[200] = static_cast<unsigned char>(round + 1);
    for (void* m : maps) {
      ASSERT_NE(m, nullptr);
      EXPECT_EQ(static_cast<unsigned char*>(m)[200], round + 1);
      store::unmap_shared_file(m, format);
    }
    EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"t"});
  }
}

// The first put into a directory that does not exist yet, SIGKILLed at each
// of its I/O steps in turn (the layout's mkdirs, the counters, the shard, the
// entry's files): the directory then works, holds a miss or the exact value,
// accounts for exactly what is on disk, and `verify --repair` leaves nothing
// staged (a staged counters file of the killed writer is swept).
TEST(NewDirectory, FirstPutKilledAtEveryIoStepLeavesAWorkingDirectory) {
  TempDir dir;
  bool completed = false;
  int killed = 0;
  std::size_t stats_leftovers = 0;
  for (int n = 1; n < 200 && !completed; ++n) {
    const auto root = dir.path() / ("c" + std::to_string(n));
    const std::uint64_t seed = 500 + static_cast<std::uint64_t>(n);
    std::string out;
    const int status = run_program({KCACHE_STORE_TOOL_PATH, "put", root.string(), std::to_string(seed),
                                    std::to_string(seed), "5000", "none"},
                                   {{"KCACHE_FAULT", "op=any,nth=" + std::to_string(n) + ",action=kill"}}, &out);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
      ++killed;
    } else {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe_status(status) << out;
      ASSERT_NE(out.find("ACK stored"), std::string::npos) << out;
      completed = true;
    }
    // What the killed writer staged in stats/, aged past the sweep's 10 s floor.
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root / "v1" / "stats", ec)) {
      const auto name = e.path().filename().string();
      if (name != "counters" && name != "checks") {
        ++stats_leftovers;
        EXPECT_EQ(name.rfind(".counters-", 0), 0U) << "step " << n << ": " << name;
        const struct timespec hour_ago[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
        ASSERT_EQ(::utimensat(AT_FDCWD, e.path().c_str(), hour_ago, AT_SYMLINK_NOFOLLOW), 0);
      }
    }
    auto o = quiet_options(root);
    o.max_size_bytes = 1 << 20;
    auto store = open_store(o);
    ASSERT_TRUE(store) << "step " << n;
    auto got = store->get(test_key(seed));
    ASSERT_TRUE(got.has_value()) << "step " << n;
    if (got->has_value()) {
      EXPECT_EQ(check_payload((*got)->payload), seed) << "step " << n;
    } else {
      EXPECT_FALSE(completed) << "acknowledged, then lost";
    }
    ASSERT_TRUE(store->put(make_artifact(seed + 10000, 1, 3000)).has_value()) << "step " << n;
    ASSERT_TRUE(store->verify(Repair::yes).has_value());
    EXPECT_EQ(count_leftovers(root), 0U) << "step " << n;
    const auto stats = store->stats();
    ASSERT_TRUE(stats.has_value());
    std::size_t passports = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root / "v1" / "entries")) {
      passports += e.path().extension() == ".pass" ? 1 : 0;
    }
    EXPECT_EQ(stats->entries, passports) << "step " << n << ": the accounting holds what is on disk";
    // Another process's view (a second open) agrees, and nothing staged is left in stats/.
    auto other = open_store(o);
    ASSERT_TRUE(other);
    EXPECT_EQ(other->stats()->entries, passports) << "step " << n;
    // A writer killed between staging the counters and unlinking the staged
    // name leaves that file in stats/ (nothing reads it); verify --repair
    // swept it above.
    for (const auto& name : names_in(root / "v1" / "stats")) {
      EXPECT_TRUE(name == "counters" || name == "checks") << "step " << n << ": " << name;
    }
  }
  std::printf("[new directory] killed at %d steps of a first put, then completed: %d; staged counters swept: %zu\n",
              killed, completed ? 1 : 0, stats_leftovers);
  EXPECT_TRUE(completed);
  EXPECT_GE(killed, 8) << "a first put into a new directory has at least this many I/O steps";
}

}  // namespace
}  // namespace kcache::test
