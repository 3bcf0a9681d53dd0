// Scans that reuse a manifest, and hits over header trees: a reused manifest sees every edit,
// a large tree keys as one digest, a family member's tree is checked once per compile and an
// edit since gives no stale hit nor a stale entry.
#include "deps/header_manifest.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>

#include "deps/header_scanner.hpp"
#include "kcache/compiler.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"
#include "util/hex.hpp"
#include "util/sha256.hpp"

namespace kcache::jit {
namespace {

namespace fs = std::filesystem;

const std::string k_input(64, 'a');

// A scan of `source` (which must outlive it) as `dir`/k.cu with include directory `inc`, its
// manifests under `dir`/memo.
ScanInput scan_input(const fs::path& dir, std::string_view source, const std::string& inc) {
  ScanInput in;
  in.source = source;
  in.program_name = (dir / "k.cu").string();
  in.include_dirs = {inc};
  in.memo_dir = dir / "memo";
  return in;
}

// A source that includes nothing, in a directory just written (the racy
// window): the next scan takes the manifest (its include directory has no
// names), also after the directory changed again; not once the include
// directory is another one.
TEST(HeaderScanner, AnIncludeDirectoryNothingWasLookedUpInDoesNotRescan) {
  test::TempDir tmp;
  const auto inc = (tmp.path() / "inc").string();
  fs::create_directories(inc);
  const ScanInput in = scan_input(tmp.path(), "extern \"C\" __global__ void k(int* p) { *p = 1; }\n", inc);
  auto first = scan_headers(in);
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->reused);
  forget_scan_memos();
  test::write_file(inc + "/k.ptx", "an output written beside");
  auto second = scan_headers(in);
  ASSERT_TRUE(second);
  EXPECT_TRUE(second->reused) << "within the racy window, after a change: the same directory";
  forget_scan_memos();
  fs::rename(inc, tmp.path() / "elsewhere");
  fs::create_directories(inc);
  auto third = scan_headers(in);
  ASSERT_TRUE(third);
  EXPECT_FALSE(third->reused) << "another directory: scanned again";
}

// A manifest that would record nothing (a source that includes nothing) is
// not written: the next scan reads the source alone and finds the same. A
// source with an include has its manifest.
TEST(HeaderScanner, ASourceThatIncludesNothingWritesNoManifest) {
  test::TempDir tmp;
  const auto inc = (tmp.path() / "inc").string();
  fs::create_directories(inc);
  test::write_file(inc + "/a.h", "#define A 1\n");
  const auto files_under = [](const fs::path& d) {
    std::size_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(d)) {
      n += e.is_regular_file() ? 1 : 0;
    }
    return n;
  };
  ScanInput bare = scan_input(tmp.path() / "bare", "extern \"C\" __global__ void k(int* p) { *p = 1; }\n", inc);
  bare.include_dirs.clear();  // an include directory is recorded (which one it is)
  fs::create_directories(bare.memo_dir);
  auto first = scan_headers(bare);
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->headers.empty());
  EXPECT_EQ(files_under(bare.memo_dir), 0u) << "nothing to remember";
  forget_scan_memos();
  auto again = scan_headers(bare);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->headers.empty());
  EXPECT_EQ(again->headers_list, first->headers_list);
  const ScanInput with = scan_input(tmp.path() / "with", "#include <a.h>\n", inc);
  fs::create_directories(with.memo_dir);
  ASSERT_TRUE(scan_headers(with));
  EXPECT_GE(files_under(with.memo_dir), 1u) << "a manifest for the source with an include";
}

TEST(HeaderScanner, SecondScanReusesTheManifestAndSeesAnEdit) {
  test::TempDir tmp;
  const auto inc = (tmp.path() / "inc").string();
  fs::create_directories(inc);
  test::write_file(inc + "/a.h", "#include \"b.h\"\n");
  test::write_file(inc + "/b.h", "#define B 1\n");
  const ScanInput in = scan_input(tmp.path(), "#include <a.h>\n", inc);
  auto first = scan_headers(in);
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->reused);
  ASSERT_EQ(first->headers.size(), 2u);
  forget_scan_memos();
  // Young files are never trusted: the second scan reads them again.
  auto second = scan_headers(in);
  ASSERT_TRUE(second);
  EXPECT_FALSE(second->reused);
  EXPECT_EQ(second->headers, first->headers);
  test::write_file(inc + "/b.h", "#define B 2\n");
  auto third = scan_headers(in);
  ASSERT_TRUE(third);
  EXPECT_NE(third->headers[1].sha256, first->headers[1].sha256);
}

// A kernel that includes 70 headers h0.h .. h69.h of `dir`/inc.
CompileRequest large_tree_request(const fs::path& dir) {
  const auto inc = (dir / "inc").string();
  fs::create_directories(inc);
  std::string all;
  for (int i = 0; i < 70; ++i) {
    test::write_file(inc + "/h" + std::to_string(i) + ".h", "#define H" + std::to_string(i) + " 1\n");
    all += "#include <h" + std::to_string(i) + ".h>\n";
  }
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = (dir / "k.cu").string();
  r.source = all + "__global__ void k(int* p) { *p = H0; }\n";
  r.target_kind = "ptx";
  r.options = {"-arch=sm_90", "-I" + inc};
  return r;
}

// More than 64 disk headers key as one digest over the list (a passport that
// grew by a field per header would be parsed on every hit); an edit to any of
// them still changes the key.
TEST(HeaderScanner, LargeHeaderTreeKeysAsOneDigestThatEveryHeaderChanges) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto inc = (tmp.path() / "inc").string();
  const CompileRequest r = large_tree_request(tmp.path());
  std::vector<HeaderDependency> headers;
  auto before = derive_key(r, &headers);
  ASSERT_TRUE(before) << before.error().describe();
  EXPECT_EQ(headers.size(), 70u);
  std::size_t per_header = 0;
  std::size_t lists = 0;
  for (const auto& f : before->record().fields) {
    per_header += f.name.rfind("disk_header:", 0) == 0 ? 1 : 0;
    lists += f.name == "disk_headers" ? 1 : 0;
  }
  EXPECT_EQ(per_header, 0u);
  EXPECT_EQ(lists, 1u);
  test::write_file(inc + "/h69.h", "#define H69 2\n");
  auto after = derive_key(r);
  ASSERT_TRUE(after);
  EXPECT_NE(after->key(), before->key());
}

// A hit keys the list with the digest its manifest remembers: the same key a
// scan that hashes the list gives, and never a stale one.
TEST(HeaderScanner, TheRememberedListDigestKeysAsTheHashedList) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto inc = (tmp.path() / "inc").string();
  const CompileRequest r = large_tree_request(tmp.path());
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));  // identities older than the racy window
  forget_scan_memos();
  auto scanned = derive_key(r);
  ASSERT_TRUE(scanned) << scanned.error().describe();
  // The digest as the key format defines it, hashed here independently:
  // per header its path's length (8 bytes), path and hex SHA-256, in path order.
  std::vector<HeaderDependency> headers;
  forget_scan_memos();
  auto hit = derive_key(r, &headers);  // the manifest from the memo directory
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->key(), scanned->key());
  ASSERT_EQ(headers.size(), 70u);
  util::Sha256 expected;
  for (const auto& h : headers) {
    const std::uint64_t n = h.path.size();
    expected.update(&n, sizeof n);
    expected.update(h.path);
    expected.update(h.sha256);
  }
  const auto want = expected.finish();
  std::size_t lists = 0;
  for (const auto& f : hit->record().fields) {
    if (f.name == "disk_headers") {
      ++lists;
      EXPECT_EQ(f.value, util::to_hex(want.data(), want.size()));
    }
  }
  EXPECT_EQ(lists, 1u);
  test::write_file(inc + "/h3.h", "#define H3 2\n");
  forget_scan_memos();
  auto edited = derive_key(r);
  ASSERT_TRUE(edited);
  EXPECT_NE(edited->key(), hit->key());
}

// The value the kernel of tree_request() stores (its PTX moves it into %r1); -1 when absent.
int stored_value(std::string_view ptx) {
  const std::string_view mov = "mov.u32 \t%r1, ";
  const auto at = ptx.find(mov);
  return at == std::string_view::npos ? -1 : std::atoi(std::string(ptx.substr(at + mov.size(), 8)).c_str());
}

// A kernel over `root`: <lib/h.h> from inc2 (inc1/lib exists without it),
// which includes "../lib2/g.h" and names an absent "../nothere/x.h", so the
// manifest records directories spelled with "..". `relinked`: inc2 is a
// symlink to `root`/real.
CompileRequest tree_request(const fs::path& root, bool relinked) {
  fs::create_directories(root / "inc1" / "lib");
  const fs::path inc2 = relinked ? root / "real" : root / "inc2";
  fs::create_directories(inc2 / "lib");
  fs::create_directories(inc2 / "lib2");
  test::write_file(inc2 / "lib" / "h.h", "#include \"../lib2/g.h\"\n#if 0\n#include \"../nothere/x.h\"\n#endif\n"
                                         "#define VALUE_H 1\n");
  test::write_file(inc2 / "lib2" / "g.h", "#define VALUE_G 2\n");
  if (relinked) {
    fs::create_directory_symlink(root / "real", root / "inc2");
  }
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = (root / "k.cu").string();
  r.source = "#include <lib/h.h>\nextern \"C\" __global__ void k(int* p) { *p = VALUE_H + VALUE_G; }\n";
  r.target_kind = "ptx";
  r.options = {"-arch=sm_90", "-I" + (root / "inc1").string(), "-I" + (root / "inc2").string()};
  return r;
}

// A hit over a header tree checks each header relative to its directory,
// each recorded directory relative to an opened one above it, and reads only
// the manifest's identity part. Whether the manifest comes from disk (a new
// process) or the derivation is remembered (the same process): a header
// edited in place, replaced, shadowed by a new one in an earlier include
// directory, or an include directory re-pointed is a miss that compiles the
// new bytes; a touched header is checked again and keys as before.
TEST(HeaderManifest, AHitOverATreeMissesOnEveryHeaderChange) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto saved = Toolkit::instance().memo_dir();
  Toolkit::instance().set_memo_dir(tmp.path() / "cache" / "v1" / "toolkit");
  enum class Change { edit, replace, shadow, relink, touch };
  struct Case {
    Change change;
    int value;  // after the change
    bool new_process;
    fs::path root;
    CompileRequest r;
    Key key;
  };
  std::vector<Case> cases;
  int n = 0;
  for (const bool new_process : {false, true}) {
    for (const auto& [change, value] : std::vector<std::pair<Change, int>>{
             {Change::edit, 6}, {Change::replace, 7}, {Change::shadow, 8}, {Change::relink, 9}, {Change::touch, 3}}) {
      const fs::path root = tmp.path() / ("t" + std::to_string(n++));
      cases.push_back({change, value, new_process, root, tree_request(root, change == Change::relink), {}});
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));  // identities older than the racy window
  test::MapStore store;
  for (auto& c : cases) {
    CompileInfo info;
    auto a = compile(c.r, &store, &info);
    ASSERT_TRUE(a) << a.error().describe() << "\n" << a.error().log;
    ASSERT_TRUE(info.cacheable) << info.not_cacheable_reason;
    EXPECT_FALSE(info.hit);
    EXPECT_EQ(stored_value(a->payload), 3);
    c.key = info.key;
  }
  forget_scan_memos();
  for (auto& c : cases) {
    CompileInfo info;
    auto a = compile(c.r, &store, &info);  // the manifests read from disk; remembered from here on
    ASSERT_TRUE(a);
    EXPECT_TRUE(info.hit) << c.root;
    // The hit reports the derivation's header list: the same headers, shared, not copied.
    std::vector<HeaderDependency> copied;
    HeaderList shared;
    ASSERT_TRUE(derive_key(c.r, &copied));
    ASSERT_TRUE(derive_key(c.r, &shared));
    ASSERT_EQ(copied.size(), 2u);
    EXPECT_TRUE(info.headers == copied);
    EXPECT_TRUE(shared == info.headers);
    EXPECT_EQ(&shared[0], &info.headers[0]) << "one list, shared by the derivation and the hit";
  }
  for (auto& c : cases) {
    const fs::path inc2 = c.root / "inc2";
    switch (c.change) {
      case Change::edit:  // in place: same inode, same size
        test::write_file(inc2 / "lib2" / "g.h", "#define VALUE_G 5\n");
        break;
      case Change::replace:
        test::write_file(inc2 / "lib2" / "g.new", "#define VALUE_G 6\n");
        fs::rename(inc2 / "lib2" / "g.new", inc2 / "lib2" / "g.h");
        break;
      case Change::shadow:
        test::write_file(c.root / "inc1" / "lib" / "h.h", "#define VALUE_H 8\n#define VALUE_G 0\n");
        break;
      case Change::relink:
        fs::copy(c.root / "real", c.root / "real2", fs::copy_options::recursive);
        test::write_file(c.root / "real2" / "lib2" / "g.h", "#define VALUE_G 8\n");
        fs::create_directory_symlink(c.root / "real2", c.root / "inc2.new");
        fs::rename(c.root / "inc2.new", inc2);
        break;
      case Change::touch:
        ASSERT_EQ(::utimensat(AT_FDCWD, (inc2 / "lib" / "h.h").c_str(), nullptr, 0), 0);
        break;
    }
  }
  for (const bool new_process : {false, true}) {
    if (new_process) {
      forget_scan_memos();
    }
    for (auto& c : cases) {
      if (c.new_process != new_process) {
        continue;
      }
      CompileInfo info;
      auto a = compile(c.r, &store, &info);
      ASSERT_TRUE(a) << a.error().describe();
      const bool same = c.change == Change::touch;
      EXPECT_EQ(info.hit, same) << c.root << (new_process ? " (new process)" : " (same process)");
      EXPECT_EQ(info.key == c.key, same) << c.root;
      EXPECT_EQ(stored_value(a->payload), c.value) << c.root;
    }
  }
  Toolkit::instance().set_memo_dir(saved);
}

// tree_request() as another kernel over the same tree: another source with
// the same includes (the same roots), so it takes the first one's result
// (deps/scan_inputs.hpp) and writes no manifest of its own.
CompileRequest variant(const CompileRequest& r, int n) {
  CompileRequest v = r;
  v.source += "// variant " + std::to_string(n) + "\n";
  return v;
}

// Another kernel over a tree a family member recorded is checked once per
// compile in a new process: after the lookup on a hit, after the compile on
// a miss (it used to be checked before the lookup and again after the
// compile). Counted with manifest_checks_run(): one pass over the manifest
// each.
TEST(HeaderManifest, AFamilyMembersTreeIsCheckedOncePerCompile) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto saved = Toolkit::instance().memo_dir();
  Toolkit::instance().set_memo_dir(tmp.path() / "cache" / "v1" / "toolkit");
  const CompileRequest r = tree_request(tmp.path() / "t", false);
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));  // identities older than the racy window
  test::MapStore store;
  CompileInfo info;
  ASSERT_TRUE(compile(r, &store, &info));
  ASSERT_TRUE(info.stored);

  forget_scan_memos();  // a new process
  auto before = manifest_checks_run();
  auto a = compile(variant(r, 2), &store, &info);
  ASSERT_TRUE(a) << a.error().describe();
  EXPECT_FALSE(info.hit);
  EXPECT_TRUE(info.stored) << info.not_cacheable_reason;
  EXPECT_EQ(stored_value(a->payload), 3);
  EXPECT_EQ(manifest_checks_run() - before, 1u) << "a miss checks the member's tree once, after the compile";

  forget_scan_memos();
  before = manifest_checks_run();
  auto hit = compile(variant(r, 2), &store, &info);
  ASSERT_TRUE(hit);
  EXPECT_TRUE(info.hit);
  EXPECT_EQ(hit->payload, a->payload);
  EXPECT_EQ(manifest_checks_run() - before, 1u) << "a hit checks it once, after the lookup";
  Toolkit::instance().set_memo_dir(saved);
}

// The member's tree taken unchecked can be out of date: a header edited since
// the member was recorded. Then a hit under the old key is never returned (it
// is checked, the key derived again and looked up again); a miss compiles the
// new bytes and is stored under the new tree's key when the edit is older
// than the racy window at the compile's start, and not stored at all when it
// (or any change to the tree, here a file added beside a header that is
// absent) is more recent: it may have happened while the compile ran.
TEST(HeaderManifest, AFamilyMembersTreeEditedSinceGivesNoStaleHitAndNoStaleEntry) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto saved = Toolkit::instance().memo_dir();
  Toolkit::instance().set_memo_dir(tmp.path() / "cache" / "v1" / "toolkit");
  const CompileRequest hit_tree = tree_request(tmp.path() / "hit", false);
  const CompileRequest old_edit = tree_request(tmp.path() / "old", false);
  const CompileRequest racy_edit = tree_request(tmp.path() / "racy", false);
  const CompileRequest racy_dir = tree_request(tmp.path() / "dir", false);
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  test::MapStore store;
  CompileInfo info;
  for (const auto* r : {&hit_tree, &old_edit, &racy_edit, &racy_dir}) {
    ASSERT_TRUE(compile(*r, &store, &info));
    ASSERT_TRUE(info.stored);
  }
  ASSERT_TRUE(compile(variant(hit_tree, 2), &store, &info));  // through the member
  ASSERT_TRUE(info.stored);
  const Key old_hit_key = info.key;
  const Key old_key = derive_key(variant(old_edit, 3))->key();
  for (const auto* r : {&hit_tree, &old_edit, &racy_edit, &racy_dir}) {
    test::write_file(fs::path(r->name).parent_path() / "inc2" / "lib2" / "g.h", "#define VALUE_G 5\n");
  }

  forget_scan_memos();
  auto racy = compile(variant(racy_edit, 3), &store, &info);
  ASSERT_TRUE(racy) << racy.error().describe();
  EXPECT_EQ(stored_value(racy->payload), 6) << "the new bytes";
  EXPECT_FALSE(info.cacheable);
  EXPECT_FALSE(info.stored);
  EXPECT_NE(info.not_cacheable_reason.find("a header changed"), std::string::npos) << info.not_cacheable_reason;

  forget_scan_memos();
  auto again = compile(variant(hit_tree, 2), &store, &info);
  ASSERT_TRUE(again) << again.error().describe();
  EXPECT_FALSE(info.hit) << "the entry under the old key is never returned";
  EXPECT_EQ(stored_value(again->payload), 6);
  EXPECT_NE(info.key, old_hit_key);
  EXPECT_TRUE(info.stored) << info.not_cacheable_reason;

  std::this_thread::sleep_for(std::chrono::milliseconds(2100));  // the edit is older than the racy window
  forget_scan_memos();
  const std::size_t puts = store.puts();
  auto old = compile(variant(old_edit, 3), &store, &info);
  ASSERT_TRUE(old) << old.error().describe();
  EXPECT_FALSE(info.hit);
  EXPECT_EQ(stored_value(old->payload), 6);
  EXPECT_TRUE(info.stored) << info.not_cacheable_reason;
  EXPECT_EQ(store.puts(), puts + 1);
  EXPECT_NE(info.key, old_key);
  EXPECT_EQ(old->passport.key, info.key);
  forget_scan_memos();
  EXPECT_EQ(derive_key(variant(old_edit, 3))->key(), info.key) << "stored under the key of the tree it read";
  EXPECT_FALSE(*store.get(old_key)) << "nothing under the old key";

  // inc1/lib decided that lib/h.h is absent there: changed just now.
  test::write_file(fs::path(racy_dir.name).parent_path() / "inc1" / "lib" / "notes.txt", "x\n");
  forget_scan_memos();
  auto dir = compile(variant(racy_dir, 3), &store, &info);
  ASSERT_TRUE(dir) << dir.error().describe();
  EXPECT_EQ(stored_value(dir->payload), 6);
  EXPECT_FALSE(info.stored) << "a directory of the tree changed less than the racy window before";
  EXPECT_NE(info.not_cacheable_reason.find("a header changed"), std::string::npos) << info.not_cacheable_reason;
  Toolkit::instance().set_memo_dir(saved);
}
}  // namespace
}  // namespace kcache::jit
