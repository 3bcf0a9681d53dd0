// Memory stays bounded for any file size (issue 9, item 5): `kcache put`,
// `get`, `verify` and `compile` of large sparse files, each run as a child
// process whose peak resident set (the rusage wait4 reports for it, the figure
// getrusage(RUSAGE_CHILDREN) gives) must stay under 64 MiB, and whose output
// bytes are checked against the input.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "support/temp_dir.hpp"
#include "util/hex.hpp"
#include "util/sha256.hpp"

namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t k_large = 320ULL << 20;  // 5x the bound: memory that grew with the file would show
constexpr long k_max_rss_kib = 64 * 1024;

struct ChildRun {
  int rc = -1;
  long max_rss_kib = 0;
  std::string out;
  std::string err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A sparse file of `size` bytes: holes, with 4 KiB of distinct bytes at the
// start, in the middle and at the end, so a copy that loses or shifts bytes shows.
void make_sparse(const fs::path& p, std::uint64_t size) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
  for (const std::uint64_t at : {std::uint64_t{0}, size / 2 + 7, size - 4096}) {
    std::string mark(4096, '\0');
    for (std::size_t i = 0; i < mark.size(); ++i) {
      mark[i] = static_cast<char>((at + i * 31) & 0xff);
    }
    ASSERT_EQ(::pwrite(fd, mark.data(), mark.size(), static_cast<off_t>(at)), 4096);
  }
  ::close(fd);
}

// SHA-256 (hex) of a file, read in chunks.
std::string sha256_of(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << p;
  kcache::util::Sha256 sha;
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n <= 0) {
      break;
    }
    sha.update(buf.data(), static_cast<std::size_t>(n));
  }
  ::close(fd);
  const auto d = sha.finish();
  return kcache::util::to_hex(d.data(), d.size());
}

class LargeFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(m_dir.path() / "home");
    // No fsync: the test is about memory, and need not wait for the disk.
    m_env = {"HOME=" + (m_dir.path() / "home").string(), "PATH=/usr/bin:/bin",
             "KCACHE_DIR=" + (m_dir.path() / "cache").string(), "KCACHE_FSYNC=none"};
  }

  // Runs kcache with `args`, stdout to `stdout_file` (default: a file read
  // back into ChildRun::out), and reports its exit code and peak RSS.
  ChildRun kcache(const std::vector<std::string>& args, const fs::path& stdout_file = {}) {
    const fs::path out = stdout_file.empty() ? m_dir.path() / "stdout" : stdout_file;
    const fs::path err = m_dir.path() / "stderr";
    std::vector<std::string> argv_s{KCACHE_CLI_PATH};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : argv_s) {
      argv.push_back(s.data());
    }
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& s : m_env) {
      envp.push_back(s.data());
    }
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (o < 0 || e < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0 || ::chdir(m_dir.path().c_str()) != 0) {
        ::_exit(126);
      }
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ChildRun r;
    int status = 0;
    struct rusage usage {};
    EXPECT_EQ(::wait4(pid, &status, 0, &usage), pid);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.max_rss_kib = usage.ru_maxrss;
    if (stdout_file.empty()) {
      r.out = slurp(out);
    }
    r.err = slurp(err);
    return r;
  }

  kcache::test::TempDir m_dir;
  std::vector<std::string> m_env;
};

TEST_F(LargeFiles, PutGetVerifyOfALargeFileStayWithinBoundedMemory) {
  const fs::path in = m_dir.path() / "big.bin";
  make_sparse(in, k_large);
  const std::string want = sha256_of(in);

  const ChildRun put = kcache({"put", in.string(), "--kind", "engine"});
  ASSERT_EQ(put.rc, 0) << put.err;
  ASSERT_EQ(put.out.size(), 65U) << put.out;
  EXPECT_LT(put.max_rss_kib, k_max_rss_kib) << "put of a " << (k_large >> 20) << " MiB file";
  const std::string key = put.out.substr(0, 64);

  // The key is the blob key of the content, as for a file put from memory.
  const ChildRun again = kcache({"put", in.string(), "--kind", "engine", "--json"});
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_NE(again.out.find("\"already_present\""), std::string::npos) << again.out;

  const fs::path via_o = m_dir.path() / "out-o.bin";
  const ChildRun get_o = kcache({"get", key, "-o", via_o.string()});
  ASSERT_EQ(get_o.rc, 0) << get_o.err;
  EXPECT_LT(get_o.max_rss_kib, k_max_rss_kib) << "get -o";
  EXPECT_EQ(fs::file_size(via_o), k_large);
  EXPECT_EQ(sha256_of(via_o), want);
  fs::remove(via_o);

  const fs::path via_stdout = m_dir.path() / "out-stdout.bin";
  const ChildRun get_stdout = kcache({"get", key}, via_stdout);
  ASSERT_EQ(get_stdout.rc, 0) << get_stdout.err;
  EXPECT_LT(get_stdout.max_rss_kib, k_max_rss_kib) << "get to standard output";
  EXPECT_EQ(fs::file_size(via_stdout), k_large);
  EXPECT_EQ(sha256_of(via_stdout), want);
  fs::remove(via_stdout);

  const ChildRun show = kcache({"show", key});
  ASSERT_EQ(show.rc, 0) << show.err;
  EXPECT_LT(show.max_rss_kib, k_max_rss_kib) << "show";
  EXPECT_NE(show.out.find(want), std::string::npos) << "the passport names the payload's SHA-256";

  const ChildRun verify = kcache({"verify"});
  EXPECT_EQ(verify.rc, 0) << verify.out << verify.err;
  EXPECT_LT(verify.max_rss_kib, k_max_rss_kib) << "verify";
  EXPECT_NE(verify.out.find("1 ok"), std::string::npos) << verify.out;
}

TEST_F(LargeFiles, GetOfALargeEntryDamagedOnDiskWritesNothing) {
  const fs::path in = m_dir.path() / "big.bin";
  make_sparse(in, 64ULL << 20);
  const ChildRun put = kcache({"put", in.string()});
  ASSERT_EQ(put.rc, 0) << put.err;
  const std::string key = put.out.substr(0, 64);
  // Flip one byte deep inside the stored payload (never read before: the first
  // read checks SHA-256 in full).
  const fs::path payload = m_dir.path() / "cache" / "v1" / "entries" / key.substr(0, 2) / key;
  {
    const int fd = ::open(payload.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "x", 1, 40 << 20), 1);
    ::close(fd);
  }
  const fs::path out = m_dir.path() / "out.bin";
  const ChildRun get = kcache({"get", key, "-o", out.string()});
  EXPECT_EQ(get.rc, 3) << get.err;  // a damaged entry is a miss
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(payload)) << "the damaged entry is removed";
}

TEST_F(LargeFiles, CompileOfASourceLargerThanNvrtcTakesIsAClearErrorInBoundedMemory) {
  const fs::path src = m_dir.path() / "huge.cu";
  make_sparse(src, (2ULL << 30) + 4096);  // past the 2 GiB kcache gives NVRTC
  const fs::path out = m_dir.path() / "huge.cubin";
  const ChildRun r = kcache({"compile", src.string(), "--arch", "sm_90", "-o", out.string()});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("huge.cu"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the most kcache gives NVRTC"), std::string::npos) << r.err;
  EXPECT_LT(r.max_rss_kib, k_max_rss_kib);
  EXPECT_FALSE(fs::exists(out)) << "no output for a refused source";
}

TEST_F(LargeFiles, CompileOfASparseSourceIsRefusedAtItsFirstNulInBoundedMemory) {
  // 1 GiB of zeros (a size NVRTC takes) compiled to an empty cubin and exit 0.
  const fs::path src = m_dir.path() / "zeros.cu";
  make_sparse(src, 1ULL << 30);
  const fs::path out = m_dir.path() / "zeros.cubin";
  const ChildRun r = kcache({"compile", src.string(), "--arch", "sm_90", "-o", out.string()});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("zeros.cu holds a NUL byte at offset"), std::string::npos) << r.err;
  EXPECT_LT(r.max_rss_kib, k_max_rss_kib) << "refused at the first NUL, not after reading 1 GiB";
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(LargeFiles, CompileOfASourceWithANulByteIsRefusedNotCompiledEmpty) {
  // A kernel behind a NUL byte: NVRTC reads C strings and would compile only
  // what is before the NUL (nothing), giving an empty cubin and exit 0.
  const fs::path src = m_dir.path() / "nul.cu";
  {
    std::ofstream f(src, std::ios::binary);
    f << std::string(64, '\0') << "extern \"C\" __global__ void k(int* p) { *p = 1; }\n";
  }
  const fs::path out = m_dir.path() / "nul.cubin";
  const ChildRun r = kcache({"compile", src.string(), "--arch", "sm_90", "-o", out.string()});
  EXPECT_NE(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("NUL byte at offset 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nul.cu"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
