// FileStore: the basic contract (get/put/remove/list/stats), the on-disk
// layout, atomic publish, and verification on read.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "file_store_test_util.hpp"
#include "support/temp_dir.hpp"

namespace kcache::test {
namespace {

TEST(FileStore, PutThenGetReturnsTheSameArtifact) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path() / "cache"));
  const Artifact a = make_artifact(1, 1, 5000);
  auto put = store->put(a);
  ASSERT_TRUE(put.has_value()) << put.error().describe();
  EXPECT_EQ(*put, PutOutcome::stored);
  auto got = store->get(a.passport.key);
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, a);
  // A second read (fast path) returns the same bytes.
  auto again = store->get(a.passport.key);
  ASSERT_TRUE(again.has_value() && again->has_value());
  EXPECT_EQ((*again)->payload, a.payload);
}

TEST(FileStore, UnknownKeyIsAMissNotAnError) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  auto got = store->get(test_key(42));
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(store->stats()->misses, 1U);
}

TEST(FileStore, SecondPutOfAKeyIsAlreadyPresent) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  const Artifact a = make_artifact(2, 2, 100);
  EXPECT_EQ(*store->put(a), PutOutcome::stored);
  EXPECT_EQ(*store->put(a), PutOutcome::already_present);
  EXPECT_EQ(store->stats()->puts, 1U);
}

TEST(FileStore, PayloadFileHoldsExactlyTheRawBytesAndPassportSitsBeside) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  const Artifact a = make_artifact(3, 3, 12345);
  ASSERT_TRUE(store->put(a).has_value());
  EXPECT_EQ(read_file(payload_path(dir.path(), a.passport.key)), a.payload);
  auto parsed = Passport::from_json(read_file(passport_path(dir.path(), a.passport.key)));
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(*parsed, a.passport);
  EXPECT_EQ(count_leftovers(dir.path()), 0U);
}

TEST(FileStore, RefusesAnArtifactThatDoesNotVerify) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  Artifact a = make_artifact(4, 4, 100);
  std::string bytes(a.payload);
  bytes[30] ^= 1;
  a.payload = std::move(bytes);
  auto put = store->put(a);
  ASSERT_FALSE(put.has_value());
  EXPECT_EQ(put.error().code, ErrorCode::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(passport_path(dir.path(), a.passport.key)));
}

TEST(FileStore, RemoveDeletesBothFilesAndReportsWhetherThereWasOne) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  const Artifact a = make_artifact(5, 5, 100);
  ASSERT_TRUE(store->put(a).has_value());
  EXPECT_EQ(store->remove(a.passport.key).value(), true);
  EXPECT_EQ(store->remove(a.passport.key).value(), false);
  EXPECT_FALSE(std::filesystem::exists(payload_path(dir.path(), a.passport.key)));
  EXPECT_FALSE(std::filesystem::exists(passport_path(dir.path(), a.passport.key)));
  EXPECT_FALSE(store->get(a.passport.key)->has_value());
  EXPECT_EQ(store->stats()->entries, 0U);
  EXPECT_EQ(store->stats()->size_bytes, 0U);
}

TEST(FileStore, ListReportsEveryEntryAndStatsCountSizes) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  std::uint64_t bytes = 0;
  for (std::uint64_t i = 0; i < 20; ++i) {
    const Artifact a = make_artifact(100 + i, i, 100 + i);
    ASSERT_TRUE(store->put(a).has_value());
    bytes += a.payload.size() + a.passport.to_json().size();
  }
  auto list = store->list();
  ASSERT_TRUE(list.has_value());
  EXPECT_EQ(list->size(), 20U);
  for (const auto& e : *list) {
    EXPECT_EQ(e.kind, "blob");
    EXPECT_GT(e.last_used_unix_ms, 0);
  }
  auto st = store->stats();
  EXPECT_EQ(st->entries, 20U);
  EXPECT_EQ(st->size_bytes, bytes);
  EXPECT_EQ(st->puts, 20U);
}

TEST(FileStore, CountersAreSharedBetweenInstancesAndSurviveReopen) {
  TempDir dir;
  const Artifact a = make_artifact(6, 6, 1000);
  {
    auto s1 = open_store(quiet_options(dir.path()));
    auto s2 = open_store(quiet_options(dir.path()));
    ASSERT_TRUE(s1->put(a).has_value());
    ASSERT_TRUE(s2->get(a.passport.key)->has_value());
    EXPECT_EQ(s1->stats()->hits, 1U);
  }
  auto s3 = open_store(quiet_options(dir.path()));
  EXPECT_EQ(s3->stats()->hits, 1U);
  EXPECT_EQ(s3->stats()->puts, 1U);
  EXPECT_EQ(s3->stats()->entries, 1U);
}

TEST(FileStore, PayloadWithoutPassportIsAMissAndAnOrphanForVerify) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  const Artifact a = make_artifact(7, 7, 1000);
  ASSERT_TRUE(store->put(a).has_value());
  std::filesystem::remove(passport_path(dir.path(), a.passport.key));
  EXPECT_FALSE(store->get(a.passport.key)->has_value());
  auto report = store->verify(Repair::no);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->orphans, 1U);
  auto repaired = store->verify(Repair::yes);
  EXPECT_EQ(repaired->orphans_removed, 1U);
  EXPECT_EQ(count_leftovers(dir.path()), 0U);
  // The key can be stored again.
  EXPECT_EQ(*store->put(a), PutOutcome::stored);
}

TEST(FileStore, EveryReadModeDetectsAChangedPayload) {
  for (ReadVerify mode : {ReadVerify::fast_when_unchanged, ReadVerify::always_full}) {
    TempDir dir;
    auto o = quiet_options(dir.path());
    o.verify = mode;
    auto store = open_store(o);
    const Artifact a = make_artifact(8, 8, 4096);
    ASSERT_TRUE(store->put(a).has_value());
    ASSERT_TRUE(store->get(a.passport.key)->has_value());  // records the check
    std::string bytes(a.payload);
    bytes[100] ^= 0x10;
    write_file(payload_path(dir.path(), a.passport.key), bytes);
    EXPECT_FALSE(store->get(a.passport.key)->has_value());
    EXPECT_EQ(store->stats()->corrupt, 1U);
    EXPECT_FALSE(std::filesystem::exists(passport_path(dir.path(), a.passport.key)));
  }
}

TEST(FileStore, ClearRemovesEverythingAndKeepsCounters) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  for (std::uint64_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(store->put(make_artifact(200 + i, i, 300)).has_value());
  }
  EXPECT_EQ(store->clear().value(), 10U);
  EXPECT_EQ(store->list()->size(), 0U);
  EXPECT_EQ(store->stats()->entries, 0U);
  EXPECT_EQ(store->stats()->size_bytes, 0U);
  EXPECT_EQ(store->stats()->puts, 10U);
}

TEST(FileStore, ClearTakesAnOrphanPayloadWithoutFailing) {
  // A payload whose passport is gone (lost behind the store's back) is removed by
  // clear, which succeeds and counts only the entries it removed.
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  const Artifact orphan = make_artifact(500, 1, 300);
  ASSERT_TRUE(store->put(orphan).has_value());
  ASSERT_TRUE(store->put(make_artifact(501, 2, 300)).has_value());
  std::filesystem::remove(passport_path(dir.path(), orphan.passport.key));
  auto removed = store->clear();
  ASSERT_TRUE(removed.has_value()) << removed.error().message;
  EXPECT_EQ(*removed, 1U);
  EXPECT_FALSE(std::filesystem::exists(payload_path(dir.path(), orphan.passport.key)));
  EXPECT_EQ(store->stats()->entries, 0U);
}

TEST(FileStore, VerifyRehashesEveryEntry) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  for (std::uint64_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(store->put(make_artifact(300 + i, i, 500)).has_value());
  }
  const Artifact bad = make_artifact(400, 1, 500);
  ASSERT_TRUE(store->put(bad).has_value());
  std::string bytes(bad.payload);
  bytes[200] ^= 1;
  write_file(payload_path(dir.path(), bad.passport.key), bytes);
  auto r = store->verify(Repair::no);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->entries_checked, 6U);
  EXPECT_EQ(r->entries_ok, 5U);
  EXPECT_EQ(r->entries_bad, 1U);
  EXPECT_EQ(r->entries_removed, 0U);
  auto fixed = store->verify(Repair::yes);
  EXPECT_EQ(fixed->entries_removed, 1U);
  EXPECT_EQ(store->verify(Repair::no)->entries_bad, 0U);
  EXPECT_EQ(store->stats()->entries, 5U);
}

TEST(FileStore, FsyncPoliciesAllPublish) {
  for (FsyncPolicy p : {FsyncPolicy::none, FsyncPolicy::file, FsyncPolicy::file_and_directory}) {
    TempDir dir;
    auto o = quiet_options(dir.path());
    o.fsync = p;
    auto store = open_store(o);
    const Artifact a = make_artifact(9, 9, 2000);
    ASSERT_TRUE(store->put(a).has_value());
    EXPECT_EQ((*store->get(a.passport.key))->payload, a.payload);
  }
}

TEST(FileStore, StaleTempFilesAreSweptOnOpen) {
  TempDir dir;
  { auto store = open_store(quiet_options(dir.path())); }
  write_file(dir.path() / "v1" / "tmp" / "123-0-deadbeef.tmp", "partial");
  auto o = quiet_options(dir.path());
  o.stale_temp_age = std::chrono::seconds(3600);
  { auto store = open_store(o); }
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "v1" / "tmp" / "123-0-deadbeef.tmp")) << "a young temp is kept";
  { auto store = open_store(quiet_options(dir.path())); }
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "v1" / "tmp" / "123-0-deadbeef.tmp"));
}

}  // namespace
}  // namespace kcache::test

namespace kcache::test {
namespace {

// A get remembers the passports it parsed (bound to the passport file's
// identity). Rewriting a passport in place, even with a valid passport of
// another entry, must still be caught by the same store instance.
TEST(FileStore, PassportMemoNeverHidesAPassportChangedInPlace) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  const Artifact a = make_artifact(7, 7, 3000);
  const Artifact b = make_artifact(8, 8, 3000);
  ASSERT_TRUE(store->put(a).has_value());
  ASSERT_TRUE(store->put(b).has_value());
  ASSERT_TRUE(store->get(a.passport.key)->has_value());  // parsed and remembered
  // Overwrite a's passport in place (same inode) with b's passport text.
  const std::string other = read_file(passport_path(dir.path(), b.passport.key));
  {
    std::FILE* f = std::fopen(passport_path(dir.path(), a.passport.key).c_str(), "r+");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(other.data(), 1, other.size(), f), other.size());
    std::fclose(f);
  }
  auto got = store->get(a.passport.key);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(store->stats()->corrupt, 1U);
  // b is untouched and still served.
  auto gb = store->get(b.passport.key);
  ASSERT_TRUE(gb.has_value() && gb->has_value());
  EXPECT_EQ((*gb)->payload, b.payload);
}

// get() keeps shard directories open; one removed behind the store's back is
// reopened, so entries published after the removal are found.
TEST(FileStore, ShardDirectoryRemovedBehindItsBackIsReopened) {
  TempDir dir;
  auto store = open_store(quiet_options(dir.path()));
  const Artifact a = make_artifact(9, 9, 2000);
  ASSERT_TRUE(store->put(a).has_value());
  ASSERT_TRUE(store->get(a.passport.key)->has_value());
  std::filesystem::remove_all(payload_path(dir.path(), a.passport.key).parent_path());
  auto gone = store->get(a.passport.key);
  ASSERT_TRUE(gone.has_value());
  EXPECT_FALSE(gone->has_value());
  auto put = store->put(a);
  ASSERT_TRUE(put.has_value()) << put.error().describe();
  auto back = store->get(a.passport.key);
  ASSERT_TRUE(back.has_value() && back->has_value());
  EXPECT_EQ((*back)->payload, a.payload);
}

// A staged payload (a streamed remote fill) is served after its commit from
// the staged file itself: the bytes committed, not read through the entry
// (the store counts no hit, which a read of the entry does), mapped or read
// as the options say; also when the key was already present.
TEST(FileStore, CommittedStagedPayloadIsServedWithoutReadingTheEntry) {
  for (LargeReads reads : {LargeReads::mapped, LargeReads::copied}) {
    TempDir dir;
    FileStoreOptions o = quiet_options(dir.path() / "cache");
    o.large_reads = reads;
    auto store = open_store(o);
    for (std::size_t len : {std::size_t{5000}, FileStore::k_map_min_bytes + 12345}) {
      const Artifact a = make_artifact(len, 7, len);
      auto staged = store->stage_payload(len, StagedAs::fill);
      ASSERT_TRUE(staged.has_value()) << staged.error().describe();
      EXPECT_FALSE(staged->committed_payload().has_value()) << "nothing committed yet";
      const std::string_view bytes = a.payload.view();
      ASSERT_TRUE(staged->write(bytes.substr(0, len / 3)).has_value());
      ASSERT_TRUE(staged->write(bytes.substr(len / 3)).has_value());
      auto put = staged->commit(a.passport);
      ASSERT_TRUE(put.has_value()) << put.error().describe();
      EXPECT_EQ(*put, PutOutcome::stored);
      const std::uint64_t hits_before = store->stats()->hits;
      auto served = staged->committed_payload();
      ASSERT_TRUE(served.has_value()) << served.error().describe();
      EXPECT_TRUE(*served == a.payload) << len;
      EXPECT_EQ(served->view().data()[len], '\0');
      EXPECT_EQ(store->stats()->hits, hits_before) << "the entry was read again";
      auto got = store->get(a.passport.key);  // the control: a read of the entry counts a hit
      ASSERT_TRUE(got.has_value() && got->has_value());
      EXPECT_EQ(store->stats()->hits, hits_before + 1);

      auto twice = store->stage_payload(len, StagedAs::fill);
      ASSERT_TRUE(twice.has_value());
      ASSERT_TRUE(twice->write(bytes).has_value());
      auto again = twice->commit(a.passport);
      ASSERT_TRUE(again.has_value());
      EXPECT_EQ(*again, PutOutcome::already_present);
      auto dropped = twice->committed_payload();
      ASSERT_TRUE(dropped.has_value()) << dropped.error().describe();
      EXPECT_TRUE(*dropped == a.payload);
    }
    EXPECT_EQ(count_leftovers(dir.path() / "cache"), 0U);
  }
}

}  // namespace
}  // namespace kcache::test
