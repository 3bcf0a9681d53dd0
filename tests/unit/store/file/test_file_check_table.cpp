// The check table (store/file/file_check_table.hpp) grows with the cache, not with
// its cap (issue 18 item 9): a new cache pays for 32 slots, a larger table
// keeps the records that seal, and every process that maps the old file
// follows the new one.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "store/file/file_check_table.hpp"
#include "store/file/shared_counters.hpp"
#include "store/file/shared_file.hpp"
#include "support/disk_usage.hpp"
#include "support/payload.hpp"
#include "support/temp_dir.hpp"
#include "unit/store/file/file_store_test_util.hpp"
#include "util/fd.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;
using store::CheckRecord;
using store::FileCheckTable;

CheckRecord record_for(std::uint64_t seed) { return CheckRecord{seed, seed + 1, seed + 2, seed + 3, seed + 4, seed + 5}; }

using test::disk_bytes;
using test::tree_disk_bytes;

class StatsDir {
 public:
  StatsDir() : m_fd(::open(m_dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {}
  int fd() const { return m_fd.get(); }
  fs::path checks() const { return m_dir.path() / "checks"; }

 private:
  test::TempDir m_dir;
  util::Fd m_fd;
};

TEST(FileCheckTable, ANewTableIsSmallWhateverTheCap) {
  StatsDir dir;
  auto table = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::slots_for_cap(0));
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->slots(), FileCheckTable::k_min_slots);
  EXPECT_EQ(fs::file_size(dir.checks()), FileCheckTable::file_size(FileCheckTable::k_min_slots));
  EXPECT_LE(disk_bytes(dir.checks()), 4U * 1024) << "one block";
}

TEST(FileCheckTable, GrowsToTwiceTheEntriesAndKeepsItsRecords) {
  StatsDir dir;
  auto table = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::slots_for_cap(0));
  ASSERT_NE(table, nullptr);
  for (std::uint64_t i = 0; i < 20; ++i) {
    table->record(test::test_key(i), record_for(i));
  }
  table->fit(16);  // 32 slots hold 2 * 16 entries: no growth
  EXPECT_EQ(table->slots(), 32U);
  table->fit(33);
  EXPECT_EQ(table->slots(), 128U);
  EXPECT_EQ(fs::file_size(dir.checks()), FileCheckTable::file_size(128));
  // A record survives unless another key took its slot in the old table.
  int kept = 0;
  for (std::uint64_t i = 0; i < 20; ++i) {
    CheckRecord r;
    if (table->find(test::test_key(i), r)) {
      EXPECT_EQ(r, record_for(i));
      ++kept;
    }
  }
  EXPECT_GE(kept, 12) << "at most a few of 20 keys collide in 32 slots";
  table->fit(1000);
  EXPECT_EQ(table->slots(), 2048U);
  // Nothing but the table is left in the directory (no temporary files).
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.checks().parent_path())) {
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(FileCheckTable, TheCapBoundsGrowthAndALargerTableIsUsedAsItIs) {
  StatsDir dir;
  const unsigned small_cap = FileCheckTable::slots_for_cap(1 << 20);
  ASSERT_EQ(small_cap, 64U);
  auto table = FileCheckTable::open(dir.fd(), 0600, small_cap);
  ASSERT_NE(table, nullptr);
  table->fit(100000);
  EXPECT_EQ(table->slots(), 64U) << "a 1 MiB cap never pays for more than 64 slots";
  // A table of the old, cap-sized kind (65536 slots, written whole) is used as it is.
  StatsDir old_dir;
  store::SharedFileFormat old{"checks", {'K', 'C', 'C', 'H', 'K', '0', '0', '1'}, 1, 65536,
                              FileCheckTable::file_size(65536)};
  const auto mapped = store::map_shared_file(old_dir.fd(), old, 0600);
  ASSERT_NE(mapped.data, nullptr);
  store::unmap_shared_file(mapped.data, old);
  auto reopened = FileCheckTable::open(old_dir.fd(), 0600, small_cap);
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->slots(), 65536U);
  reopened->record(test::test_key(1), record_for(1));
  CheckRecord r;
  EXPECT_TRUE(reopened->find(test::test_key(1), r));
}

TEST(FileCheckTable, AnotherMappingFollowsTheGrownTable) {
  StatsDir dir;
  auto a = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::k_max_slots);
  auto b = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::k_max_slots);
  ASSERT_TRUE(a && b);
  a->record(test::test_key(1), record_for(1));
  a->fit(100);
  ASSERT_EQ(a->slots(), 256U);
  CheckRecord r;
  ASSERT_TRUE(b->find(test::test_key(1), r)) << "b maps the old file and must follow its replaced flag";
  EXPECT_EQ(r, record_for(1));
  EXPECT_EQ(b->slots(), 256U);
  b->record(test::test_key(2), record_for(2));
  ASSERT_TRUE(a->find(test::test_key(2), r)) << "both now share the new file";
  EXPECT_EQ(r, record_for(2));
}

TEST(FileCheckTable, ATableGrownByAnotherProcessIsFollowed) {
  StatsDir dir;
  auto parent = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::k_max_slots);
  ASSERT_NE(parent, nullptr);
  parent->record(test::test_key(1), record_for(1));
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto child = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::k_max_slots);
    if (!child) {
      ::_exit(2);
    }
    child->fit(1000);
    child->record(test::test_key(3), record_for(3));
    CheckRecord r;
    ::_exit(child->slots() == 2048 && child->find(test::test_key(1), r) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  CheckRecord r;
  ASSERT_TRUE(parent->find(test::test_key(3), r));
  EXPECT_EQ(r, record_for(3));
  EXPECT_EQ(parent->slots(), 2048U);
}

TEST(FileCheckTable, AOneEntryCacheOccupiesAtMost64KiB) {
  test::TempDir dir;
  auto o = test::quiet_options(dir.path() / "cache");
  o.max_size_bytes = 0;  // no cap: the largest table the cache may grow to
  auto store = test::open_store(o);
  ASSERT_TRUE(store->put(test::make_artifact(1, 1, 4000)).has_value());
  ASSERT_TRUE(store->get(test::test_key(1)).has_value());
  EXPECT_LE(tree_disk_bytes(dir.path() / "cache"), 64U * 1024) << "du of a one-entry cache";
  EXPECT_EQ(store->stats()->metadata_bytes,
            FileCheckTable::file_size(FileCheckTable::k_min_slots) + store::SharedCounters::k_file_size);
}

TEST(FileCheckTable, TheStoreGrowsTheTableWithItsEntries) {
  test::TempDir dir;
  auto o = test::quiet_options(dir.path() / "cache");
  o.max_size_bytes = 0;
  {
    auto store = test::open_store(o);
    for (std::uint64_t i = 0; i < 40; ++i) {
      ASSERT_TRUE(store->put(test::make_artifact(i, i, 64)).has_value());
    }
    // A new directory's table is made by its first check, at the size its entries need.
    EXPECT_FALSE(fs::exists(dir.path() / "cache" / "v1" / "stats" / "checks"));
    ASSERT_TRUE(store->get(test::test_key(3)).has_value());
    EXPECT_EQ(fs::file_size(dir.path() / "cache" / "v1" / "stats" / "checks"), FileCheckTable::file_size(128));
    EXPECT_EQ(store->stats()->metadata_bytes,
              FileCheckTable::file_size(128) + store::SharedCounters::k_file_size);
  }
  // A table removed behind the cache's back comes back at the size its entries need.
  fs::remove(dir.path() / "cache" / "v1" / "stats" / "checks");
  auto store = test::open_store(o);
  EXPECT_EQ(fs::file_size(dir.path() / "cache" / "v1" / "stats" / "checks"), FileCheckTable::file_size(128));
}

// A cold compile into a new cache directory (open, a lookup that misses, one
// put) makes no check table and no evict lock: the first check makes the
// table, and another process's table is shared, not replaced.
TEST(FileCheckTable, ANewDirectoryMakesItsTableAtTheFirstCheck) {
  test::TempDir dir;
  auto o = test::quiet_options(dir.path() / "cache");
  o.max_size_bytes = 64 << 20;  // a cap: the put reserves room under it
  const fs::path stats = dir.path() / "cache" / "v1" / "stats";
  auto writer = test::open_store(o);
  ASSERT_TRUE(writer->get(test::test_key(1)).has_value());  // a miss
  ASSERT_TRUE(writer->put(test::make_artifact(1, 1, 4000)).has_value());
  EXPECT_FALSE(fs::exists(stats / "checks"));
  EXPECT_FALSE(fs::exists(stats / "evict.lock"));
  EXPECT_TRUE(fs::exists(stats / "counters"));
  EXPECT_EQ(writer->stats()->metadata_bytes, store::SharedCounters::k_file_size);
  {
    // Another process: the directory exists, its table is made at open and recorded by a hit.
    auto reader = test::open_store(o);
    ASSERT_TRUE(fs::exists(stats / "checks"));
    auto got = reader->get(test::test_key(1));
    ASSERT_TRUE(got.has_value() && got->has_value());
  }
  struct stat before {};
  ASSERT_EQ(::stat((stats / "checks").c_str(), &before), 0);
  // The first check of the first store maps that table (its record holds) instead of making one.
  auto got = writer->get(test::test_key(1));
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ((*got)->payload.size(), 4000U);
  struct stat after {};
  ASSERT_EQ(::stat((stats / "checks").c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(writer->stats()->metadata_bytes,
            FileCheckTable::file_size(FileCheckTable::k_min_slots) + store::SharedCounters::k_file_size);
}

TEST(FileCheckTable, ALazyTableIsMadeByItsFirstUseAtTheSizeAskedFor) {
  StatsDir dir;
  auto table = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::slots_for_cap(0),
                                    FileCheckTable::TableFile::on_first_use);
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->slots(), 0U);
  EXPECT_EQ(table->bytes(), 0U);
  table->fit(100);  // 200 entries' worth: 256 slots
  EXPECT_FALSE(fs::exists(dir.checks()));
  CheckRecord r;
  EXPECT_FALSE(table->find(test::test_key(7), r));  // the first use makes it
  ASSERT_TRUE(fs::exists(dir.checks()));
  EXPECT_EQ(table->slots(), 256U);
  table->record(test::test_key(7), record_for(7));
  auto other = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::slots_for_cap(0));
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(other->find(test::test_key(7), r));
  EXPECT_EQ(r, record_for(7));
  // A lazy table over a table another process made uses that one.
  auto late = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::slots_for_cap(0),
                                   FileCheckTable::TableFile::on_first_use);
  ASSERT_TRUE(late->find(test::test_key(7), r));
  EXPECT_EQ(late->slots(), 256U);
}

// Keys whose bytes 2..3 are `home` (their home slot at every table size from
// 32 slots up when home < 32), told apart by byte 0.
Key key_at_home(unsigned home, unsigned char which) {
  Key::Bytes b{};
  b[0] = which;
  b[2] = static_cast<unsigned char>(home >> 8);
  b[3] = static_cast<unsigned char>(home & 0xff);
  b[31] = 0x5a;
  return Key(b);
}

// The bytes of slot `index` of the table file, for checking where a record landed.
std::string slot_bytes(const fs::path& checks, unsigned index) {
  std::string all(fs::file_size(checks), '\0');
  util::Fd fd(::open(checks.c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(::pread(fd.get(), all.data(), all.size(), 0), static_cast<ssize_t>(all.size()));
  return all.substr(FileCheckTable::k_header_bytes + std::size_t{index} * FileCheckTable::k_slot_bytes,
                    FileCheckTable::k_slot_bytes);
}

// One slot a key made keys that share a home take turns: each read of one
// after the other hashed in full. A set's eight now keep a record each.
TEST(FileCheckTable, KeysThatShareAHomeKeepARecordEach) {
  StatsDir dir;
  auto table = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::slots_for_cap(0));
  ASSERT_NE(table, nullptr);
  constexpr unsigned char ways = FileCheckTable::k_ways;
  ASSERT_EQ(ways, 8U);
  for (unsigned char i = 0; i < ways; ++i) {
    table->record(key_at_home(21, i), record_for(100 + i));  // set 16..23
  }
  for (unsigned char round = 0; round < 3; ++round) {
    for (unsigned char i = 0; i < ways; ++i) {
      CheckRecord r;
      ASSERT_TRUE(table->find(key_at_home(21, i), r)) << "key " << int{i} << " round " << int{round};
      EXPECT_EQ(r, record_for(100 + i));
    }
  }
  // Re-recording a key rewrites its own slot: no way is taken twice.
  table->record(key_at_home(21, 2), record_for(200));
  for (unsigned char i = 0; i < ways; ++i) {
    CheckRecord r;
    ASSERT_TRUE(table->find(key_at_home(21, i), r));
    EXPECT_EQ(r, record_for(i == 2 ? 200 : 100 + i));
  }
  // A key of the next set is not disturbed, and one more key of the full set
  // takes one of its ways: it is found, and all but one of the others are.
  table->record(key_at_home(24, 9), record_for(9));
  table->record(key_at_home(21, ways), record_for(100 + ways));
  CheckRecord r;
  ASSERT_TRUE(table->find(key_at_home(21, ways), r));
  EXPECT_EQ(r, record_for(100 + ways));
  int kept = 0;
  for (unsigned char i = 0; i < ways; ++i) {
    kept += table->find(key_at_home(21, i), r) ? 1 : 0;
  }
  EXPECT_EQ(kept, ways - 1);
  ASSERT_TRUE(table->find(key_at_home(24, 9), r));
  EXPECT_EQ(r, record_for(9));
  // Other processes (another mapping) see every record.
  auto other = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::slots_for_cap(0));
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(other->find(key_at_home(21, ways), r));
  ASSERT_TRUE(other->find(key_at_home(24, 9), r));
}

// kcache before sets looked in the home slot only: a key alone in its set is
// recorded there, so such a process still finds it.
TEST(FileCheckTable, AKeyAloneInItsSetIsRecordedInItsHomeSlot) {
  StatsDir dir;
  auto table = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::slots_for_cap(0));
  ASSERT_NE(table, nullptr);
  const Key key = key_at_home(13, 1);  // set 8..15, home 13
  table->record(key, record_for(5));
  const std::string home = slot_bytes(dir.checks(), 13);
  EXPECT_EQ(home.substr(0, 32), std::string(reinterpret_cast<const char*>(key.bytes().data()), 32));
  for (unsigned other : {8U, 9U, 10U, 11U, 12U, 14U, 15U}) {
    EXPECT_EQ(slot_bytes(dir.checks(), other), std::string(FileCheckTable::k_slot_bytes, '\0')) << other;
  }
  // A second key with the same home goes to the next way of the set (14).
  table->record(key_at_home(13, 2), record_for(6));
  EXPECT_EQ(slot_bytes(dir.checks(), 14)[0], '\2');
}

TEST(FileCheckTable, ForgetClearsTheKeyWhereverItIs) {
  StatsDir dir;
  auto table = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::slots_for_cap(0));
  ASSERT_NE(table, nullptr);
  for (unsigned char i = 0; i < 3; ++i) {
    table->record(key_at_home(5, i), record_for(i));
  }
  table->forget(key_at_home(5, 1));  // not in its home slot
  CheckRecord r;
  EXPECT_FALSE(table->find(key_at_home(5, 1), r));
  EXPECT_TRUE(table->find(key_at_home(5, 0), r));
  EXPECT_TRUE(table->find(key_at_home(5, 2), r));
  // Its way is free again: the next key of the set takes it, and nothing is lost.
  table->record(key_at_home(5, 7), record_for(7));
  table->record(key_at_home(5, 8), record_for(8));
  for (unsigned char i : {0, 2, 7, 8}) {
    EXPECT_TRUE(table->find(key_at_home(5, i), r)) << int{i};
  }
}

TEST(FileCheckTable, GrowingKeepsEveryWayOfASet) {
  StatsDir dir;
  auto table = FileCheckTable::open(dir.fd(), 0600, FileCheckTable::slots_for_cap(0));
  ASSERT_NE(table, nullptr);
  for (unsigned char i = 0; i < FileCheckTable::k_ways; ++i) {
    table->record(key_at_home(30, i), record_for(i));
  }
  table->fit(100);
  ASSERT_EQ(table->slots(), 256U);
  for (unsigned char i = 0; i < FileCheckTable::k_ways; ++i) {
    CheckRecord r;
    ASSERT_TRUE(table->find(key_at_home(30, i), r)) << int{i};
    EXPECT_EQ(r, record_for(i));
  }
}

// Through the store: two entries whose keys share a home slot, read in turn,
// both keep their record (each read after the first is a fast check).
TEST(FileCheckTable, TheStoreKeepsRecordsOfEntriesThatShareAHome) {
  test::TempDir dir;
  auto o = test::quiet_options(dir.path() / "cache");
  o.max_size_bytes = 0;
  // Two test keys with one home in a 32-slot table.
  std::uint64_t a = 0;
  std::uint64_t b = 1;
  auto home = [](std::uint64_t seed) {
    const auto& k = test::test_key(seed).bytes();
    return ((unsigned{k[2]} << 8) | k[3]) & 31U;
  };
  while (home(b) != home(a)) {
    ++b;
  }
  auto store = test::open_store(o);
  ASSERT_TRUE(store->put(test::make_artifact(a, a, 5000)).has_value());
  ASSERT_TRUE(store->put(test::make_artifact(b, b, 5000)).has_value());
  for (int round = 0; round < 2; ++round) {
    for (std::uint64_t seed : {a, b}) {
      auto got = store->get(test::test_key(seed));
      ASSERT_TRUE(got.has_value() && got->has_value());
      EXPECT_EQ(test::check_payload((*got)->payload.view()), seed);
    }
  }
  util::Fd stats(::open((dir.path() / "cache" / "v1" / "stats").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto table = FileCheckTable::open(stats.get(), 0600, FileCheckTable::slots_for_cap(0));
  ASSERT_NE(table, nullptr);
  ASSERT_EQ(table->slots(), 32U);
  CheckRecord r;
  EXPECT_TRUE(table->find(test::test_key(a), r)) << "seed " << a;
  EXPECT_TRUE(table->find(test::test_key(b), r)) << "seed " << b;
}

}  // namespace
}  // namespace kcache
