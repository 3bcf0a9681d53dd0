// FileStore at its limits: payloads streamed in and out without being held in
// memory (issue 9 item 5), reads checked in chunks, metadata sized with the cap
// and counted under it (issue 13 item 4), and room reserved for puts in flight
// (issue 13 item 3).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kcache/blob.hpp"
#include "kcache/memory_store.hpp"
#include "kcache/tiered_store.hpp"
#include "kcache/write_behind_store.hpp"
#include "store/file/file_check_table.hpp"
#include "store/file/shared_counters.hpp"
#include "support/temp_dir.hpp"
#include "util/chunk_digest.hpp"
#include "unit/store/file/file_store_test_util.hpp"
#include "util/fd.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;
using test::make_artifact;
using test::make_payload;
using test::open_store;
using test::quiet_options;

std::string read_all(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) {
      return out;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
}

PassportForPayload blob_of_kind(const std::string& kind) {
  return [kind](std::uint64_t size, const std::array<std::uint8_t, 32>& sha256) {
    return make_blob_passport(kind, size, sha256);
  };
}

TEST(FileStoreLimits, PutStreamFromAFileStoresTheBlobMakeBlobWouldStore) {
  test::TempDir dir;
  auto store = open_store(quiet_options(dir.path() / "cache"));
  const std::string bytes = make_payload(7, 3 * 1024 * 1024 + 11);  // several chunks and a tail
  test::write_file(dir.path() / "in.bin", bytes);
  util::Fd fd(::open((dir.path() / "in.bin").c_str(), O_RDONLY | O_CLOEXEC));
  auto put = store->put_stream(fd.get(), blob_of_kind("engine"));
  ASSERT_TRUE(put.has_value()) << put.error().describe();
  EXPECT_EQ(put->outcome, PutOutcome::stored);
  const auto in_memory = make_blob("engine", bytes);
  ASSERT_TRUE(in_memory.has_value());
  EXPECT_EQ(put->passport.key, in_memory->passport.key) << "the same content gives the same key";
  EXPECT_EQ(put->passport.payload_sha256, in_memory->passport.payload_sha256);
  auto got = store->get(put->passport.key);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((*got)->payload, bytes);
  EXPECT_EQ(test::count_leftovers(dir.path() / "cache"), 0U);
}

TEST(FileStoreLimits, PutStreamFromAPipeAndAgainIsAlreadyPresent) {
  test::TempDir dir;
  auto store = open_store(quiet_options(dir.path() / "cache"));
  const std::string bytes = make_payload(9, 300 * 1024);
  for (const PutOutcome want : {PutOutcome::stored, PutOutcome::already_present}) {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    std::thread writer([&] {
      (void)!::write(p[1], bytes.data(), bytes.size());
      ::close(p[1]);
    });
    auto put = store->put_stream(p[0], blob_of_kind("blob"));
    writer.join();
    ::close(p[0]);
    ASSERT_TRUE(put.has_value()) << put.error().describe();
    EXPECT_EQ(put->outcome, want);
    EXPECT_EQ(put->passport.payload_size, bytes.size());
  }
  EXPECT_EQ(test::count_leftovers(dir.path() / "cache"), 0U);
}

TEST(FileStoreLimits, PutStreamRefusesAPassportThatDoesNotNameThePayload) {
  test::TempDir dir;
  auto store = open_store(quiet_options(dir.path() / "cache"));
  test::write_file(dir.path() / "in.bin", make_payload(3, 4096));
  util::Fd fd(::open((dir.path() / "in.bin").c_str(), O_RDONLY | O_CLOEXEC));
  auto put = store->put_stream(fd.get(), [](std::uint64_t size, const std::array<std::uint8_t, 32>& sha256) {
    return make_blob_passport("blob", size + 1, sha256);
  });
  ASSERT_FALSE(put.has_value());
  EXPECT_EQ(put.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(store->stats()->entries, 0U);
  EXPECT_EQ(test::count_leftovers(dir.path() / "cache"), 0U) << "the staged payload is removed";
}

TEST(FileStoreLimits, OpenPayloadCopiesTheVerifiedBytesToAPipeAndAFile) {
  test::TempDir dir;
  auto store = open_store(quiet_options(dir.path() / "cache"));
  const auto a = make_artifact(1, 1, 2 * 1024 * 1024 + 5);
  ASSERT_TRUE(store->put(a).has_value());
  for (int round = 0; round < 2; ++round) {  // first read: SHA-256; second: the recorded fast check
    auto file = store->open_payload(a.passport.key);
    ASSERT_TRUE(file && file->has_value());
    EXPECT_EQ((*file)->passport(), a.passport);
    const fs::path out = dir.path() / ("out" + std::to_string(round));
    util::Fd ofd(::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    ASSERT_TRUE((*file)->copy_to(ofd.get(), out.string()).has_value());
    EXPECT_EQ(test::read_file(out), a.payload);
  }
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  std::string through_pipe;
  std::thread reader([&] { through_pipe = read_all(p[0]); });
  {
    auto file = store->open_payload(a.passport.key);
    ASSERT_TRUE(file && file->has_value());
    EXPECT_TRUE((*file)->copy_to(p[1], "pipe").has_value());
    ::close(p[1]);
  }
  reader.join();
  ::close(p[0]);
  EXPECT_EQ(through_pipe, a.payload);
  EXPECT_EQ(store->stats()->hits, 3U);
}

TEST(FileStoreLimits, GetViewBorrowsVerifiedBytesMappedWhenLarge) {
  test::TempDir dir;
  const fs::path root = dir.path() / "cache";
  auto store = open_store(quiet_options(root));
  for (const std::size_t size : {std::size_t{100}, FileStore::k_map_min_bytes - 1, FileStore::k_map_min_bytes,
                                 std::size_t{3 << 20}}) {
    const auto a = make_artifact(700 + size, size, size);
    ASSERT_TRUE(store->put(a).has_value());
    for (int round = 0; round < 2; ++round) {  // SHA-256, then the recorded fast check
      auto view = store->get_view(a.passport.key);
      ASSERT_TRUE(view && view->has_value()) << size;
      EXPECT_EQ((*view)->bytes(), a.payload) << size;
      EXPECT_EQ((*view)->mapped(), size >= FileStore::k_map_min_bytes) << size;
      EXPECT_EQ((*view)->passport(), a.passport);
    }
    // Damage is found through the view too: a miss, and the entry goes.
    {
      util::Fd fd(::open(test::payload_path(root, a.passport.key).c_str(), O_WRONLY | O_CLOEXEC));
      ASSERT_EQ(::pwrite(fd.get(), "\x01\x02", 2, static_cast<off_t>(size / 2)), 2);
    }
    auto damaged = store->get_view(a.passport.key);
    ASSERT_TRUE(damaged.has_value());
    EXPECT_FALSE(damaged->has_value()) << size;
    EXPECT_FALSE(fs::exists(test::payload_path(root, a.passport.key)));
  }
}

// get() of a large payload maps it (no copy): the bytes are right, they end in
// a NUL byte (c_str) even at an exact multiple of the page size, they outlive
// the entry's eviction, and copies of the artifact share them.
TEST(FileStoreLimits, GetSharesLargePayloadsWithoutACopyAndTheyOutliveTheEntry) {
  test::TempDir dir;
  const fs::path root = dir.path() / "cache";
  auto store = open_store(quiet_options(root));
  for (const std::size_t size : {std::size_t{100}, FileStore::k_map_min_bytes - 1, FileStore::k_map_min_bytes,
                                 FileStore::k_map_min_bytes + 4095, std::size_t{3 << 20} + 1}) {
    const auto a = make_artifact(900 + size, size, size);
    ASSERT_TRUE(store->put(a).has_value());
    for (int round = 0; round < 2; ++round) {  // SHA-256, then the recorded fast check
      auto got = store->get(a.passport.key);
      ASSERT_TRUE(got && got->has_value()) << size;
      const Artifact held = **got;
      EXPECT_TRUE(held.payload.shares_with((*got)->payload));
      EXPECT_EQ(held.payload, a.payload) << size;
      EXPECT_EQ(held.payload.c_str()[size], '\0') << size;
      if (round == 1) {
        ASSERT_TRUE(store->remove(a.passport.key).value());
        got->reset();
        EXPECT_EQ(held.payload, a.payload) << "the bytes outlive the entry: " << size;
      }
    }
  }
}

// Whether the process maps `file` now (a line of /proc/self/maps names it).
bool process_maps(const fs::path& file) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find(file.string()) != std::string::npos) {
      return true;
    }
  }
  return false;
}

// FileStoreOptions::map_min_bytes (the kcache command's 16 KiB): payloads of
// that size or more are mapped, not read into a fresh buffer, and checked as
// every read is: the bytes right and NUL-ended at an exact page multiple too,
// a flipped byte a counted miss, a truncated file a miss before any mapping.
TEST(FileStoreLimits, APayloadFromMapMinBytesUpIsMappedAndChecked) {
  test::TempDir dir;
  const fs::path root = dir.path() / "cache";
  auto o = quiet_options(root);
  o.map_min_bytes = 16 * 1024;
  auto store = open_store(o);
  for (const std::size_t size : {std::size_t{16 * 1024} - 1, std::size_t{16 * 1024}, std::size_t{20000},
                                 std::size_t{155152}, std::size_t{8 * 4096}}) {
    const auto a = make_artifact(1400 + size, size, size);
    ASSERT_TRUE(store->put(a).has_value());
    const fs::path file = test::payload_path(root, a.passport.key);
    for (int round = 0; round < 2; ++round) {  // SHA-256, then the recorded fast check
      auto got = store->get(a.passport.key);
      ASSERT_TRUE(got && got->has_value()) << size;
      EXPECT_EQ((*got)->payload, a.payload) << size;
      EXPECT_EQ((*got)->payload.c_str()[size], '\0') << size;
      EXPECT_EQ(process_maps(file), size >= 16 * 1024) << size;
    }
    EXPECT_FALSE(process_maps(file)) << "the mapping ends with the payload: " << size;
    {
      util::Fd fd(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
      ASSERT_EQ(::pwrite(fd.get(), "\x01", 1, static_cast<off_t>(size / 2)), 1);
    }
    const std::uint64_t corrupt_before = store->stats()->corrupt;
    auto damaged = store->get(a.passport.key);
    ASSERT_TRUE(damaged.has_value());
    EXPECT_FALSE(damaged->has_value()) << size;
    EXPECT_EQ(store->stats()->corrupt, corrupt_before + 1) << size;
    // Put back, then cut short: a miss, never a fault.
    ASSERT_TRUE(store->put(a).has_value());
    ASSERT_EQ(::truncate(file.c_str(), static_cast<off_t>(size - 4096)), 0);
    auto cut = store->get(a.passport.key);
    ASSERT_TRUE(cut.has_value());
    EXPECT_FALSE(cut->has_value()) << size;
  }
  // The default stays 1 MiB: a 155 KB payload is read, not mapped.
  auto plain = open_store(quiet_options(dir.path() / "plain"));
  const auto b = make_artifact(1500, 1500, 155152);
  ASSERT_TRUE(plain->put(b).has_value());
  auto got = plain->get(b.passport.key);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_FALSE(process_maps(test::payload_path(dir.path() / "plain", b.passport.key)));
}

// get_into() reads (or copies) a payload of FileStore::k_lend_min_bytes or
// more into memory the caller lends, checks it there (first by SHA-256, then
// by the recorded fast check), and counts and removes a damaged entry as get()
// does; a smaller payload is read as get() reads it, without asking for memory.
TEST(FileStoreLimits, GetIntoChecksALargePayloadInLentMemory) {
  test::TempDir dir;
  const fs::path root = dir.path() / "cache";
  auto store = open_store(quiet_options(root));
  std::vector<std::size_t> asked;
  std::vector<const char*> lent;
  const PayloadAllocator allocate = [&](std::size_t size) {
    asked.push_back(size);
    auto buffer = std::shared_ptr<char[]>(new char[size + 1]);
    lent.push_back(buffer.get());
    return PayloadBuffer{std::shared_ptr<const void>(buffer, buffer.get()), buffer.get()};
  };
  for (const std::size_t size : {std::size_t{100}, FileStore::k_lend_min_bytes - 1, FileStore::k_lend_min_bytes,
                                 std::size_t{256 << 10} + 3, FileStore::k_map_min_bytes - 1,
                                 FileStore::k_map_min_bytes, std::size_t{3 << 20} + 1}) {
    const bool large = size >= FileStore::k_lend_min_bytes;
    const auto a = make_artifact(1100 + size, size, size);
    ASSERT_TRUE(store->put(a).has_value());
    for (int round = 0; round < 2; ++round) {  // SHA-256, then the recorded fast check
      asked.clear();
      lent.clear();
      auto got = store->get_into(a.passport.key, allocate);
      ASSERT_TRUE(got && got->has_value()) << size;
      EXPECT_EQ((*got)->payload, a.payload) << size;
      EXPECT_EQ((*got)->payload.c_str()[size], '\0') << size;
      EXPECT_EQ(asked, large ? std::vector<std::size_t>{size} : std::vector<std::size_t>{}) << size;
      if (large) {
        EXPECT_EQ((*got)->payload.data(), lent.at(0)) << "the lent memory holds the bytes: " << size;
      }
    }
    // A byte flipped in the file: a miss, counted, and the entry goes.
    {
      util::Fd fd(::open(test::payload_path(root, a.passport.key).c_str(), O_WRONLY | O_CLOEXEC));
      ASSERT_EQ(::pwrite(fd.get(), "\x01", 1, static_cast<off_t>(size - 1)), 1);
    }
    const std::uint64_t corrupt_before = store->stats()->corrupt;
    auto damaged = store->get_into(a.passport.key, allocate);
    ASSERT_TRUE(damaged.has_value());
    EXPECT_FALSE(damaged->has_value()) << size;
    EXPECT_EQ(store->stats()->corrupt, corrupt_before + 1) << size;
    EXPECT_FALSE(fs::exists(test::payload_path(root, a.passport.key))) << size;
  }
  // Memory declined (null data): the store maps the payload as get() does.
  const auto a = make_artifact(1200, 1200, 2 << 20);
  ASSERT_TRUE(store->put(a).has_value());
  auto got = store->get_into(a.passport.key, [](std::size_t) { return PayloadBuffer{}; });
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((*got)->payload, a.payload);
}

// Every read path computes the fast check's digest one way (util::chunk_digest,
// chunked from 1 MiB so that two threads can read a payload side by side): a
// record made by any of them is the one the others check against. A path that
// computed another digest would find the record wrong, fall back to SHA-256
// and record its own value, which the check below would see.
TEST(FileStoreLimits, EveryReadPathRecordsTheSameDigest) {
  test::TempDir dir;
  const fs::path root = dir.path() / "cache";
  auto mapped_options = quiet_options(root);
  mapped_options.large_reads = LargeReads::mapped;
  auto copied_options = quiet_options(root);
  copied_options.large_reads = LargeReads::copied;
  auto mapped = open_store(mapped_options);
  auto copied = open_store(copied_options);
  const PayloadAllocator allocate = [](std::size_t size) {
    auto buffer = std::shared_ptr<char[]>(new char[size + 1]);
    return PayloadBuffer{std::shared_ptr<const void>(buffer, buffer.get()), buffer.get()};
  };
  util::Fd stats(::open((root / "v1" / "stats").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  for (const std::size_t size : {std::size_t{200} << 10, std::size_t{600} << 10, util::k_chunked_digest_min,
                                 (std::size_t{3} << 20) + 1}) {
    const auto a = make_artifact(1300 + size, size, size);
    ASSERT_TRUE(mapped->put(a).has_value());
    const std::uint64_t want = util::chunk_digest(a.payload);
    const std::vector<std::pair<std::string, std::function<bool()>>> paths = {
        {"get_into, mapped", [&] { auto g = mapped->get_into(a.passport.key, allocate); return g && g->has_value(); }},
        {"get, mapped", [&] { auto g = mapped->get(a.passport.key); return g && g->has_value(); }},
        {"get_into, copied", [&] { auto g = copied->get_into(a.passport.key, allocate); return g && g->has_value(); }},
        {"get, copied", [&] { auto g = copied->get(a.passport.key); return g && g->has_value(); }},
        {"get_view", [&] { auto g = mapped->get_view(a.passport.key); return g && g->has_value(); }},
        {"open_payload", [&] { auto g = mapped->open_payload(a.passport.key); return g && g->has_value(); }},
    };
    for (const auto& [name, read] : paths) {
      ASSERT_TRUE(stats);
      auto table = store::FileCheckTable::open(stats.get(), 0600, 1024);
      ASSERT_TRUE(table);
      store::CheckRecord rec;
      if (table->find(a.passport.key, rec)) {
        // A wrong digest in the record: this read must fall back to SHA-256
        // and record the digest it computed.
        table->record(a.passport.key, store::CheckRecord{rec.ino, rec.size, rec.mtime_ns, rec.ctime_ns,
                                                         rec.xxh3 ^ 1, rec.sha256_prefix});
      }
      ASSERT_TRUE(read()) << name << " " << size;
      ASSERT_TRUE(table->find(a.passport.key, rec)) << name << " " << size;
      EXPECT_EQ(rec.xxh3, want) << name << " " << size;
      ASSERT_TRUE(read()) << "served by its own record: " << name << " " << size;
    }
  }
}

// LargeReads::copied (the Python package's reads): a large payload is read
// into memory of the process, never mapped, so truncating the entry's file or
// writing into it in place after the hit changes nothing the caller holds and
// faults nothing (a mapping would SIGBUS on the truncated pages and show the
// written bytes); the damaged file is a miss afterwards. get() and get_into().
TEST(FileStoreLimits, CopiedLargeReadsAreUnchangedByTruncationAndInPlaceWrites) {
  test::TempDir dir;
  const fs::path root = dir.path() / "cache";
  auto options = quiet_options(root);
  options.large_reads = LargeReads::copied;
  auto store = open_store(std::move(options));
  const PayloadAllocator allocate = [](std::size_t size) {
    auto buffer = std::shared_ptr<char[]>(new char[size + 1]);
    return PayloadBuffer{std::shared_ptr<const void>(buffer, buffer.get()), buffer.get()};
  };
  const std::size_t size = (3 << 20) + 1;
  int seed = 1400;
  for (const bool into : {false, true}) {
    for (const bool truncate : {true, false}) {
      const auto a = make_artifact(seed, seed, size);
      ++seed;
      ASSERT_TRUE(store->put(a).has_value());
      auto got = into ? store->get_into(a.passport.key, allocate) : store->get(a.passport.key);
      ASSERT_TRUE(got && got->has_value());
      const std::string path = test::payload_path(root, a.passport.key).string();
      if (truncate) {
        ASSERT_EQ(::truncate(path.c_str(), 0), 0);
      } else {
        util::Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
        const std::string junk(8192, '\xff');
        ASSERT_EQ(::pwrite(fd.get(), junk.data(), junk.size(), 0), static_cast<ssize_t>(junk.size()));
      }
      EXPECT_EQ((*got)->payload, a.payload) << "into=" << into << " truncate=" << truncate;
      EXPECT_EQ((*got)->payload.c_str()[size], '\0');
      auto again = into ? store->get_into(a.passport.key, allocate) : store->get(a.passport.key);
      ASSERT_TRUE(again.has_value());
      EXPECT_FALSE(again->has_value()) << "the changed file is a miss: into=" << into << " truncate=" << truncate;
    }
  }
  // A file shorter than its passport says when it is read: a miss, no fault.
  const auto a = make_artifact(seed, seed, size);
  ASSERT_TRUE(store->put(a).has_value());
  ASSERT_EQ(::truncate(test::payload_path(root, a.passport.key).c_str(), static_cast<off_t>(size / 2)), 0);
  auto got = store->get(a.passport.key);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
  // The same for a payload read straight into lent memory (k_lend_min_bytes up).
  const auto mid = make_artifact(seed + 1, seed + 1, (256 << 10) + 3);
  ASSERT_TRUE(store->put(mid).has_value());
  ASSERT_EQ(::truncate(test::payload_path(root, mid.passport.key).c_str(), 100 << 10), 0);
  auto short_read = store->get_into(mid.passport.key, allocate);
  ASSERT_TRUE(short_read.has_value());
  EXPECT_FALSE(short_read->has_value());
}

// The configured chain (write-behind around memory + file tiers) passes the
// lent memory down to the file tier, and the memory tier keeps that buffer.
TEST(FileStoreLimits, GetIntoThroughTheConfiguredChainLandsInLentMemory) {
  test::TempDir dir;
  std::vector<std::unique_ptr<Store>> tiers;
  tiers.push_back(std::make_unique<MemoryStore>(16 << 20));
  tiers.push_back(open_store(quiet_options(dir.path() / "cache")));
  ASSERT_NE(tiers.back(), nullptr);
  const auto a = make_artifact(1300, 1300, 2 << 20);
  ASSERT_TRUE(tiers.back()->put(a).has_value());
  WriteBehindStore chain(std::make_unique<TieredStore>(std::move(tiers)));
  const char* lent = nullptr;
  auto got = chain.get_into(a.passport.key, [&](std::size_t size) {
    auto buffer = std::shared_ptr<char[]>(new char[size + 1]);
    lent = buffer.get();
    return PayloadBuffer{std::shared_ptr<const void>(buffer, buffer.get()), buffer.get()};
  });
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((*got)->payload, a.payload);
  EXPECT_EQ((*got)->payload.data(), lent);
  auto again = chain.get(a.passport.key);  // from the memory tier now
  ASSERT_TRUE(again && again->has_value());
  EXPECT_TRUE((*again)->payload.shares_with((*got)->payload));
}

TEST(FileStoreLimits, DamageFoundInAChunkedReadIsAMissAndTheEntryGoes) {
  test::TempDir dir;
  const fs::path root = dir.path() / "cache";
  for (const bool via_file : {false, true}) {
    auto store = open_store(quiet_options(root));
    const auto a = make_artifact(via_file ? 2 : 3, 5, 1024 * 1024 + 77);
    ASSERT_TRUE(store->put(a).has_value());
    ASSERT_TRUE(store->get(a.passport.key)->has_value());  // records the fast check
    // Flip one byte in the last chunk, keeping size; the inode stays, ctime moves.
    const fs::path payload = test::payload_path(root, a.passport.key);
    util::Fd fd(::open(payload.c_str(), O_WRONLY | O_CLOEXEC));
    ASSERT_EQ(::pwrite(fd.get(), "\x5a", 1, 1024 * 1024 + 70), 1);
    fd.reset();
    if (via_file) {
      auto file = store->open_payload(a.passport.key);
      ASSERT_TRUE(file.has_value());
      EXPECT_FALSE(file->has_value());
    } else {
      auto got = store->get(a.passport.key);
      ASSERT_TRUE(got.has_value());
      EXPECT_FALSE(got->has_value());
    }
    EXPECT_FALSE(fs::exists(payload));
  }
}

TEST(FileStoreLimits, CopyToNoticesAPayloadChangedAfterItWasVerified) {
  test::TempDir dir;
  const fs::path root = dir.path() / "cache";
  auto store = open_store(quiet_options(root));
  const auto a = make_artifact(4, 4, 64 * 1024);
  ASSERT_TRUE(store->put(a).has_value());
  auto file = store->open_payload(a.passport.key);
  ASSERT_TRUE(file && file->has_value());
  {
    util::Fd fd(::open(test::payload_path(root, a.passport.key).c_str(), O_WRONLY | O_CLOEXEC));
    ASSERT_EQ(::pwrite(fd.get(), "!", 1, 100), 1);
  }
  util::Fd out(::open((dir.path() / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  auto copied = (*file)->copy_to(out.get(), "out");
  ASSERT_FALSE(copied.has_value());
  EXPECT_EQ(copied.error().code, ErrorCode::corrupt);
}

TEST(FileStoreLimits, TheCheckTableStartsSmallAndIsCountedInStats) {
  test::TempDir dir;
  auto o = quiet_options(dir.path() / "small");
  o.max_size_bytes = 1 << 20;
  auto small = open_store(o);
  // A directory made just now makes its table at the first check; the next
  // process to open it (a directory that exists) makes it at open.
  EXPECT_FALSE(fs::exists(dir.path() / "small" / "v1" / "stats" / "checks"));
  EXPECT_EQ(small->stats()->metadata_bytes, store::SharedCounters::k_file_size);
  small = open_store(o);
  const auto checks_size = fs::file_size(dir.path() / "small" / "v1" / "stats" / "checks");
  EXPECT_EQ(checks_size, store::FileCheckTable::file_size(32)) << "32 slots for a new cache";
  const auto s = small->stats();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->metadata_bytes, checks_size + store::SharedCounters::k_file_size);
  EXPECT_LT(s->metadata_bytes, o.max_size_bytes / 50) << "metadata is a small share of a small cap";
  // Another process with another cap uses the table as it is.
  auto o2 = o;
  o2.max_size_bytes = 8ULL << 30;
  auto big = open_store(o2);
  EXPECT_EQ(fs::file_size(dir.path() / "small" / "v1" / "stats" / "checks"), checks_size);
  EXPECT_EQ(big->stats()->metadata_bytes, s->metadata_bytes);
  // A new cache with a large cap starts small too: the table grows with the
  // entries (test_file_check_table.cpp), up to the size the cap allows.
  auto o3 = quiet_options(dir.path() / "large");
  o3.max_size_bytes = 8ULL << 30;
  auto large = open_store(o3);
  large = open_store(o3);
  EXPECT_EQ(fs::file_size(dir.path() / "large" / "v1" / "stats" / "checks"), store::FileCheckTable::file_size(32));
  EXPECT_EQ(store::FileCheckTable::slots_for_cap(1 << 20), 64U);
  EXPECT_EQ(store::FileCheckTable::slots_for_cap(64ULL << 20), 4096U);
  EXPECT_EQ(store::FileCheckTable::slots_for_entries(1, 65536), 32U);
  EXPECT_EQ(store::FileCheckTable::slots_for_entries(100, 65536), 256U);
  EXPECT_EQ(store::FileCheckTable::slots_for_entries(100, 64), 64U);
  EXPECT_EQ(store::FileCheckTable::slots_for_cap(256 * 1024), 32U);
}

TEST(FileStoreLimits, EntriesAndMetadataTogetherStayUnderTheCap) {
  test::TempDir dir;
  auto o = quiet_options(dir.path() / "cache");
  o.max_size_bytes = 256 * 1024;
  auto store = open_store(o);
  for (std::uint64_t i = 0; i < 200; ++i) {
    ASSERT_TRUE(store->put(make_artifact(100 + i, i, 4000)).has_value());
  }
  const auto s = store->stats();
  ASSERT_TRUE(s.has_value());
  EXPECT_GT(s->evictions, 0U);
  EXPECT_LE(s->size_bytes + s->metadata_bytes, o.max_size_bytes);
}

TEST(FileStoreLimits, RoomLeftByAKilledWriterIsReclaimed) {
  test::TempDir dir;
  auto o = quiet_options(dir.path() / "cache");
  o.max_size_bytes = 1 << 20;
  auto store = open_store(o);
  // A writer reserves the whole cap for an entry in flight, then dies.
  const pid_t pid = ::fork();
  if (pid == 0) {
    util::Fd stats(::open((dir.path() / "cache" / "v1" / "stats").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    auto counters = store::SharedCounters::open(stats.get(), 0600);
    ::_exit(counters->shared() && counters->reserve_room(o.max_size_bytes) >= 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  util::Fd stats(::open((dir.path() / "cache" / "v1" / "stats").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto counters = store::SharedCounters::open(stats.get(), 0600);
  EXPECT_EQ(counters->reserved_bytes(), o.max_size_bytes);
  // Puts go on (the dead writer's room is taken back) and stay under the cap.
  for (std::uint64_t i = 0; i < 40; ++i) {
    ASSERT_TRUE(store->put(make_artifact(500 + i, i, 30000)).has_value());
  }
  EXPECT_EQ(counters->reserved_bytes(), 0U);
  EXPECT_LE(store->stats()->size_bytes + store->stats()->metadata_bytes, o.max_size_bytes);
}

}  // namespace
}  // namespace kcache
