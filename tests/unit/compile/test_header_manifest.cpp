#include "compile/header_manifest.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>

#include "compile/header_scanner.hpp"
#include "compile/memo_reader.hpp"
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
  h.directives.names_main_file = true;
  m.headers.push_back(h);
  m.name_directory_seen = "the source uses __FILE__";
  m.file_macros = {"AT", "HERE"};
  m.dirs.push_back({"inc", {6, 7, 8, 9, 10}, {{"cuda", 'n'}, {"sub", 'x'}}});
  return m;
}

// The memo reader's numbers (eight digits at a time where it can): every
// canonical decimal reads back exactly, at every length and with a non-digit
// at every position; anything not canonical is refused.
TEST(HeaderManifest, MemoReaderReadsNumbersExactlyAsWritten) {
  std::vector<std::uint64_t> values = {0, 1, 9, 10, 12345678, 99999999, 100000000, 123456789012345678ULL,
                                       1764170000123456789ULL, 9999999999999999999ULL,
                                       std::numeric_limits<std::uint64_t>::max()};
  for (std::uint64_t v = 1; v < std::numeric_limits<std::uint64_t>::max() / 7; v = v * 7 + 3) {
    values.push_back(v);
  }
  // Without and with 24 bytes or more after the number (a manifest's line:
  // read with no loop), both ways.
  for (const std::string& tail : {std::string(), std::string(" ") + std::string(30, 'y')}) {
  for (const auto v : values) {
    const std::string text = std::to_string(v) + " x" + tail;
    MemoReader r(text);
    std::uint64_t got = 1;
    ASSERT_TRUE(r.num(got)) << text;
    EXPECT_EQ(got, v);
    EXPECT_TRUE(r.lit(" x"));
    EXPECT_EQ(r.pos(), text.size() - tail.size());
    // Cut short by a non-digit at every position: reads the digits before it.
    const std::string digits = std::to_string(v);
    for (std::size_t at = 1; at < digits.size(); ++at) {
      for (const char stop : {' ', '/', ':', 'a', '\0', '\xff'}) {
        std::string t = digits + tail;
        t[at] = stop;
        MemoReader c(t);
        std::uint64_t n = 0;
        const bool canonical = !(digits[0] == '0' && at > 1);
        EXPECT_EQ(c.num(n), canonical) << t;
        if (canonical) {
          EXPECT_EQ(n, std::stoull(digits.substr(0, at))) << t;
          EXPECT_EQ(c.pos(), at);
        }
      }
    }
  }
  for (const std::string bad : {"18446744073709551616", "99999999999999999999", "01", "0012345678", "", "x1", "-1",
                                "123456789012345678901234567890", "00"}) {
    const std::string t = bad + tail;
    MemoReader r(t);
    std::uint64_t n = 0;
    EXPECT_FALSE(r.num(n)) << bad;
  }
  for (const std::string ok : {"-9223372036854775808", "9223372036854775807", "-1", "-1234567890123456", "0"}) {
    const std::string t = ok + tail;
    MemoReader r(t);
    std::int64_t n = 0;
    EXPECT_TRUE(r.num(n)) << ok;
    EXPECT_EQ(r.pos(), ok.size());
    EXPECT_EQ(n, std::stoll(ok));
  }
  for (const std::string bad : {"9223372036854775808", "-9223372036854775809", "-", "-01", "9999999999999999999"}) {
    const std::string t = bad + tail;
    MemoReader r(t);
    std::int64_t n = 0;
    EXPECT_FALSE(r.num(n)) << bad;
  }
  for (const std::string over : {"4294967296", "4294967295"}) {  // a narrower type: its own limit
    const std::string t = over + tail;
    MemoReader r(t);
    std::uint32_t n = 0;
    EXPECT_EQ(r.num(n), over == "4294967295") << over;
  }
  }
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
  EXPECT_TRUE(back->headers[0].directives.names_main_file);
  EXPECT_EQ(back->name_directory_seen, m.name_directory_seen);
  EXPECT_EQ(back->file_macros, m.file_macros);
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

// A changed directory's names are judged by a lookup of each or by a
// listing; both give the recorded verdict in every case: absent, a regular
// file, a directory, a symbolic link to either, a dangling one.
TEST(HeaderManifest, ADirectorysNamesJudgeAlikeLookedUpOrListed) {
  test::TempDir tmp;
  const fs::path d = tmp.path() / "d";
  fs::create_directories(d);
  for (int i = 0; i < 40; ++i) {
    test::write_file((d / ("other" + std::to_string(i) + ".h")).string(), "x");  // unrelated entries
  }
  test::write_file((tmp.path() / "file").string(), "x");
  fs::create_directories(tmp.path() / "dir");
  const auto clear = [&] { fs::remove_all(d / "a"); };
  struct Case {
    const char* what;
    std::function<void()> make;
    bool n, x, f;  // the verdict for a recorded 'n', 'x', 'f'
  };
  const std::vector<Case> cases = {
      {"absent", [] {}, true, true, true},
      {"a regular file", [&] { test::write_file((d / "a").string(), "x"); }, false, false, true},
      {"a directory", [&] { fs::create_directories(d / "a"); }, false, true, false},
      {"a link to a file", [&] { fs::create_symlink(tmp.path() / "file", d / "a"); }, false, false, true},
      {"a link to a directory", [&] { fs::create_directory_symlink(tmp.path() / "dir", d / "a"); }, false, true, false},
      {"a dangling link", [&] { fs::create_symlink(tmp.path() / "nothing", d / "a"); }, false, true, true},
  };
  for (const auto& c : cases) {
    clear();
    c.make();
    for (const auto& [what, expected] : {std::pair{'n', c.n}, std::pair{'x', c.x}, std::pair{'f', c.f}}) {
      const std::vector<std::pair<std::string, char>> names = {{"0.h", 'n'}, {"a", what}, {"zz", 'x'}};
      EXPECT_EQ(names_still_apply(d.c_str(), names, NameCheck::each_name), expected) << c.what << ", " << what;
      EXPECT_EQ(names_still_apply(d.c_str(), names, NameCheck::listing), expected) << c.what << ", " << what;
    }
  }
  clear();
  for (const auto how : {NameCheck::each_name, NameCheck::listing}) {
    EXPECT_FALSE(names_still_apply(d.c_str(), {}, how)) << "no names decide nothing";
    EXPECT_FALSE(names_still_apply((d / "missing").c_str(), {{"a", 'n'}}, how)) << "no directory";
  }
}

// A check looks up the few names of a large changed directory (a build's
// working directory) instead of listing it, and lists a small one whose
// names are many; the verdicts are those above.
TEST(HeaderManifest, AChangedDirectoryIsListedOnlyWhereItsNamesAreMany) {
  test::TempDir tmp;
  const fs::path big = tmp.path() / "big";
  const fs::path small = tmp.path() / "small";
  fs::create_directories(big);
  fs::create_directories(small);
  for (int i = 0; i < 3000; ++i) {
    test::write_file((big / ("output" + std::to_string(i) + ".ptx")).string(), "x");
  }
  HeaderManifest m;
  m.input = k_input;
  m.dirs.push_back({big.string(), {}, {{"a.h", 'n'}, {"b.h", 'n'}}});  // zero stamps: the names decide
  std::vector<std::pair<std::string, char>> many;
  for (int i = 0; i < 400; ++i) {
    many.emplace_back("n" + std::to_string(1000 + i) + ".h", 'n');
  }
  m.dirs.push_back({small.string(), {}, many});
  auto listings = manifest_dir_listings();
  EXPECT_TRUE(manifest_still_applies(m));
  EXPECT_EQ(manifest_dir_listings() - listings, 1u) << "the small directory with 400 names is listed, the big one not";
  test::write_file((big / "b.h").string(), "x");
  EXPECT_FALSE(manifest_still_applies(m)) << "a name of the big directory appeared";
  fs::remove(big / "b.h");
  test::write_file((small / "n1399.h").string(), "x");
  EXPECT_FALSE(manifest_still_applies(m)) << "a name of the small directory appeared";
}

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

// A directory recorded with no names (nothing was looked up in it) stands
// for which directory the path names: it applies while that is the same
// directory, whatever is written in it or however recently, and not once
// the path names another directory, a file or nothing.
TEST(HeaderManifest, ADirectoryWithNoNamesAppliesWhileItIsTheSameDirectory) {
  test::TempDir tmp;
  const fs::path d = tmp.path() / "inc";
  fs::create_directories(d);
  struct stat st {};
  ASSERT_EQ(::stat(d.c_str(), &st), 0);
  HeaderManifest m;
  m.input = k_input;
  m.dirs.push_back({d.string(), stamp_of(st), {}});
  EXPECT_TRUE(manifest_still_applies(m));
  test::write_file((d / "output.ptx").string(), "x");  // its identity changes
  EXPECT_TRUE(manifest_still_applies(m)) << "its content decides nothing";
  m.dirs[0].stamp = FileStamp{m.dirs[0].stamp.dev, m.dirs[0].stamp.ino, 0, 0, 0};  // as a racy one is recorded
  EXPECT_TRUE(manifest_still_applies(m));
  EXPECT_TRUE(manifest_still_applies(*parse_manifest(serialize_manifest(m), k_input, ManifestPart::lookup)));
  fs::rename(d, tmp.path() / "old");
  fs::create_directories(d);
  EXPECT_FALSE(manifest_still_applies(m)) << "another directory at the path";
  fs::remove(d);
  fs::create_directory_symlink(tmp.path() / "old", d);
  EXPECT_TRUE(manifest_still_applies(m)) << "a symbolic link to the same directory resolves as the compiler's open does";
  fs::remove(d);
  EXPECT_FALSE(manifest_still_applies(m)) << "no directory";
  test::write_file(d.string(), "x");
  EXPECT_FALSE(manifest_still_applies(m)) << "a file";
  m.dirs[0].stamp = FileStamp{};
  fs::remove(d);
  fs::create_directories(d);
  EXPECT_FALSE(manifest_still_applies(m)) << "an all-zero stamp (older manifests) never matches";
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

// A lookup copies the name records unparsed and reads a directory's own
// records only when its identity changed; they decide as a whole parse does.
// Directories `tmp`/d1 (must lack a.h and b.h) and `tmp`/d2 (must lack c.h),
// both with zero stamps, which never match: their names decide.
HeaderManifest two_changed_directories(const fs::path& tmp) {
  fs::create_directories(tmp / "d1");
  fs::create_directories(tmp / "d2");
  HeaderManifest m;
  m.input = k_input;
  m.dirs.push_back({(tmp / "d1").string(), {}, {{"a.h", 'n'}, {"b.h", 'n'}}});
  m.dirs.push_back({(tmp / "d2").string(), {}, {{"c.h", 'n'}}});
  return m;
}

TEST(HeaderManifest, ALookupJudgesAChangedDirectoryByItsOwnNames) {
  test::TempDir tmp;
  const auto d2 = (tmp.path() / "d2").string();
  const HeaderManifest m = two_changed_directories(tmp.path());
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

// A lookup reads the first line, then exactly the identity part its count
// names: the facts after it are not read (a rescan reads them, strictly).
TEST(HeaderManifest, ALookupReadsOnlyTheIdentityPartItsFirstLineCounts) {
  test::TempDir tmp;
  const fs::path memo = tmp.path() / "memo";
  const std::string text = serialize_manifest(sample());
  ASSERT_EQ(text.rfind("kcache-header-manifest 4 ", 0), 0u);
  fs::create_directories(memo / k_input.substr(0, 2));
  const auto write = [&](const std::string& t) { test::write_file(memo / k_input.substr(0, 2) / k_input, t); };
  write(text);
  ASSERT_TRUE(load_manifest(memo, k_input, ManifestPart::lookup));
  ASSERT_TRUE(load_manifest(memo, k_input, ManifestPart::with_details));
  const std::size_t facts = text.find("details\n") + 8;
  std::string damaged_facts = text;
  damaged_facts[facts] = 'X';  // "fact" -> "Xact"
  write(damaged_facts);
  const auto lookup = load_manifest(memo, k_input, ManifestPart::lookup);
  ASSERT_TRUE(lookup) << "the facts are not read by a lookup";
  EXPECT_EQ(lookup->headers.size(), 1u);
  EXPECT_FALSE(load_manifest(memo, k_input, ManifestPart::with_details)) << "a rescan reads them strictly";
  write(text.substr(0, facts));
  EXPECT_FALSE(load_manifest(memo, k_input, ManifestPart::lookup)) << "nothing after the identity part";
  const std::size_t nl = text.find('\n');
  const std::string count = text.substr(25, nl - 25);
  for (const std::string& other : std::vector<std::string>{std::to_string(std::stoul(count) + 1),
                                                           std::to_string(std::stoul(count) - 1), "0", "+" + count,
                                                           "0" + count}) {
    const std::string t = text.substr(0, 25) + other + text.substr(nl);
    write(t);
    EXPECT_FALSE(load_manifest(memo, k_input, ManifestPart::lookup)) << other;
    EXPECT_FALSE(parse_manifest(t, k_input, ManifestPart::lookup)) << other;
    EXPECT_FALSE(parse_manifest(t, k_input)) << other;
  }
  std::string version2 = text;
  version2.replace(0, nl + 1, "kcache-header-manifest 2\n");
  write(version2);
  EXPECT_FALSE(load_manifest(memo, k_input, ManifestPart::lookup)) << "an older format";
  EXPECT_FALSE(load_manifest(memo, k_input, ManifestPart::with_details)) << "an older format";
  // Version 3 knew nothing of the program name's directory: never read.
  write("kcache-header-manifest 3 " + text.substr(25));
  EXPECT_FALSE(load_manifest(memo, k_input, ManifestPart::lookup)) << "version 3";
  // A lookup keeps the names where it read them: a changed directory is
  // judged by its own records, found at their offset in that buffer.
  const auto d2 = (tmp.path() / "d2").string();
  write(serialize_manifest(two_changed_directories(tmp.path())));
  const auto read = load_manifest(memo, k_input, ManifestPart::lookup);
  ASSERT_TRUE(read);
  EXPECT_TRUE(manifest_still_applies(*read));
  test::write_file(d2 + "/a.h", "x");  // a name only d1 must lack
  EXPECT_TRUE(manifest_still_applies(*read));
  test::write_file(d2 + "/c.h", "x");
  EXPECT_FALSE(manifest_still_applies(*read)) << "d2's own name appeared";
}

// An identity part longer than the first read (64 KiB): the rest is read
// after it, into one buffer that the lookup keeps (not zero-filled, never
// copied); a copy of the manifest shares it, and a cut short file is refused.
TEST(HeaderManifest, ALookupPastTheFirstReadKeepsItsNamesWhereTheyWereRead) {
  test::TempDir tmp;
  const fs::path memo = tmp.path() / "memo";
  HeaderManifest m = two_changed_directories(tmp.path());
  m.dirs[0].names.clear();
  for (int i = 0; i < 6000; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "n%05d.h", i);
    m.dirs[0].names.emplace_back(name, 'n');
  }
  const std::string text = serialize_manifest(m);
  ASSERT_GT(text.find("details\n"), std::size_t{64} << 10);
  fs::create_directories(memo / k_input.substr(0, 2));
  const fs::path file = memo / k_input.substr(0, 2) / k_input;
  test::write_file(file, text);
  std::optional<HeaderManifest> copy;
  {
    auto read = load_manifest(memo, k_input, ManifestPart::lookup);
    ASSERT_TRUE(read);
    EXPECT_EQ(read->dirs.size(), 2u);
    copy = *read;  // shares the text read; the original goes away
  }
  EXPECT_TRUE(manifest_still_applies(*copy));
  test::write_file(tmp.path() / "d2" / "n00001.h", "x");  // a name only d1 must lack
  EXPECT_TRUE(manifest_still_applies(*copy));
  test::write_file(tmp.path() / "d2" / "c.h", "x");
  EXPECT_FALSE(manifest_still_applies(*copy)) << "d2's own name, found past the first 64 KiB";
  fs::remove(tmp.path() / "d2" / "c.h");
  test::write_file(tmp.path() / "d1" / "n05999.h", "x");
  EXPECT_FALSE(manifest_still_applies(*copy)) << "d1's last name";
  for (const std::size_t cut : {std::size_t{64} << 10, text.find("details\n"), text.find("details\n") + 8}) {
    test::write_file(file, text.substr(0, cut));
    EXPECT_FALSE(load_manifest(memo, k_input, ManifestPart::lookup)) << cut;
  }
}

// Digests are judged eight bytes at a time: exactly 64 lowercase hex digits
// are taken, any other byte at any position is refused.
TEST(HeaderManifest, MemoReaderTakesOnlyLowercaseHexDigests) {
  const std::string good = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  for (std::size_t at = 0; at < 64; ++at) {
    for (int b = 0; b < 256; ++b) {
      std::string t = good;
      t[at] = static_cast<char>(b);
      MemoReader r(t);
      std::string got;
      const bool hex = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f');
      ASSERT_EQ(r.hex64(got), hex) << at << " " << b;
      if (hex) {
        EXPECT_EQ(got, t);
        EXPECT_TRUE(r.at_end());
      }
    }
  }
  MemoReader shorter(std::string_view(good).substr(0, 63));
  std::string got;
  EXPECT_FALSE(shorter.hex64(got));
}

// Directories are resolved from an opened directory above them as the kernel
// resolves the whole path: "link/.." is the symlink target's parent, never
// the lexical one.
TEST(HeaderManifest, ADirectoryBelowAnOpenedOneResolvesAsItsWholePath) {
  test::TempDir tmp;
  const std::string a = (tmp.path() / "a").string();
  const std::string b = (tmp.path() / "b").string();
  fs::create_directories(a + "/real");
  fs::create_directories(b + "/inner");
  fs::create_directory_symlink(b + "/inner", a + "/link");
  test::write_file(a + "/real/h.h", "#define H 1\n");
  auto stamp = [](const std::string& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return stamp_of(st);
  };
  HeaderManifest m;
  m.input = k_input;
  m.headers.push_back({a + "/real/h.h", stamp(a + "/real/h.h"), std::string(64, 'b'), {}});
  m.dirs.push_back({a, stamp(a), {{"y.h", 'n'}}});
  m.dirs.push_back({a + "/link", stamp(a + "/link"), {{"y.h", 'n'}}});
  m.dirs.push_back({a + "/link/..", stamp(b), {{"x.h", 'n'}}});
  m.dirs.push_back({a + "/real", stamp(a + "/real"), {{"y.h", 'n'}}});
  const auto lookup = parse_manifest(serialize_manifest(m), k_input, ManifestPart::lookup);
  ASSERT_TRUE(lookup);
  EXPECT_TRUE(manifest_still_applies(m));
  EXPECT_TRUE(manifest_still_applies(*lookup));
  test::write_file(a + "/x.h", "x");  // beside the lexical parent of "link/..": not the one recorded
  EXPECT_TRUE(manifest_still_applies(m));
  EXPECT_TRUE(manifest_still_applies(*lookup));
  test::write_file(b + "/x.h", "x");  // in the physical one
  EXPECT_FALSE(manifest_still_applies(m));
  EXPECT_FALSE(manifest_still_applies(*lookup));
  fs::remove(b + "/x.h");
  EXPECT_TRUE(manifest_still_applies(*lookup));
  const std::vector<bool> trusted{false, false, true, false};
  test::write_file(b + "/x.h", "x");
  EXPECT_TRUE(manifest_still_applies(*lookup, &trusted)) << "a trusted directory is not checked";
  test::write_file(a + "/real/h.h", "#define H 2\n");
  EXPECT_FALSE(manifest_still_applies(*lookup, &trusted)) << "its headers still are";
}

// "X/.." where X is a real directory is the directory X was opened from: a
// check answers it with the stat it took of that one (CuPy's tree records
// half its directories so), and still resolves it physically once X is a
// symbolic link.
TEST(HeaderManifest, ADotDotBelowARealDirectoryCostsNoStatOfItsOwn) {
  test::TempDir tmp;
  const std::string inc = (tmp.path() / "inc").string();
  const std::string elsewhere = (tmp.path() / "elsewhere").string();
  constexpr int k = 8;
  auto stamp = [](const std::string& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return stamp_of(st);
  };
  for (int i = 0; i < k; ++i) {
    fs::create_directories(inc + "/x" + std::to_string(i));
    test::write_file(inc + "/x" + std::to_string(i) + "/h.h", "#define H 1\n");
  }
  fs::create_directories(elsewhere + "/inner");
  HeaderManifest m;
  m.input = k_input;
  m.dirs.push_back({inc, stamp(inc), {{"y.h", 'n'}}});
  for (int i = 0; i < k; ++i) {
    const std::string x = inc + "/x" + std::to_string(i);
    m.headers.push_back({x + "/h.h", stamp(x + "/h.h"), std::string(64, 'b'), {}});
    m.dirs.push_back({x, stamp(x), {{"y.h", 'n'}}});
    m.dirs.push_back({x + "/..", stamp(inc), {{"nothere", 'n'}}});
  }
  const auto lookup = parse_manifest(serialize_manifest(m), k_input, ManifestPart::lookup);
  ASSERT_TRUE(lookup);
  const auto before = manifest_check_calls();
  EXPECT_TRUE(manifest_still_applies(*lookup));
  // inc: an open and a stat; each x: an open, a stat, its header's stat, and
  // nothing for "x/..", where a stat each made it 4 per x.
  EXPECT_EQ(manifest_check_calls() - before, 2u + 3u * k);

  // x0 becomes a symbolic link to a directory whose parent holds "nothere":
  // inc changed, and "x0/.." is that parent, checked as such.
  fs::rename(inc + "/x0", elsewhere + "/inner/x0");
  fs::create_directory_symlink(elsewhere + "/inner/x0", inc + "/x0");
  EXPECT_TRUE(manifest_still_applies(*lookup)) << "same names, same header identities";
  fs::create_directories(elsewhere + "/inner/nothere");
  EXPECT_FALSE(manifest_still_applies(*lookup)) << "x0/.. resolves through the link";
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
// (compile/scan_inputs.hpp) and writes no manifest of its own.
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
