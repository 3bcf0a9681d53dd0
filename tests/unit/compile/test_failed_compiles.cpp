// Failed compiles kept as negative entries (docs/keys.md, "Failed compiles";
// passport/failed_compile.hpp): compile() and Cache::get_or_compile() store a
// compile NVRTC rejected under the key a success would have had and return
// the same error from it; a header that appears where the compile searched is
// a miss; an entry that does not decode, or a non-deterministic failure, is
// never served.
#include <gtest/gtest.h>

#include <filesystem>

#include "kcache/cache.hpp"
#include "kcache/compiler.hpp"
#include "kcache/file_store.hpp"
#include "kcache/program.hpp"
#include "kcache/request_stats.hpp"
#include "passport/failed_compile.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

const char* k_jitify_source =
    "#include \"widget.h\"\n"
    "__global__ void k(int* p) { *p = WIDGET; }\n"
    "#include <__JITIFY_STOP_COMPILATION>\n";

class FailedCompiles : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(m_dir.path() / "inc");
    test::write_file(m_dir.path() / "inc" / "widget.h", "#pragma once\n#define WIDGET 5\n");
  }

  // jitify's preprocessing compile: fails on the stop header, searched in inc/.
  Program jitify() const {
    Program p(k_jitify_source, "jitify.cu");
    p.add_option("-arch=compute_90").add_option("-I" + (m_dir.path() / "inc").string());
    return p;
  }

  fs::path dir() const { return m_dir.path(); }

 private:
  test::TempDir m_dir;
};

TEST_F(FailedCompiles, RejectedProgramIsStoredAndServedAsTheSameError) {
  KCACHE_REQUIRE_TOOLKIT();
  test::MapStore store;
  const Program program = jitify();
  CompileInfo first;
  auto a = program.compile(CompileTarget::ptx, &store, &first);
  ASSERT_FALSE(a);
  ASSERT_EQ(a.error().code, ErrorCode::compile_failed);
  ASSERT_NE(a.error().log.find("cannot open source file \"__JITIFY_STOP_COMPILATION\""), std::string::npos)
      << a.error().log;
  EXPECT_FALSE(first.hit);
  EXPECT_TRUE(first.stored);
  EXPECT_EQ(store.puts(), 1u);
  // Kept under the key a success would have had, as a failed-compile entry.
  const Key key = derive_key(program.request(CompileTarget::ptx))->key();
  EXPECT_EQ(first.key, key);
  auto stored = store.get(key);
  ASSERT_TRUE(stored && *stored);
  EXPECT_EQ((*stored)->passport.kind, k_failed_compile_kind);
  EXPECT_EQ((*stored)->passport.log, a.error().log);
  EXPECT_TRUE((*stored)->verify());

  CompileInfo second;
  auto b = program.compile(CompileTarget::ptx, &store, &second);
  ASSERT_FALSE(b);
  EXPECT_TRUE(second.hit);
  EXPECT_TRUE(second.served_failure);
  EXPECT_EQ(second.compile_us, 0u) << "NVRTC ran again";
  EXPECT_EQ(b.error().code, a.error().code);
  EXPECT_EQ(b.error().message, a.error().message);
  EXPECT_EQ(b.error().log, a.error().log);
  EXPECT_EQ(store.puts(), 1u);
}

TEST_F(FailedCompiles, HeaderThatAppearsInASearchedDirectoryIsAMiss) {
  KCACHE_REQUIRE_TOOLKIT();
  FileStoreOptions options;
  options.root = dir() / "cache";
  auto store = FileStore::open(options);
  ASSERT_TRUE(store) << store.error().describe();
  const Program program = jitify();
  ASSERT_FALSE(program.compile(CompileTarget::ptx, store->get()));
  CompileInfo served;
  ASSERT_FALSE(program.compile(CompileTarget::ptx, store->get(), &served));
  ASSERT_TRUE(served.served_failure);
  // The stop header appears in the -I directory: the compile now succeeds, and is no hit.
  test::write_file(dir() / "inc" / "__JITIFY_STOP_COMPILATION", "");
  CompileInfo info;
  auto a = program.compile(CompileTarget::ptx, store->get(), &info);
  ASSERT_TRUE(a) << a.error().describe() << "\n" << a.error().log;
  EXPECT_FALSE(info.hit);
  EXPECT_FALSE(info.served_failure);
  EXPECT_EQ(a->passport.kind, "ptx");
  EXPECT_NE(info.key, served.key);
}

TEST_F(FailedCompiles, CacheReturnsTheStoredFailureAndCountsItServed) {
  KCACHE_REQUIRE_TOOLKIT();
  test::MapStore store;
  Cache cache(store);
  const CompileRequest request = jitify().request(CompileTarget::ptx);
  auto a = cache.get_or_compile(request);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, ErrorCode::compile_failed);
  ASSERT_TRUE(Cache::last_request());
  EXPECT_EQ(Cache::last_request()->outcome, RequestOutcome::compiled);  // stored, with its log
  EXPECT_EQ(store.puts(), 1u);
  auto b = cache.get_or_compile(request);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code, a.error().code);
  EXPECT_EQ(b.error().message, a.error().message);
  EXPECT_EQ(b.error().log, a.error().log);
  EXPECT_EQ(Cache::last_request()->outcome, RequestOutcome::served_failure);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().compiles, 1u);
}

// A failure that is no verdict on the program (here: NVRTC refuses an option,
// NVRTC_ERROR_INVALID_OPTION, before compiling anything) is never stored.
TEST_F(FailedCompiles, FailureOtherThanARejectedProgramIsNotStored) {
  KCACHE_REQUIRE_TOOLKIT();
  test::MapStore store;
  Program program("__global__ void k(int* p) { *p = 1; }\n", "option.cu");
  program.add_option("-arch=sm_12");
  CompileInfo info;
  auto a = program.compile(CompileTarget::ptx, &store, &info);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, ErrorCode::compile_failed) << a.error().describe();
  EXPECT_NE(a.error().message.find("NVRTC_ERROR_INVALID_OPTION"), std::string::npos) << a.error().describe();
  EXPECT_FALSE(info.failed_entry.has_value());
  EXPECT_FALSE(info.stored);
  EXPECT_EQ(store.puts(), 0u);
}

// A negative entry whose payload does not decode, or one whose passport was
// edited to claim the kind of a success, is never served: the compile runs.
TEST_F(FailedCompiles, ForgedNegativeEntriesAreMisses) {
  KCACHE_REQUIRE_TOOLKIT();
  const Program program = jitify();
  const CompileRequest request = program.request(CompileTarget::ptx);
  auto kb = derive_key(request);
  ASSERT_TRUE(kb);
  {
    test::MapStore store;
    ASSERT_TRUE(store.put(Artifact::make(*kb, std::string(k_failed_compile_kind), Payload("KCFAIL01 not a record"))));
    CompileInfo info;
    auto a = compile(request, &store, &info);
    ASSERT_FALSE(a);
    EXPECT_FALSE(info.hit);
    EXPECT_GT(info.compile_us, 0u);
    EXPECT_NE(a.error().log.find("__JITIFY_STOP_COMPILATION"), std::string::npos) << a.error().log;
  }
  {
    // A real negative entry relabelled "ptx" (an edit its digest does not cover).
    test::MapStore store;
    Error e{ErrorCode::compile_failed, "message", "log"};
    Artifact forged = make_failed_compile(*kb, e, Producer{"nvrtc", "13.0"}, Target{}, 1);
    forged.passport.kind = "ptx";
    ASSERT_TRUE(store.put(forged));
    CompileInfo info;
    auto a = compile(request, &store, &info);
    ASSERT_FALSE(a) << "a negative entry was served as PTX";
    EXPECT_FALSE(info.hit);
    EXPECT_NE(a.error().log, "log");
  }
  {
    // Through the Cache: a negative entry that does not decode is a miss too.
    test::MapStore store;
    ASSERT_TRUE(store.put(Artifact::make(*kb, std::string(k_failed_compile_kind), Payload("garbage"))));
    Cache cache(store);
    auto a = cache.get_or_compile(request);
    ASSERT_FALSE(a);
    EXPECT_NE(a.error().log.find("__JITIFY_STOP_COMPILATION"), std::string::npos) << a.error().log;
    EXPECT_EQ(cache.stats().compiles, 1u);
  }
}

TEST(FailedCompileEntry, RoundTripsAndRefusesWhatIsNotOne) {
  KeyBuilder kb("nvrtc");
  kb.add("target_kind", "ptx");
  const Error e{ErrorCode::compile_failed, "NVRTC could not compile x.cu", std::string("log\0with a NUL", 14)};
  const Artifact a = make_failed_compile(kb, e, Producer{"nvrtc", "13.0"}, Target{"sm_90", ""}, 7);
  EXPECT_TRUE(a.verify());
  EXPECT_TRUE(check_entry_identity(a.passport.key, a.passport));
  auto back = failed_compile_error(a);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->code, e.code);
  EXPECT_EQ(back->message, e.message);
  EXPECT_EQ(back->log, e.log);
  auto served = served_or_failed(a);
  ASSERT_FALSE(served);
  EXPECT_EQ(served.error().log, e.log);
  // Every truncation and a byte too many are refused.
  const std::string bytes(a.payload.view());
  for (std::size_t n = 0; n <= bytes.size() + 1; ++n) {
    Artifact cut = a;
    cut.payload = Payload(n <= bytes.size() ? bytes.substr(0, n) : bytes + "x");
    EXPECT_EQ(failed_compile_error(cut).has_value(), n == bytes.size()) << n;
  }
  // Another error code is refused.
  Artifact other = make_failed_compile(kb, Error{ErrorCode::internal, "m", "l"}, {}, {}, 0);
  EXPECT_FALSE(failed_compile_error(other));
  // A blob cannot be a negative entry: its kind must be the record's.
  KeyBuilder blob(k_blob_domain);
  blob.add("kind", "ptx");
  blob.add_content("content", a.payload.view());
  Artifact b = Artifact::make(blob, std::string(k_failed_compile_kind), a.payload);
  EXPECT_FALSE(check_entry_identity(b.passport.key, b.passport));
}

}  // namespace
}  // namespace kcache
