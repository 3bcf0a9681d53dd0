#include "deps/derivation_memo.hpp"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "deps/header_manifest.hpp"
#include "deps/header_scanner.hpp"
#include "kcache/compiler.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::jit {
namespace {

namespace fs = std::filesystem;

// A project on disk: `dir`/k.cu includes <h.h>, found in inc/ behind an
// empty earlier include directory early/.
struct Project {
  fs::path dir;
  CompileRequest request;
};

Project make_project(const fs::path& dir, const std::string& tag) {
  fs::create_directories(dir / "inc");
  fs::create_directories(dir / "early");
  test::write_file(dir / "inc" / "h.h", "#define VALUE_" + tag + " 1\n");
  Project p;
  p.dir = dir;
  p.request.backend = "nvrtc";
  p.request.name = "k.cu";  // relative: names resolve against the working directory
  p.request.source = "#include <h.h>\n__global__ void k_" + tag + "(int* p) { *p = 1; }\n";
  p.request.target_kind = "ptx";
  p.request.options = {"-arch=sm_90", "-Iearly", "-Iinc"};
  return p;
}

// Changes the working directory for the life of the object.
class InDirectory {
 public:
  explicit InDirectory(const fs::path& dir) : m_old(fs::current_path()) { fs::current_path(dir); }
  ~InDirectory() { fs::current_path(m_old); }
  InDirectory(const InDirectory&) = delete;
  InDirectory& operator=(const InDirectory&) = delete;

 private:
  fs::path m_old;
};

Key derive(const CompileRequest& r) {
  auto k = derive_key(r);
  EXPECT_TRUE(k) << k.error().describe();
  return k ? k->key() : Key{};
}

// The key a process that remembers nothing derives for `r` now.
Key derive_fresh(const CompileRequest& r) {
  forget_scan_memos();
  return derive(r);
}

bool remembered(const CompileRequest& r) {
  return DerivationMemo::instance().find(r, Toolkit::instance().generation()) != nullptr;
}

// Every way a remembered derivation can go stale, each on its own project so
// that one wait makes every file old enough to be trusted (identities younger
// than the racy window are never remembered): after each change the memo
// must not answer, and the key must be the one a fresh process derives.
TEST(DerivationMemo, ServesOnlyWhileEveryInputIsUnchanged) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  auto edit = make_project(tmp.path() / "edit", "edit");
  auto shadow = make_project(tmp.path() / "shadow", "shadow");
  auto removed = make_project(tmp.path() / "removed", "removed");
  auto symlinked = make_project(tmp.path() / "symlinked", "symlinked");
  auto touched = make_project(tmp.path() / "touched", "touched");
  auto moved = make_project(tmp.path() / "moved", "moved");
  // The same project in another directory, with another header.
  auto elsewhere = make_project(tmp.path() / "elsewhere", "moved");
  test::write_file(elsewhere.dir / "inc" / "h.h", "#define OTHER 2\n");
  test::write_file(tmp.path() / "other.h", "#define LINKED 3\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));  // past the racy window (2 s)

  std::map<const Project*, Key> before;
  for (const auto* p : {&edit, &shadow, &removed, &symlinked, &touched, &moved}) {
    InDirectory in(p->dir);
    before[p] = derive(p->request);
    EXPECT_TRUE(remembered(p->request)) << p->dir;
    EXPECT_EQ(derive(p->request), before[p]) << "served from the memo";
    // One option more is another request.
    auto other = p->request;
    other.options.push_back("-DEXTRA=1");
    EXPECT_FALSE(remembered(other));
  }

  test::write_file(edit.dir / "inc" / "h.h", "#define VALUE_edit 2\n");
  test::write_file(shadow.dir / "early" / "h.h", "#define SHADOW 1\n");
  fs::remove(removed.dir / "inc" / "h.h");
  fs::remove(symlinked.dir / "inc" / "h.h");
  fs::create_symlink(tmp.path() / "other.h", symlinked.dir / "inc" / "h.h");
  ASSERT_EQ(::utimensat(AT_FDCWD, (touched.dir / "inc" / "h.h").c_str(), nullptr, 0), 0);

  for (auto* p : {&edit, &shadow, &removed, &symlinked}) {
    InDirectory in(p->dir);
    EXPECT_FALSE(remembered(p->request)) << p->dir;
    const Key now = derive(p->request);
    EXPECT_NE(now, before[p]) << p->dir;
    EXPECT_EQ(now, derive_fresh(p->request)) << p->dir;
  }
  {
    InDirectory in(touched.dir);
    EXPECT_FALSE(remembered(touched.request)) << "a touched header is checked again";
    EXPECT_EQ(derive(touched.request), before[&touched]) << "same content, same key";
  }
  {
    // The same relative command line in another directory reads other headers.
    InDirectory in(elsewhere.dir);
    EXPECT_FALSE(remembered(moved.request));
    const Key there = derive(moved.request);
    EXPECT_NE(there, before[&moved]);
    EXPECT_EQ(there, derive_fresh(moved.request));
  }
  {
    InDirectory in(moved.dir);
    EXPECT_EQ(derive(moved.request), before[&moved]);
    ASSERT_TRUE(remembered(moved.request));
    // Reconfiguring the toolkit forgets every remembered derivation.
    Toolkit::instance().set_memo_dir(Toolkit::instance().memo_dir());
    EXPECT_FALSE(remembered(moved.request));
  }
}

// A directory that decided a header was absent changes (an unrelated file
// written there: a build's working directory): the remembered derivation
// still serves (its names hold) and is remembered with the directory's
// identity now, so the hits after check it by one stat; a header that
// appears there afterwards is still seen.
TEST(DerivationMemo, AChangedDirectoryWhoseNamesHoldIsTakenAsItIsNow) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  auto p = make_project(tmp.path() / "p", "refresh");
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));  // past the racy window (2 s)
  InDirectory in(p.dir);
  const Key before = derive(p.request);
  ASSERT_TRUE(remembered(p.request));
  const auto early_stamp = [](const Derivation& d) -> std::optional<FileStamp> {
    for (const auto& dir : d.checks->manifest->dirs) {
      if (dir.path.ends_with("early")) {
        return dir.stamp;
      }
    }
    return std::nullopt;
  };
  test::write_file(p.dir / "early" / "unrelated.txt", "x");
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  struct stat st {};
  ASSERT_EQ(::stat((p.dir / "early").c_str(), &st), 0);
  auto& memo = DerivationMemo::instance();
  const auto served = memo.find(p.request, Toolkit::instance().generation());
  ASSERT_NE(served, nullptr) << "its names hold: still served";
  ASSERT_TRUE(early_stamp(*served).has_value()) << "early/ decided that h.h was absent";
  EXPECT_TRUE(*early_stamp(*served) == stamp_of(st)) << "remembered with the directory's identity now";
  EXPECT_EQ(memo.find(p.request, Toolkit::instance().generation()), served) << "nothing more to refresh";
  EXPECT_EQ(derive(p.request), before) << "same headers, same key";
  test::write_file(p.dir / "early" / "h.h", "#define SHADOW 1\n");
  EXPECT_FALSE(remembered(p.request)) << "the header that appeared";
  const Key now = derive(p.request);
  EXPECT_NE(now, before);
  EXPECT_EQ(now, derive_fresh(p.request));
}

// A request whose output names the working directory (-lineinfo with a
// relative include path) keys the directory as NVRTC takes it ($PWD): the
// memo re-checks it, so a $PWD that names the same directory through another
// path gives that path's key.
TEST(DerivationMemo, RechecksTheWorkingDirectoryTheKeyHolds) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  auto p = make_project(tmp.path() / "real", "pwd");
  fs::create_directory_symlink(p.dir, tmp.path() / "link");
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  p.request.options.push_back("-lineinfo");
  InDirectory in(p.dir);
  const char* old_pwd = std::getenv("PWD");
  const std::string saved = old_pwd != nullptr ? old_pwd : "";
  ::setenv("PWD", p.dir.c_str(), 1);
  const Key real = derive(p.request);
  EXPECT_TRUE(remembered(p.request));
  ::setenv("PWD", (tmp.path() / "link").c_str(), 1);
  EXPECT_FALSE(remembered(p.request));
  const Key linked = derive(p.request);
  EXPECT_NE(linked, real);
  EXPECT_EQ(linked, derive_fresh(p.request));
  ::setenv("PWD", saved.c_str(), 1);
}

// Threads that derive, remember and forget at once all get the key a fresh
// process derives (run under the tsan preset too).
TEST(DerivationMemo, ThreadsDeriveTheSameKeysWhileOthersForget) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  auto a = make_project(tmp.path() / "a", "a");
  auto b = make_project(tmp.path() / "b", "b");
  // Absolute paths: the threads share one working directory.
  for (auto* p : {&a, &b}) {
    p->request.name = (p->dir / "k.cu").string();
    p->request.options = {"-arch=sm_90", "-I" + (p->dir / "early").string(), "-I" + (p->dir / "inc").string()};
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));  // old enough to be remembered
  const Key want_a = derive_fresh(a.request);
  const Key want_b = derive_fresh(b.request);
  ASSERT_TRUE(remembered(b.request));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const bool first = (i + t) % 2 == 0;
        auto k = derive_key(first ? a.request : b.request);
        if (!k || k->key() != (first ? want_a : want_b)) {
          wrong.fetch_add(1);
        }
        if (t == 0 && i % 50 == 0) {
          DerivationMemo::instance().clear();
        }
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace kcache::jit
