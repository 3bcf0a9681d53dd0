// The header manifest's text: its numbers and digests read exactly, a round trip, anything
// else refused, and what a lookup reads of it and judges by (deps/header_manifest.hpp,
// docs/keys.md).
#include "deps/header_manifest.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include "deps/memo_reader.hpp"
#include "support/temp_dir.hpp"
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
  // A doubt (only evidence decides: deps/name_directory.hpp) goes without "seen".
  auto doubted = m;
  doubted.name_directory_seen.clear();
  doubted.name_directory_doubt = "toolkit headers are reached, which are not scanned";
  const auto doubted_back = parse_manifest(serialize_manifest(doubted), k_input);
  ASSERT_TRUE(doubted_back);
  EXPECT_EQ(doubted_back->name_directory_doubt, doubted.name_directory_doubt);
  EXPECT_EQ(doubted_back->name_directory_seen, "");
  doubted.name_directory_seen = "both";
  EXPECT_FALSE(parse_manifest(serialize_manifest(doubted), k_input)) << "a doubt only without seen";
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
  ASSERT_EQ(text.rfind("kcache-header-manifest 5 ", 0), 0u);
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
  // Version 4 kept facts that now leave it to evidence ("doubt") as "seen": never read.
  write("kcache-header-manifest 4 " + text.substr(25));
  EXPECT_FALSE(load_manifest(memo, k_input, ManifestPart::lookup)) << "version 4";
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
}  // namespace
}  // namespace kcache::jit
