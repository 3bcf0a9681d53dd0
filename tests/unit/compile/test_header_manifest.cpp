#include "compile/header_manifest.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "compile/header_scanner.hpp"
#include "kcache/compiler.hpp"
#include "support/temp_dir.hpp"
#include "util/hex.hpp"
#include "util/sha256.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::jit {
namespace {

namespace fs = std::filesystem;

const std::string k_input(64, 'a');

HeaderManifest sample() {
  HeaderManifest m;
  m.input = k_input;
  ManifestHeader h;
  h.path = "inc/with space\nand newline.h";
  h.stamp = {1, 2, 3, 4, 5};
  h.sha256 = std::string(64, 'b');
  h.directives.includes = {{"a.h", true, false}, {"q.h", false, false}, {"M(x)", false, true}};
  h.directives.defines = {{"M", true, "x", "<x.h>"}, {"N", false, "", ""}};
  m.headers.push_back(h);
  m.dirs.push_back({"inc", {6, 7, 8, 9, 10}, {{"cuda", 'n'}, {"sub", 'x'}}});
  return m;
}

TEST(HeaderManifest, RoundTripsExactly) {
  const auto m = sample();
  const auto text = serialize_manifest(m);
  const auto back = parse_manifest(text, k_input);
  ASSERT_TRUE(back);
  EXPECT_EQ(serialize_manifest(*back), text);
  ASSERT_EQ(back->headers.size(), 1u);
  EXPECT_EQ(back->headers[0].path, m.headers[0].path);
  EXPECT_EQ(back->headers[0].directives.includes, m.headers[0].directives.includes);
  EXPECT_EQ(back->headers[0].directives.defines, m.headers[0].directives.defines);
  EXPECT_EQ(back->dirs[0].names, m.dirs[0].names);
  const auto lookup = parse_manifest(text, k_input, ManifestPart::lookup);
  ASSERT_TRUE(lookup);
  EXPECT_FALSE(lookup->has_details);
  EXPECT_TRUE(lookup->headers[0].directives.includes.empty());
}

TEST(HeaderManifest, AnythingElseIsRefused) {
  const auto text = serialize_manifest(sample());
  EXPECT_FALSE(parse_manifest(text, std::string(64, 'c'))) << "another input's manifest";
  for (std::size_t cut = 0; cut < text.size(); cut += 7) {
    EXPECT_FALSE(parse_manifest(text.substr(0, cut), k_input)) << "truncated at " << cut;
  }
  EXPECT_FALSE(parse_manifest(text + "x", k_input)) << "trailing bytes";
  std::string bad_hex = text;
  bad_hex.replace(bad_hex.find(std::string(64, 'b')), 1, "B");
  EXPECT_FALSE(parse_manifest(bad_hex, k_input)) << "uppercase digest";
  std::string bad_len = text;
  const std::string len = std::to_string(sample().headers[0].path.size()) + ":inc";
  bad_len.replace(bad_len.find(len), 2, "99");
  EXPECT_FALSE(parse_manifest(bad_len, k_input)) << "a length past the record";
  std::string unsorted = text;
  unsorted.replace(unsorted.find("n 4:cuda"), 8, "n 4:zzzz");
  EXPECT_FALSE(parse_manifest(unsorted, k_input)) << "directory names out of order";
  EXPECT_FALSE(parse_manifest(std::string(k_max_manifest_bytes + 1, 'x'), k_input)) << "too big";
}

// Untrusted input: every single-byte change parses to a manifest or to
// nothing, never past the text (run under ASan in the sanitizer preset).
TEST(HeaderManifest, EveryFlippedByteIsParsedSafely) {
  const auto text = serialize_manifest(sample());
  std::size_t refused = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    for (const char c : {'\0', '9', ':', '\n', '\xff'}) {
      std::string t = text;
      t[i] = c;
      if (!parse_manifest(t, k_input)) {
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, text.size()) << "most changes must be refused";
}

TEST(HeaderManifest, DirectoryStillAppliesWhileItsNamesStayAsTheyWere) {
  test::TempDir tmp;
  const auto dir = (tmp.path() / "d").string();
  fs::create_directories(dir + "/sub");
  HeaderManifest m;
  m.input = k_input;
  m.dirs.push_back({dir, {}, {{"h.h", 'n'}, {"sub", 'x'}}});  // a zero stamp never matches: names decide
  EXPECT_TRUE(manifest_still_applies(m));
  test::write_file(dir + "/unrelated.txt", "x");
  EXPECT_TRUE(manifest_still_applies(m)) << "an unrelated file";
  test::write_file(dir + "/h.h", "x");
  EXPECT_FALSE(manifest_still_applies(m)) << "a header that was absent appeared";
  fs::remove(dir + "/h.h");
  fs::remove(dir + "/sub");
  test::write_file(dir + "/sub", "now a file");
  EXPECT_FALSE(manifest_still_applies(m)) << "a directory became a regular file";
}

// A lookup copies the name records unparsed and reads a directory's own
// records only when its identity changed; they decide as a whole parse does.
TEST(HeaderManifest, ALookupJudgesAChangedDirectoryByItsOwnNames) {
  test::TempDir tmp;
  const auto d1 = (tmp.path() / "d1").string();
  const auto d2 = (tmp.path() / "d2").string();
  fs::create_directories(d1);
  fs::create_directories(d2);
  HeaderManifest m;
  m.input = k_input;
  m.dirs.push_back({d1, {}, {{"a.h", 'n'}, {"b.h", 'n'}}});  // zero stamps never match: names decide
  m.dirs.push_back({d2, {}, {{"c.h", 'n'}}});
  const auto text = serialize_manifest(m);
  auto lookup = parse_manifest(text, k_input, ManifestPart::lookup);
  ASSERT_TRUE(lookup);
  EXPECT_FALSE(lookup->has_details);
  EXPECT_TRUE(lookup->dirs[0].names.empty()) << "not parsed by a lookup";
  EXPECT_TRUE(manifest_still_applies(*lookup));
  test::write_file(d2 + "/a.h", "x");  // a name only d1 must lack
  EXPECT_TRUE(manifest_still_applies(*lookup));
  test::write_file(d2 + "/c.h", "x");
  EXPECT_FALSE(manifest_still_applies(*lookup)) << "d2's own name appeared";
  EXPECT_FALSE(manifest_still_applies(*parse_manifest(text, k_input)));
  // The ranges must tile the block in order.
  std::string shifted = text;
  const std::string range = " 0 " + std::to_string(text.find("n 3:c.h") - text.find("n 3:a.h")) + "\n";
  ASSERT_NE(shifted.find(range), std::string::npos);
  shifted.replace(shifted.find(range), range.size(), " 1 " + range.substr(3));
  EXPECT_FALSE(parse_manifest(shifted, k_input, ManifestPart::lookup));
  EXPECT_FALSE(parse_manifest(shifted, k_input));
}

TEST(HeaderScanner, SecondScanReusesTheManifestAndSeesAnEdit) {
  test::TempDir tmp;
  const auto inc = (tmp.path() / "inc").string();
  fs::create_directories(inc);
  test::write_file(inc + "/a.h", "#include \"b.h\"\n");
  test::write_file(inc + "/b.h", "#define B 1\n");
  ScanInput in;
  const std::string src = "#include <a.h>\n";
  in.source = src;
  in.program_name = (tmp.path() / "k.cu").string();
  in.include_dirs = {inc};
  in.memo_dir = tmp.path() / "memo";
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

}  // namespace
}  // namespace kcache::jit
