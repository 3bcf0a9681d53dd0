// Bundles a hostile or careless user makes: sparse files with a lying
// header, FIFOs, devices and symlinks where a bundle or a key should be,
// passports with bytes after them, files changed in place while they are
// read, and bundles too large to hold in memory.
#include "bundle/bundle_file.hpp"
#include "bundle/bundle_format.hpp"
#include "bundle/bundle_store.hpp"
#include "kcache/blob.hpp"
#include "kcache/file_store.hpp"
#include "unit/bundle/bundle_test_util.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace kcache {
namespace {

using test::read_file;
using test::write_file;

class BundleHostile : public test::SignedBundleTest {};

// Runs `body` in a child process that must finish within `seconds` (a
// blocked open is SIGALRM); returns its exit status and its peak RSS (KiB).
std::pair<int, long> in_child(const std::function<int()>& body, unsigned seconds = 20) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(seconds);
    ::_exit(body());
  }
  int status = 0;
  struct rusage usage {};
  ::wait4(pid, &status, 0, &usage);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), usage.ru_maxrss};
}

// A file of `size` bytes with a valid header and trailer that claim
// `count` entries, and nothing else but holes (8 KiB on disk).
void sparse_bundle(const std::filesystem::path& file, std::uint64_t size, std::uint64_t count) {
  using namespace bundle; // NOLINT(google-build-using-namespace)
  std::string h(k_header_size, '\0');
  std::memcpy(h.data(), k_magic.data(), k_magic.size());
  store_u32(h.data() + k_header_version, 1);
  store_u32(h.data() + k_header_alignment, k_alignment);
  store_u64(h.data() + k_header_count, count);
  store_u64(h.data() + k_header_index_offset, k_header_size);
  store_u64(h.data() + k_header_file_size, size);
  store_u64(h.data() + k_header_trailer_offset, size - k_trailer_size);
  std::string t(k_trailer_size, '\0');
  std::memcpy(t.data(), k_trailer_magic.data(), k_trailer_magic.size());
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
  ASSERT_EQ(::pwrite(fd, h.data(), h.size(), 0), static_cast<ssize_t>(h.size()));
  ASSERT_EQ(::pwrite(fd, t.data(), t.size(), static_cast<off_t>(size - k_trailer_size)),
            static_cast<ssize_t>(t.size()));
  ::close(fd);
}

TEST_F(BundleHostile, ASparseFileWithALyingCountIsRefusedBeforeAnyAllocation) {
  const auto file = dir() / "sparse.kcb";
  for (const std::uint64_t gib : {1, 16, 64}) {
    const std::uint64_t size = gib << 30;
    // A count past what the file can hold, and one it could hold (16 Mi
    // records fit in 64 GiB) whose first record is a hole.
    for (const std::uint64_t count : {std::uint64_t{1} << 40, (size >> 12) / 2}) {
      sparse_bundle(file, size, count);
      const std::string what = std::to_string(gib) + " GiB, " + std::to_string(count) + " entries";
      const auto [rc, rss_kib] = in_child([&] {
        auto listed = inspect_bundle(file);
        auto verified = verify_bundle(file, trust);
        auto tier = bundle::BundleStore::open({file}, trust, ReadVerify::fast_when_unchanged, {});
        const std::string_view a = listed ? "" : bundle_refusal(listed.error());
        const std::string_view b = verified ? "" : bundle_refusal(verified.error());
        const bool huge = count > (size >> 12);
        const std::string_view want = huge ? "bad-header" : "bad-index";
        return a == want && b == want && tier->bundles_in_use() == 0 ? 0 : 1;
      });
      EXPECT_EQ(rc, 0) << what << ": not refused as expected (or it crashed: 134 is std::bad_alloc)";
      // One reserve of the claimed count would be gigabytes; a check of the
      // header and the first record needs nothing.
      EXPECT_LT(rss_kib, 64 * 1024) << what;
    }
  }
}

// mknod / mkfifo / a socket / a directory at `path`; false (with a message) when it cannot be made.
bool make_special(const std::filesystem::path& path, mode_t type) {
  ::unlink(path.c_str());
  if (type == S_IFSOCK) {
    const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    const bool ok = ::bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
    ::close(s);
    return ok;
  }
  if (type == S_IFDIR) {
    return ::mkdir(path.c_str(), 0700) == 0;
  }
  // /dev/zero's numbers: a reader that opened it and read would never end.
  return ::mknod(path.c_str(), type | 0600, type == S_IFCHR ? ::makedev(1, 5) : 0) == 0;
}

TEST_F(BundleHostile, AFifoDeviceSocketOrDirectoryIsRefusedWithoutBlockingAnyReader) {
  const std::vector<std::pair<mode_t, std::string>> kinds{
      {S_IFIFO, "a FIFO"}, {S_IFCHR, "a device"}, {S_IFSOCK, "a socket"}, {S_IFDIR, "a directory"}};
  for (const auto& [type, words] : kinds) {
    const auto path = dir() / ("special-" + std::to_string(type));
    if (!make_special(path, type)) {
      if (type == S_IFCHR) {
        GTEST_LOG_(INFO) << "skipped the device node: mknod needs CAP_MKNOD (" << std::strerror(errno) << ")";
        continue;
      }
      FAIL() << "cannot make " << words << " at " << path;
    }
    const std::string expect = path.string() + " is " + words + ", not a regular file";
    const auto [rc, rss] = in_child([&, expect = expect] {
      auto verified = verify_bundle(path, trust);
      auto listed = inspect_bundle(path);
      auto key = read_bundle_public_key(path);
      BundleCreateOptions sign{path};
      auto signed_by = create_bundle(dir() / "out.kcb", artifacts, sign);
      std::vector<std::string> warnings;
      auto tier = bundle::BundleStore::open({path}, trust, ReadVerify::fast_when_unchanged,
                                            [&](const std::string& w) { warnings.push_back(w); });
      int bad = 0;
      for (const auto* e : {&verified.error(), &listed.error(), &key.error(), &signed_by.error()}) {
        bad += (e->message.find(expect) == std::string::npos || e->code != ErrorCode::io) ? 1 : 0;
      }
      bad += (warnings.size() == 1 && warnings[0].find(expect) != std::string::npos) ? 0 : 1;
      return bad;
    });
    EXPECT_EQ(rc, 0) << words << ": " << (rc == 128 + SIGALRM ? "a reader blocked" : "wrong message or code")
                     << " (want \"" << expect << "\")";
    (void)rss;
  }
}

TEST_F(BundleHostile, ASymlinkedBundleAndKeyAreFollowedAndALoopIsNamed) {
  const auto current = dir() / "current.kcb";
  const auto pub = dir() / "trusted.pub";
  std::filesystem::create_symlink(bundle(), current);
  std::filesystem::create_symlink(key().string() + ".pub", pub);
  auto keys = read_bundle_public_keys({pub});
  ASSERT_TRUE(keys.has_value()) << keys.error().describe();
  auto info = verify_bundle(current, BundleTrust{*keys});
  ASSERT_TRUE(info.has_value()) << info.error().describe();
  EXPECT_EQ(info->entries.size(), 3U);
  const auto loop = dir() / "loop.kcb";
  std::filesystem::create_symlink(loop, loop);
  auto refused = verify_bundle(loop, trust);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().message, "bundle " + loop.string() + " is a loop of symbolic links");
  auto missing = verify_bundle(dir() / "gone.kcb", trust);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
  EXPECT_EQ(missing.error().message, "bundle " + (dir() / "gone.kcb").string() + " does not exist");
}

TEST_F(BundleHostile, TheRawWriterOfTheseTestsWritesWhatCreateBundleWrites) {
  std::vector<test::RawEntry> raw;
  for (const auto& a : artifacts) {
    raw.push_back(test::raw_entry(a));
  }
  std::sort(raw.begin(), raw.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  const auto file = dir() / "raw.kcb";
  test::write_raw_bundle(file, raw, key());
  EXPECT_EQ(read_file(file), read_file(bundle()));
}

TEST_F(BundleHostile, APassportHasExactlyOneEncodingEvenWhenResigned) {
  const std::vector<std::pair<std::string, std::function<void(std::string&)>>> edits{
      {"NUL and garbage after it", [](std::string& p) { p += std::string("\0GARBAGE", 8); }},
      {"a NUL after it", [](std::string& p) { p += '\0'; }},
      {"a space after it", [](std::string& p) { p += ' '; }},
      {"a newline before it", [](std::string& p) { p.insert(0, "\n"); }},
      {"indented", [](std::string& p) { p = nlohmann::json::parse(p).dump(2); }},
      {"an escaped letter", [](std::string& p) { p.replace(p.find("\"kind\":\"ptx\""), 12, "\"kind\":\"\\u0070tx\""); }},
  };
  for (const auto& [what, edit] : edits) {
    std::vector<test::RawEntry> raw;
    for (const auto& a : artifacts) {
      raw.push_back(test::raw_entry(a));
      if (a.passport.kind == "ptx") {
        edit(raw.back().passport);
      }
    }
    std::sort(raw.begin(), raw.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
    test::write_raw_bundle(bundle(), raw, key());
    for (auto result : {inspect_bundle(bundle()), verify_bundle(bundle(), trust)}) {
      ASSERT_FALSE(result.has_value()) << what << ": accepted";
      EXPECT_EQ(bundle_refusal(result.error()), "entry-mismatch") << what << ": " << result.error().message;
    }
  }
}

// Writes `byte` at `offset` of `file`, in place (the same inode, as `cp`
// over a bundle or a careless tool does).
void poke(const std::filesystem::path& file, std::uint64_t offset, char byte) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, &byte, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

TEST_F(BundleHostile, BytesChangedInPlaceAfterTheCheckAreNeverHandedOn) {
  auto file = bundle::BundleFile::open(bundle());
  ASSERT_TRUE(file.has_value()) << file.error().describe();
  std::size_t cubin = 0;
  for (std::size_t i = 0; i < (*file)->entries().size(); ++i) {
    cubin = (*file)->entries()[i].payload_size == 4096 ? i : cubin;
  }
  const auto& e = (*file)->entries()[cubin];
  ASSERT_TRUE((*file)->check_payload((*file)->entries()[cubin]).has_value());
  poke(bundle(), e.payload_offset + 17, 'X');
  std::string handed_on;
  auto copied = (*file)->copy_payload((*file)->entries()[cubin], [&](std::string_view chunk) -> Result<void> {
    handed_on += chunk;
    return {};
  });
  ASSERT_FALSE(copied.has_value()) << "changed bytes were copied as good";
  EXPECT_EQ(bundle_refusal(copied.error()), "payload-mismatch") << copied.error().message;

  // The bundle tier: a hit checked, then the file changed: kcache get's copy is refused.
  poke(bundle(), e.payload_offset + 17, 'c');
  std::vector<std::string> warnings;
  auto tier = bundle::BundleStore::open({bundle()}, trust, ReadVerify::fast_when_unchanged,
                                        [&](const std::string& w) { warnings.push_back(w); });
  auto hit = tier->get(e.key);
  ASSERT_TRUE(hit.has_value() && hit->has_value());
  poke(bundle(), e.payload_offset + 17, 'X');
  auto copy = tier->copy_payload(e.key, [](std::string_view) -> Result<void> { return {}; });
  ASSERT_FALSE(copy.has_value());
  EXPECT_EQ(bundle_refusal(copy.error()), "payload-mismatch");
  EXPECT_EQ(tier->bundles_in_use(), 0U) << "a bundle that changed under a read is not used again";

  // Installing copies what it hashes: with the byte changed, nothing is published.
  FileStoreOptions o;
  o.root = dir() / "cache";
  auto target = FileStore::open(o);
  ASSERT_TRUE(target.has_value());
  auto installed = install_bundle(bundle(), trust, **target);
  ASSERT_FALSE(installed.has_value());
  EXPECT_EQ(bundle_refusal(installed.error()), "payload-mismatch");
  EXPECT_TRUE((*target)->list()->empty());
}

TEST_F(BundleHostile, TruncatedWhileReadIsARefusalNotAFault) {
  auto file = bundle::BundleFile::open(bundle());
  ASSERT_TRUE(file.has_value());
  std::size_t cubin = 0;
  for (std::size_t i = 0; i < (*file)->entries().size(); ++i) {
    cubin = (*file)->entries()[i].payload_size == 4096 ? i : cubin;
  }
  ASSERT_EQ(::truncate(bundle().c_str(), static_cast<off_t>((*file)->entries()[cubin].payload_offset + 100)), 0);
  auto copied = (*file)->copy_payload((*file)->entries()[cubin], [](std::string_view) -> Result<void> { return {}; });
  ASSERT_FALSE(copied.has_value());
  EXPECT_EQ(bundle_refusal(copied.error()), "truncated") << copied.error().message;
  EXPECT_NE(copied.error().message.find("overwritten in place"), std::string::npos) << copied.error().message;
}

TEST_F(BundleHostile, InstallsRacingAnInPlaceWriterNeverLeaveADamagedEntry) {
  // One 4 MiB payload (a long copy), changed and changed back in place by
  // another process all the while.
  std::string big(4 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) {
    big[i] = static_cast<char>('a' + (i * 7) % 26);
  }
  auto a = make_blob("cubin", big);
  ASSERT_TRUE(a.has_value());
  const auto file = dir() / "big.kcb";
  ASSERT_TRUE(create_bundle(file, {*a}, BundleCreateOptions{key()}).has_value());
  auto opened = bundle::BundleFile::open(file);
  ASSERT_TRUE(opened.has_value());
  const std::uint64_t at = (*opened)->entries()[0].payload_offset + big.size() / 2;
  opened->reset();
  const pid_t writer = ::fork();
  if (writer == 0) {
    const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
    const char good = big[big.size() / 2];
    for (char c = 'X';; c = c == 'X' ? good : 'X') {
      (void)::pwrite(fd, &c, 1, static_cast<off_t>(at));
    }
  }
  int installed = 0;
  int refused = 0;
  for (int round = 0; round < 16; ++round) {
    FileStoreOptions o;
    o.root = dir() / ("cache-" + std::to_string(round));
    auto target = FileStore::open(o);
    ASSERT_TRUE(target.has_value());
    auto report = install_bundle(file, trust, **target);
    if (report) {
      ++installed;
    } else {
      ++refused;
      EXPECT_EQ(bundle_refusal(report.error()), "payload-mismatch") << report.error().message;
    }
    // Whatever the install said, what the cache holds is the exact payload or nothing.
    auto check = (*target)->verify(Repair::no);
    ASSERT_TRUE(check.has_value());
    EXPECT_EQ(check->entries_bad, 0U) << "round " << round << ": a damaged entry was installed";
    EXPECT_EQ(check->entries_ok, report ? 1U : 0U) << "round " << round;
    if (auto got = (*target)->get(a->passport.key); got && *got) {
      EXPECT_EQ((**got).payload.view(), big);
    }
  }
  ::kill(writer, SIGKILL);
  ::waitpid(writer, nullptr, 0);
  GTEST_LOG_(INFO) << installed << " installs completed, " << refused << " refused the changing bundle";
  EXPECT_GT(refused, 0) << "the writer never changed a byte under an install: the test proved nothing";
}

TEST_F(BundleHostile, VerifyAndInstallOfALargeBundleNeedFewMegabytes) {
  // 128 MiB of payload bytes on disk: verify and install read every one.
  const std::uint64_t size = std::uint64_t{128} << 20;
  auto passport = make_blob_passport("blob", size, test::sha256_of_repeated(size, true));
  ASSERT_TRUE(passport.has_value()) << passport.error().describe();
  const auto file = dir() / "large.kcb";
  test::write_raw_bundle(file, {test::RawEntry{passport->key, passport->to_json(), {}, 0, size}}, key());
  const std::string cli = KCACHE_CLI_PATH;
  const std::string pub = key().string() + ".pub";
  const auto run = [&](const std::string& args) {
    return in_child([&] {
      const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      ::dup2(null, STDOUT_FILENO);
      ::execl(cli.c_str(), cli.c_str(), "--cache-dir", (dir() / "cache").c_str(), "bundle", args.c_str(),
              file.c_str(), "--trust", pub.c_str(), static_cast<char*>(nullptr));
      return 127;
    }, 120);
  };
  const auto [vrc, verify_kib] = run("verify");
  ASSERT_EQ(vrc, 0);
  const auto [irc, install_kib] = run("install");
  ASSERT_EQ(irc, 0);
  GTEST_LOG_(INFO) << "peak RSS: verify " << verify_kib << " KiB, install " << install_kib << " KiB of a "
                   << (size >> 20) << " MiB payload";
  EXPECT_LT(verify_kib, 48 * 1024) << "verify held the payload in memory";
  EXPECT_LT(install_kib, 48 * 1024) << "install held the payload in memory";
}

} // namespace
} // namespace kcache
