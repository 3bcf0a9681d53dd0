// FileStore under faults: TESTING.md F01, F03, F04, F05, F07, F08, F10.
// Each test prints its figures: ops attempted, faults injected, acked-but-lost,
// wrong bytes, leftovers after sweep.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/time.h>

#include <csignal>
#include <cstring>
#include <functional>
#include <cstdio>
#include <random>

#include <gtest/gtest.h>

#include "file_store_test_util.hpp"
#include "store/file/file_check_table.hpp"
#include "support/child.hpp"
#include "support/temp_dir.hpp"
#include "util/fault.hpp"
#include "util/fd.hpp"

namespace kcache::test {
namespace {

namespace fault = util::fault;

struct Figures {
  const char* id;
  std::uint64_t ops = 0;
  std::uint64_t faults = 0;
  std::uint64_t acked_lost = 0;
  std::uint64_t wrong = 0;
  std::uint64_t leftovers = 0;
  void print() const {
    std::printf("[%s] ops=%llu faults_injected=%llu acked_but_lost=%llu wrong_bytes=%llu leftovers_after_sweep=%llu\n",
                id, static_cast<unsigned long long>(ops), static_cast<unsigned long long>(faults),
                static_cast<unsigned long long>(acked_lost), static_cast<unsigned long long>(wrong),
                static_cast<unsigned long long>(leftovers));
  }
};

struct FaultReset {
  ~FaultReset() { fault::reset(); }
};

// F01: a writer killed at every I/O step of a put (temp create, each write,
// fsync, each rename, directory fsync) leaves a miss or the exact value.
TEST(FileStoreFaults, F01_KilledAtEveryIoStepLeavesMissOrExactValue) {
  TempDir dir;
  const auto root = dir.path() / "cache";
  { auto s = open_store(quiet_options(root)); }
  Figures f{"F01"};
  bool completed = false;
  for (int n = 1; n < 200 && !completed; ++n) {
    const std::uint64_t key_seed = 1000 + static_cast<std::uint64_t>(n);
    std::string out;
    const int status = run_program({KCACHE_STORE_TOOL_PATH, "put", root.string(), std::to_string(key_seed),
                                    std::to_string(key_seed), "70000", "dir"},
                                   {{"KCACHE_FAULT", "op=any,nth=" + std::to_string(n) + ",action=kill"}}, &out);
    ++f.ops;
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (killed) {
      ++f.faults;
    } else {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe_status(status) << out;
      ASSERT_NE(out.find("ACK stored"), std::string::npos) << out;
      completed = true;
    }
    auto store = open_store(quiet_options(root));
    auto got = store->get(test_key(key_seed));
    ASSERT_TRUE(got.has_value());
    if (got->has_value()) {
      if (check_payload((*got)->payload) != key_seed) {
        ++f.wrong;
      }
    } else if (completed) {
      ++f.acked_lost;
    }
    ASSERT_TRUE(store->verify(Repair::yes).has_value());
    f.leftovers += count_leftovers(root);
    EXPECT_EQ(store->verify(Repair::no)->entries_bad, 0U);
  }
  f.print();
  EXPECT_TRUE(completed);
  EXPECT_GE(f.faults, 8U) << "a put has at least this many I/O steps";
  EXPECT_EQ(f.wrong, 0U);
  EXPECT_EQ(f.acked_lost, 0U);
  EXPECT_EQ(f.leftovers, 0U);
}

// F04: fsync fails with EIO: the entry is not published, the temp is removed,
// and the put reports the failure (never retried-then-ok).
TEST(FileStoreFaults, F04_FsyncEioDoesNotPublishAndRemovesTheTemp) {
  FaultReset guard;
  Figures f{"F04"};
  for (int n = 1; n <= 3; ++n) {
    TempDir dir;
    auto o = quiet_options(dir.path());
    o.fsync = FsyncPolicy::file_and_directory;
    auto store = open_store(o);
    const Artifact a = make_artifact(50 + static_cast<std::uint64_t>(n), 1, 9000);
    ASSERT_TRUE(fault::configure("op=fsync,nth=" + std::to_string(n) + ",err=EIO"));
    auto put = store->put(a);
    f.faults += fault::injected();
    fault::reset();
    ++f.ops;
    ASSERT_FALSE(put.has_value()) << "fsync #" << n;
    EXPECT_EQ(put.error().code, ErrorCode::io);
    EXPECT_FALSE(store->get(a.passport.key)->has_value());
    EXPECT_FALSE(std::filesystem::exists(passport_path(dir.path(), a.passport.key)));
    f.leftovers += count_leftovers(dir.path());
    EXPECT_TRUE(store->degraded());
    EXPECT_EQ(store->stats()->errors, 1U);
  }
  f.print();
  EXPECT_EQ(f.faults, 3U);
  EXPECT_EQ(f.leftovers, 0U);
}

// A fill (an upper tier taking an entry a remote has just returned checked)
// is published without fsync whatever the policy: every fsync failing leaves
// a fill published and readable, and fails a put. A fill that is torn later
// is a miss like any damaged entry.
TEST(FileStoreFaults, FillPublishesWithoutFsyncAndATornFillIsAMiss) {
  FaultReset guard;
  TempDir dir;
  auto o = quiet_options(dir.path());
  o.fsync = FsyncPolicy::file_and_directory;
  auto store = open_store(o);
  const Artifact filled = make_artifact(71, 1, 9000);
  const Artifact put = make_artifact(72, 1, 9000);
  ASSERT_TRUE(fault::configure("op=fsync,count=0,err=EIO"));
  auto f = store->fill(filled);
  ASSERT_TRUE(f) << f.error().describe();
  EXPECT_EQ(*f, PutOutcome::stored);
  EXPECT_EQ(fault::injected(), 0U) << "a fill never asks for fsync";
  auto p = store->put(put);
  EXPECT_FALSE(p.has_value()) << "a put still fsyncs as the policy says";
  EXPECT_GE(fault::injected(), 1U);
  fault::reset();
  auto got = store->get(filled.passport.key);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((*got)->payload, filled.payload);

  // What a crash before the data reached the disk can leave: the entry's
  // file cut short. The read refuses it and the entry is gone.
  std::filesystem::resize_file(payload_path(dir.path(), filled.passport.key), 100);
  auto torn = store->get(filled.passport.key);
  ASSERT_TRUE(torn);
  EXPECT_FALSE(torn->has_value());
  EXPECT_EQ(store->stats()->corrupt, 1U);

  // A fill still refuses a passport that does not match its payload's size.
  Artifact bad = make_artifact(73, 1, 9000);
  bad.passport.payload_size += 1;
  auto refused = store->fill(bad);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::invalid_argument);
}

// The crash semantics of a put published without fsync (the `fsync = none`
// default of the setting, docs/on-disk-format.md "Durability"): after a power
// loss the entry's metadata can survive while its bytes did not (zeros of the
// right length), and the check table can still hold the record of the bytes
// it had. The read hashes what it reads, refuses the entry (a miss, counted as
// corrupt, removed) and never returns those bytes.
TEST(FileStoreFaults, APutWithoutFsyncWhoseBytesALossZeroedIsAMissEvenWithItsCheckRecord) {
  FaultReset guard;
  TempDir dir;
  auto o = quiet_options(dir.path());
  o.fsync = FsyncPolicy::none;
  auto store = open_store(o);
  const Artifact a = make_artifact(81, 1, 9000);
  ASSERT_TRUE(fault::configure("op=fsync,count=0,err=EIO"));
  ASSERT_TRUE(store->put(a).has_value());
  EXPECT_EQ(fault::injected(), 0U) << "fsync = none: no fsync on the put's path";
  fault::reset();
  auto first = store->get(a.passport.key);  // verified in full; the check table records it
  ASSERT_TRUE(first && first->has_value());

  util::Fd stats(::open((dir.path() / "v1" / "stats").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto table = store::FileCheckTable::open(stats.get(), 0600, 1024);
  ASSERT_TRUE(table);
  store::CheckRecord rec;
  ASSERT_TRUE(table->find(a.passport.key, rec));
  // The payload's blocks lost, its length kept; the record rebound to the
  // file as it now is (after a real power loss its identity would not even
  // have changed).
  const auto path = payload_path(dir.path(), a.passport.key);
  {
    util::Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    const std::string zeros(a.payload.size(), '\0');
    ASSERT_EQ(::pwrite(fd.get(), zeros.data(), zeros.size(), 0), static_cast<ssize_t>(zeros.size()));
  }
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  table->record(a.passport.key, store::CheckRecord::from_stat(st, rec.xxh3, rec.sha256_prefix));

  auto torn = store->get(a.passport.key);
  ASSERT_TRUE(torn);
  EXPECT_FALSE(torn->has_value()) << "bytes that changed after the put are never returned";
  EXPECT_EQ(store->stats()->corrupt, 1U);
  EXPECT_FALSE(std::filesystem::exists(path)) << "the torn entry is removed";
}

// F03 (injected): ENOSPC / EDQUOT / EIO at every call site of a put: the put
// fails with a clear error, old entries stay intact, no temp is left.
TEST(FileStoreFaults, F03_InjectedSpaceAndIoErrorsAtEverySiteLeaveOldEntriesIntact) {
  FaultReset guard;
  Figures f{"F03-injected"};
  const std::pair<const char*, ErrorCode> errs[] = {
      {"ENOSPC", ErrorCode::no_space}, {"EDQUOT", ErrorCode::no_space}, {"EIO", ErrorCode::io}};
  for (const char* op : {"open", "write", "fsync", "chmod", "rename", "lock"}) {
    for (const auto& [err, code] : errs) {
      for (int n = 1; n <= 3; ++n) {
        TempDir dir;
        auto store = open_store(quiet_options(dir.path()));
        const Artifact old_entry = make_artifact(1, 1, 3000);
        ASSERT_TRUE(store->put(old_entry).has_value());
        auto o = quiet_options(dir.path());
        o.fsync = FsyncPolicy::file;
        auto s2 = open_store(o);
        const Artifact a = make_artifact(2, 2, 3000);
        ASSERT_TRUE(fault::configure(std::string("op=") + op + ",nth=" + std::to_string(n) + ",err=" + err));
        auto put = s2->put(a);
        const auto injected = fault::injected();
        fault::reset();
        ++f.ops;
        f.faults += injected;
        if (injected > 0) {
          ASSERT_FALSE(put.has_value()) << op << " " << err << " " << n;
          EXPECT_EQ(put.error().code, code) << put.error().describe();
          EXPECT_NE(put.error().message.find(dir.path().string()), std::string::npos) << "names the cache";
          EXPECT_FALSE(s2->get(a.passport.key)->has_value());
          EXPECT_TRUE(s2->degraded());
        } else {
          EXPECT_TRUE(put.has_value());
        }
        auto old_got = s2->get(old_entry.passport.key);
        if (!old_got || !old_got->has_value() || (*old_got)->payload != old_entry.payload) {
          ++f.acked_lost;
        }
        f.leftovers += count_leftovers(dir.path());
      }
    }
  }
  f.print();
  EXPECT_GT(f.faults, 30U);
  EXPECT_EQ(f.acked_lost, 0U);
  EXPECT_EQ(f.leftovers, 0U);
}

// F03 (real): a small tmpfs fills up; puts fail with no_space and one warning,
// later puts are skipped and counted, old entries stay readable, no temp left.
TEST(FileStoreFaults, F03_RealEnospcOnSmallTmpfsDegradesWithOneWarning) {
  TempDir dir;
  const auto mnt = dir.path() / "small";
  std::filesystem::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=4m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "); F03 real ENOSPC not run";
  }
  struct Unmount {
    std::filesystem::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  Figures f{"F03-tmpfs"};
  std::vector<std::string> warnings;
  auto o = quiet_options(mnt / "cache", &warnings);
  o.fsync = FsyncPolicy::file;
  auto store = open_store(o);
  std::vector<Artifact> stored;
  Result<PutOutcome> last = PutOutcome::stored;
  for (std::uint64_t i = 0; i < 64 && last; ++i) {
    Artifact a = make_artifact(i, i, 256 * 1024);
    last = store->put(a);
    ++f.ops;
    if (last) {
      stored.push_back(std::move(a));
    }
  }
  ASSERT_FALSE(last.has_value()) << "4 MiB must fill up";
  ++f.faults;
  EXPECT_EQ(last.error().code, ErrorCode::no_space) << last.error().describe();
  EXPECT_TRUE(store->degraded());
  auto skipped = store->put(make_artifact(999, 999, 1000));
  EXPECT_FALSE(skipped.has_value());
  EXPECT_EQ(store->stats()->puts_skipped, 1U);
  EXPECT_EQ(warnings.size(), 1U);
  for (const auto& a : stored) {
    auto got = store->get(a.passport.key);
    if (!got || !got->has_value()) {
      ++f.acked_lost;
    } else if ((*got)->payload != a.payload) {
      ++f.wrong;
    }
  }
  f.leftovers = count_leftovers(mnt / "cache");
  f.print();
  EXPECT_GE(stored.size(), 5U);
  EXPECT_EQ(f.acked_lost, 0U);
  EXPECT_EQ(f.wrong, 0U);
  EXPECT_EQ(f.leftovers, 0U);
}

// F05: EINTR and short transfers on every other read and write: identical bytes.
TEST(FileStoreFaults, F05_EintrAndShortTransfersGiveIdenticalBytes) {
  FaultReset guard;
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  Figures f{"F05"};
  ASSERT_TRUE(fault::configure(
      "op=write,nth=1,count=0,every=2,action=eintr;op=write,nth=2,count=0,every=2,action=short;"
      "op=read,nth=1,count=0,every=2,action=eintr;op=read,nth=2,count=0,every=2,action=short"));
  for (std::uint64_t i = 0; i < 20; ++i) {
    const Artifact a = make_artifact(i, i, 1000 + i * 7919);
    auto put = store->put(a);
    ASSERT_TRUE(put.has_value()) << put.error().describe();
    for (int r = 0; r < 2; ++r) {
      auto got = store->get(a.passport.key);
      ASSERT_TRUE(got.has_value() && got->has_value());
      f.ops += 2;
      if ((*got)->payload != a.payload || (*got)->passport != a.passport) {
        ++f.wrong;
      }
    }
  }
  f.faults = fault::injected();
  fault::reset();
  // A real interval timer interrupting the process all along.
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  ::sigaction(SIGALRM, &sa, nullptr);
  itimerval timer{{0, 200}, {0, 200}};
  ::setitimer(ITIMER_REAL, &timer, nullptr);
  for (std::uint64_t i = 100; i < 140; ++i) {
    const Artifact a = make_artifact(i, i, 300000);
    auto put = store->put(a);
    auto got = store->get(a.passport.key);
    f.ops += 2;
    if (!put || !got || !got->has_value() || (*got)->payload != a.payload) {
      ++f.wrong;
    }
  }
  itimerval off{};
  ::setitimer(ITIMER_REAL, &off, nullptr);
  f.print();
  EXPECT_GT(f.faults, 100U);
  EXPECT_EQ(f.wrong, 0U);
  EXPECT_EQ(store->stats()->corrupt, 0U);
}

// F07: one flipped bit in a payload, many trials: detected every time, on the
// first read and on a read after a recorded (fast) check.
TEST(FileStoreFaults, F07_FlippedBitIsDetectedEveryTime) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  std::mt19937_64 rng(7);
  Figures f{"F07"};
  std::uint64_t detected = 0;
  const int trials = 200;
  for (int t = 0; t < trials; ++t) {
    const Artifact a = make_artifact(static_cast<std::uint64_t>(t), static_cast<std::uint64_t>(t), 4096);
    ASSERT_TRUE(store->put(a).has_value());
    if (t % 2 == 0) {
      ASSERT_TRUE(store->get(a.passport.key)->has_value());  // records a fast check
    }
    std::string bytes(a.payload);
    const std::size_t bit = rng() % (bytes.size() * 8);
    bytes[bit / 8] = static_cast<char>(bytes[bit / 8] ^ (1 << (bit % 8)));
    write_file(payload_path(dir.path(), a.passport.key), bytes);
    ++f.faults;
    auto got = store->get(a.passport.key);
    ++f.ops;
    ASSERT_TRUE(got.has_value());
    if (got->has_value()) {
      ++f.wrong;
    } else if (!std::filesystem::exists(passport_path(dir.path(), a.passport.key))) {
      ++detected;
    }
  }
  f.print();
  EXPECT_EQ(detected, static_cast<std::uint64_t>(trials));
  EXPECT_EQ(f.wrong, 0U);
  EXPECT_EQ(store->stats()->corrupt, static_cast<std::uint64_t>(trials));
}

// F08: bad passports and payloads of the wrong size: a miss, counted, removed.
TEST(FileStoreFaults, F08_BadPassportsAndWrongSizesAreMissesAndRemoved) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  Figures f{"F08"};
  const Artifact other = make_artifact(9999, 9999, 2000);
  ASSERT_TRUE(store->put(other).has_value());
  const std::string other_pass = read_file(passport_path(dir.path(), other.passport.key));
  using Damage = std::function<void(const std::filesystem::path& payload, const std::filesystem::path& pass,
                                    const Artifact& a)>;
  const std::vector<std::pair<std::string, Damage>> cases = {
      {"truncated", [](auto&, auto& pass, auto& a) { write_file(pass, a.passport.to_json().substr(0, 40)); }},
      {"empty", [](auto&, auto& pass, auto&) { write_file(pass, ""); }},
      {"invalid", [](auto&, auto& pass, auto&) { write_file(pass, "{not json at all"); }},
      {"wrong key", [&](auto&, auto& pass, auto&) { write_file(pass, other_pass); }},
      {"huge", [](auto&, auto& pass, auto&) { std::filesystem::resize_file(pass, std::uint64_t{64} << 20); }},
      {"swapped", [&](auto& payload, auto&, auto&) {
         write_file(payload, other.payload);  // passport of another entry's size/digest mismatch
       }},
      {"size 0", [](auto& payload, auto&, auto&) { write_file(payload, ""); }},
      {"size n-1", [](auto& payload, auto&, auto& a) { write_file(payload, std::string(a.payload.view().substr(1))); }},
      {"size n+1", [](auto& payload, auto&, auto& a) { write_file(payload, std::string(a.payload) + "x"); }},
  };
  std::uint64_t key_seed = 1;
  for (const auto& [name, damage] : cases) {
    const Artifact a = make_artifact(key_seed, key_seed, 5000);
    ++key_seed;
    ASSERT_TRUE(store->put(a).has_value());
    damage(payload_path(dir.path(), a.passport.key), passport_path(dir.path(), a.passport.key), a);
    ++f.faults;
    const auto corrupt_before = store->stats()->corrupt;
    auto got = store->get(a.passport.key);
    ++f.ops;
    ASSERT_TRUE(got.has_value()) << name;
    if (got->has_value()) {
      ++f.wrong;
    }
    EXPECT_EQ(store->stats()->corrupt, corrupt_before + 1) << name;
    EXPECT_FALSE(std::filesystem::exists(passport_path(dir.path(), a.passport.key))) << name;
    EXPECT_FALSE(std::filesystem::exists(payload_path(dir.path(), a.passport.key))) << name;
  }
  // The neighbour whose passport was copied is untouched.
  EXPECT_EQ((*store->get(other.passport.key))->payload, other.payload);
  f.leftovers = count_leftovers(dir.path());
  f.print();
  EXPECT_EQ(f.wrong, 0U);
  EXPECT_EQ(f.leftovers, 0U);
}

// F10: a FIFO, a directory, a symlink and a hard link at entry paths; junk
// names: never blocks, never follows a symlink, junk ignored.
TEST(FileStoreFaults, F10_FifoDirectorySymlinkHardlinkAndJunkAreHandled) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  Figures f{"F10"};
  const auto outside = dir.path() / "outside";
  std::filesystem::create_directories(outside);
  int i = 0;
  auto fresh = [&]() {
    Artifact a = make_artifact(500 + static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(i), 3000);
    ++i;
    EXPECT_TRUE(store->put(a).has_value());
    return a;
  };
  auto expect_miss = [&](const Artifact& a, const char* what) {
    auto got = store->get(a.passport.key);
    ++f.ops;
    ++f.faults;
    ASSERT_TRUE(got.has_value()) << what;
    if (got->has_value()) {
      ++f.wrong;
    }
    EXPECT_FALSE(got->has_value()) << what;
  };
  {  // FIFO as payload and as passport: O_NONBLOCK, never blocks.
    const Artifact a = fresh();
    std::filesystem::remove(payload_path(dir.path(), a.passport.key));
    ASSERT_EQ(::mkfifo(payload_path(dir.path(), a.passport.key).c_str(), 0600), 0);
    expect_miss(a, "fifo payload");
    const Artifact b = fresh();
    std::filesystem::remove(passport_path(dir.path(), b.passport.key));
    ASSERT_EQ(::mkfifo(passport_path(dir.path(), b.passport.key).c_str(), 0600), 0);
    expect_miss(b, "fifo passport");
  }
  {  // Directory at the payload path.
    const Artifact a = fresh();
    std::filesystem::remove(payload_path(dir.path(), a.passport.key));
    std::filesystem::create_directory(payload_path(dir.path(), a.passport.key));
    expect_miss(a, "directory payload");
  }
  {  // Symlinks to a perfectly valid copy outside: never followed.
    const Artifact a = fresh();
    write_file(outside / "payload", a.payload);
    std::filesystem::remove(payload_path(dir.path(), a.passport.key));
    std::filesystem::create_symlink(outside / "payload", payload_path(dir.path(), a.passport.key));
    expect_miss(a, "symlink payload");
    EXPECT_TRUE(std::filesystem::exists(outside / "payload")) << "the target is never removed";
    const Artifact b = fresh();
    write_file(outside / "pass", read_file(passport_path(dir.path(), b.passport.key)));
    std::filesystem::remove(passport_path(dir.path(), b.passport.key));
    std::filesystem::create_symlink(outside / "pass", passport_path(dir.path(), b.passport.key));
    expect_miss(b, "symlink passport");
  }
  {  // A hard link to a file elsewhere (which could change behind our back).
    const Artifact a = fresh();
    std::filesystem::create_hard_link(payload_path(dir.path(), a.passport.key), outside / "linked");
    expect_miss(a, "hard-linked payload");
    EXPECT_EQ(read_file(outside / "linked"), a.payload) << "the other name is untouched";
  }
  {  // Junk names in a shard and junk shards: ignored by get and list.
    const Artifact a = fresh();
    const auto shard = payload_path(dir.path(), a.passport.key).parent_path();
    write_file(shard / "junk.txt", "x");
    write_file(shard / (std::string(64, 'A') + ".pass"), "x");
    write_file(shard / (std::string(64, 'f') + ".pass"), "x");  // wrong shard for its name unless shard is ff
    std::filesystem::create_directories(dir.path() / "v1" / "entries" / "zz");
    std::filesystem::create_directories(dir.path() / "v1" / "entries" / "AB");
    auto got = store->get(a.passport.key);
    ASSERT_TRUE(got.has_value() && got->has_value());
    EXPECT_EQ((*got)->payload, a.payload);
    auto list = store->list();
    ASSERT_TRUE(list.has_value());
    EXPECT_EQ(list->size(), 1U) << "only the one good entry is listed";
    auto report = store->verify(Repair::no);
    EXPECT_GE(report->orphans, 2U);
  }
  EXPECT_TRUE(std::filesystem::exists(outside / "payload"));
  EXPECT_TRUE(std::filesystem::exists(outside / "pass"));
  f.print();
  EXPECT_EQ(f.wrong, 0U);
}

}  // namespace
}  // namespace kcache::test
