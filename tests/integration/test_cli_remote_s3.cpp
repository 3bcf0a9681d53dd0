// S3 remotes end to end: one real SeaweedFS (`weed mini`, an S3 gateway over
// a real object store) per suite, on 127.0.0.1, with its own identities
// (tests/support/seaweedfs_server.hpp), and real `kcache` processes with
// their own cache directories as the "hosts" that share it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "integration/cli_shell.hpp"
#include "store/remote/remote_spec.hpp"
#include "kcache/file_store.hpp"
#include "store/remote/remote_store.hpp"
#include "store/remote/s3_backend.hpp"
#include "store/remote/team_key.hpp"
#include "support/misbehaving_server.hpp"
#include "support/redis_server.hpp"
#include "support/seaweedfs_server.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::size_t warnings(const std::string& err) {
  std::size_t n = 0;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    n += line.rfind("kcache: warning:", 0) == 0 ? 1 : 0;
  }
  return n;
}

// The suite's credentials in this process's environment while it lives (for
// the backends a test makes itself; `kcache` processes get them on their
// command line).
class CredentialsInEnvironment {
 public:
  CredentialsInEnvironment() {
    ::setenv("AWS_ACCESS_KEY_ID", SeaweedfsServer::k_access_key, 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", SeaweedfsServer::k_secret_key, 1);
  }
  ~CredentialsInEnvironment() {
    ::unsetenv("AWS_ACCESS_KEY_ID");
    ::unsetenv("AWS_SECRET_ACCESS_KEY");
  }
  CredentialsInEnvironment(const CredentialsInEnvironment&) = delete;
  CredentialsInEnvironment& operator=(const CredentialsInEnvironment&) = delete;
};

bool required() {
  const char* v = std::getenv("KCACHE_REQUIRE_TOOLKIT");
  return v != nullptr && std::string(v) == "1";
}

class CliRemoteS3 : public CliShell {
 protected:
  // One server for the suite: it takes about 1.5 s to start.
  static void SetUpTestSuite() {
    s_dir = std::make_unique<TempDir>();
    s_server = SeaweedfsServer::start(s_dir->path() / "weed", &s_why);
  }
  static void TearDownTestSuite() {
    s_server.reset();
    s_dir.reset();
  }
  void SetUp() override {
    CliShell::SetUp();
    if (s_server == nullptr) {
      if (required()) {
        FAIL() << "KCACHE_REQUIRE_TOOLKIT=1 but SeaweedFS cannot run: " << s_why;
      }
      GTEST_SKIP() << "no SeaweedFS: " << s_why;
    }
    // A prefix per test: tests share the bucket, never a key.
    m_prefix = std::string("t-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  // KCACHE_REMOTE for this test's prefix, with extra attributes.
  std::string remote(const std::string& attrs = {}, const std::string& bucket = SeaweedfsServer::k_bucket) const {
    return "KCACHE_REMOTE='" + s_server->url(m_prefix, bucket) + attrs + "' ";
  }
  static std::string creds() { return SeaweedfsServer::env(); }

  static std::unique_ptr<TempDir> s_dir;
  static std::unique_ptr<SeaweedfsServer> s_server;
  static std::string s_why;
  std::string m_prefix;
};

std::unique_ptr<TempDir> CliRemoteS3::s_dir;
std::unique_ptr<SeaweedfsServer> CliRemoteS3::s_server;
std::string CliRemoteS3::s_why;

TEST_F(CliRemoteS3, ASecondHostGetsTheEntryByteForByteAndLsRmWork) {
  const ShellRun ping = sh(creds() + remote() + "\"$K\" remote ping");
  ASSERT_EQ(ping.rc, 0) << ping.out << ping.err;
  EXPECT_NE(ping.out.find("SeaweedFS"), std::string::npos) << ping.out;
  EXPECT_NE(ping.out.find("write: ok"), std::string::npos) << ping.out;
  EXPECT_EQ(ping.out.find(SeaweedfsServer::k_secret_key), std::string::npos) << "never the secret";

  const std::string key = put("blob", "an entry through S3");
  const ShellRun push = sh(creds() + remote() + "\"$K\" push " + key);
  ASSERT_EQ(push.rc, 0) << push.out << push.err;
  EXPECT_NE(push.out.find("uploaded 1"), std::string::npos) << push.out;
  // Uploads never replace an object: a second push finds it there.
  const ShellRun again = sh(creds() + remote() + "\"$K\" push " + key);
  EXPECT_NE(again.out.find("already present 1"), std::string::npos) << again.out << again.err;

  // The object is <prefix>/kcache/v1/<key> in the bucket.
  auto spec = remote::parse_remote_url(s_server->url(m_prefix) + "&anonymous=true");
  ASSERT_TRUE(spec);
  EXPECT_EQ(remote::S3Backend(*spec).object_key("kcache:v1:" + key), m_prefix + "/kcache/v1/" + key);

  const std::string other = "KCACHE_DIR='" + (root() / "other").string() + "' " + creds() + remote();
  const ShellRun pull = sh(other + "\"$K\" pull " + key + " && \"$K\" get " + key + " -o got");
  ASSERT_EQ(pull.rc, 0) << pull.out << pull.err;
  EXPECT_EQ(read_file(dir() / "got"), "an entry through S3");

  const ShellRun ls = sh(creds() + remote() + "\"$K\" remote ls");
  EXPECT_EQ(ls.rc, 0) << ls.err;
  EXPECT_EQ(ls.out, key + "\n");
  EXPECT_EQ(sh(creds() + remote() + "\"$K\" remote rm " + key).rc, 0);
  EXPECT_EQ(sh(creds() + remote() + "\"$K\" remote rm " + key).rc, 3) << "gone";
  EXPECT_EQ(sh(creds() + remote() + "\"$K\" remote ls").out, "");
}

TEST_F(CliRemoteS3, SignedEntriesVerifyAndForeignKeysAreRefused) {
  ASSERT_EQ(sh("\"$K\" remote keygen team.key && \"$K\" remote keygen other.key").rc, 0);
  const std::string team = "KCACHE_REMOTE_KEY_FILE='" + (dir() / "team.key").string() + "' ";
  const std::string key = put("blob", "signed through S3");
  ASSERT_EQ(sh(team + creds() + remote() + "\"$K\" push " + key).rc, 0);

  const std::string b = "KCACHE_DIR='" + (root() / "b").string() + "' ";
  const ShellRun ok = sh(b + team + creds() + remote() + "\"$K\" pull " + key + " && \"$K\" get " + key + " -o got");
  ASSERT_EQ(ok.rc, 0) << ok.out << ok.err;
  EXPECT_EQ(read_file(dir() / "got"), "signed through S3");

  const std::string c = "KCACHE_DIR='" + (root() / "c").string() + "' KCACHE_REMOTE_KEY_FILE='" +
                        (dir() / "other.key").string() + "' ";
  const ShellRun refused = sh(c + creds() + remote() + "\"$K\" pull " + key);
  EXPECT_NE(refused.rc, 0) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("unknown_signer"), std::string::npos) << refused.err;
  EXPECT_EQ(sh(c + "\"$K\" get " + key + " -o /dev/null").rc, 3) << "never copied locally";
  // ping samples the objects (ListObjectsV2 + ranged GETs) and names the foreign signer.
  const ShellRun ping = sh(c + creds() + remote() + "\"$K\" remote ping --json");
  EXPECT_EQ(ping.rc, 1) << ping.out << ping.err;
  const auto j = nlohmann::json::parse(ping.out).at(0);
  EXPECT_TRUE(j["listable"].get<bool>());
  EXPECT_EQ(j["foreign_signed"].get<int>(), 1) << j.dump();
}

TEST_F(CliRemoteS3, WrongCredentialsArePermissionDeniedOnceAndTheCompileGoesOn) {
  KCACHE_REQUIRE_TOOLKIT();
  write_file(dir() / "k.cu", "extern \"C\" __global__ void s3_wrong(int* p) { p[0] = 7; }\n");
  const std::string wrong = std::string("AWS_ACCESS_KEY_ID=") + SeaweedfsServer::k_access_key +
                            " AWS_SECRET_ACCESS_KEY=not-the-secret ";
  const ShellRun r = sh(wrong + remote() + "\"$K\" compile k.cu --target cubin --arch sm_90 -o k.cubin");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_file(dir() / "k.cubin").substr(0, 4), "\x7f" "ELF");
  EXPECT_EQ(warnings(r.err), 1U) << r.err;
  EXPECT_NE(r.err.find("permission_denied"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SignatureDoesNotMatch"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("not-the-secret"), std::string::npos) << "never the secret";

  const ShellRun ping = sh(wrong + remote() + "\"$K\" remote ping");
  EXPECT_EQ(ping.rc, 1);
  EXPECT_NE(ping.err.find("refused the credentials"), std::string::npos) << ping.err;
}

TEST_F(CliRemoteS3, AMissingBucketIsNamedWithWhatToDo) {
  const ShellRun ping = sh(creds() + remote({}, "kc-no-such-bucket") + "\"$K\" remote ping");
  EXPECT_EQ(ping.rc, 1) << ping.out << ping.err;
  EXPECT_NE(ping.err.find("not_found"), std::string::npos) << ping.err;
  EXPECT_NE(ping.err.find("bucket 'kc-no-such-bucket' does not exist"), std::string::npos) << ping.err;
  EXPECT_NE(ping.err.find("create the bucket"), std::string::npos) << ping.err;
}

TEST_F(CliRemoteS3, ReadersWithoutCredentialsReadAPublicBucketAndWriteNothing) {
  const std::string key = put("blob", "public entry");
  ASSERT_EQ(sh(creds() + remote({}, SeaweedfsServer::k_public_bucket) + "\"$K\" push " + key).rc, 0);
  // No AWS_* at all: unsigned requests.
  const std::string b = "KCACHE_DIR='" + (root() / "b").string() + "' ";
  const ShellRun pull =
      sh(b + remote("&read_only=true", SeaweedfsServer::k_public_bucket) + "\"$K\" pull " + key + " && \"$K\" get " +
         key + " -o got");
  ASSERT_EQ(pull.rc, 0) << pull.out << pull.err;
  EXPECT_EQ(read_file(dir() / "got"), "public entry");
  const ShellRun ping = sh(remote("&anonymous=true", SeaweedfsServer::k_public_bucket) + "\"$K\" remote ping");
  EXPECT_EQ(ping.rc, 1) << ping.out << ping.err;
  EXPECT_NE(ping.out.find("anonymous"), std::string::npos) << ping.out;
  EXPECT_NE(ping.out.find("read: ok"), std::string::npos) << ping.out;
  EXPECT_NE(ping.err.find("permission_denied"), std::string::npos) << "an anonymous write is refused: " << ping.err;
  // The team bucket is not public.
  EXPECT_EQ(sh(remote("&read_only=true") + "\"$K\" remote ping").rc, 1);
}

TEST_F(CliRemoteS3, CredentialsComeFromAProfileInTheSharedFiles) {
  write_file(dir() / "credentials", std::string("[default]\naws_access_key_id = nobody\naws_secret_access_key = x\n\n"
                                                "[team]\naws_access_key_id = ") +
                                        SeaweedfsServer::k_access_key + "\naws_secret_access_key = " +
                                        SeaweedfsServer::k_secret_key + "\n");
  write_file(dir() / "config", "[profile team]\nregion = us-east-1\n");
  const std::string files = "AWS_SHARED_CREDENTIALS_FILE='" + (dir() / "credentials").string() +
                            "' AWS_CONFIG_FILE='" + (dir() / "config").string() + "' ";
  const ShellRun ok = sh(files + "AWS_PROFILE=team " + remote() + "\"$K\" remote ping");
  EXPECT_EQ(ok.rc, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("profile 'team'"), std::string::npos) << ok.out;
  EXPECT_EQ(sh(files + remote("&profile=team") + "\"$K\" remote ping").rc, 0);
  // The default profile's key is refused; a profile that is not there is named.
  EXPECT_EQ(sh(files + remote() + "\"$K\" remote ping").rc, 1);
  const ShellRun missing = sh(files + "AWS_PROFILE=nope " + remote() + "\"$K\" remote ping");
  EXPECT_EQ(missing.rc, 1);
  EXPECT_NE(missing.err.find("AWS profile 'nope' has no credentials"), std::string::npos) << missing.err;
  // The reader identity may read but not write.
  const ShellRun reader = sh(std::string("AWS_ACCESS_KEY_ID=") + SeaweedfsServer::k_reader_key +
                             " AWS_SECRET_ACCESS_KEY=" + SeaweedfsServer::k_reader_secret + " " + remote() +
                             "\"$K\" remote ping");
  EXPECT_EQ(reader.rc, 1);
  EXPECT_NE(reader.err.find("read but not write"), std::string::npos) << reader.err;
  const ShellRun read_check = sh(std::string("AWS_ACCESS_KEY_ID=") + SeaweedfsServer::k_reader_key +
                                 " AWS_SECRET_ACCESS_KEY=" + SeaweedfsServer::k_reader_secret + " " + remote() +
                                 "\"$K\" remote ping --no-write");
  EXPECT_EQ(read_check.rc, 0) << read_check.out << read_check.err;
  EXPECT_NE(read_check.out.find("write: not checked (--no-write)"), std::string::npos) << read_check.out;
}

TEST_F(CliRemoteS3, MultipartUploadsNeverReplaceAnObjectWithOtherBytes) {
  auto spec = remote::parse_remote_url(s_server->url(m_prefix) + "&multipart_size=5m&timeout_ms=30000");
  ASSERT_TRUE(spec);
  const CredentialsInEnvironment credentials;
  remote::S3Backend backend(*spec);
  std::string first(12u << 20, '\0');  // three parts: 5 + 5 + 2 MiB
  for (std::size_t i = 0; i < first.size(); ++i) {
    first[i] = static_cast<char>((i * 2654435761u) >> 13);
  }
  std::string second = first;
  second[7u << 20] ^= 1;
  auto put = backend.put("kcache:v1:multipart", first, 0);
  ASSERT_TRUE(put) << put.error().describe();
  EXPECT_TRUE(*put);
  auto got = backend.get("kcache:v1:multipart", 64u << 20);
  ASSERT_TRUE(got && *got) << (got ? "miss" : got.error().describe());
  EXPECT_TRUE(**got == first) << "the three parts, in order";
  auto replace = backend.put("kcache:v1:multipart", second, 0);
  ASSERT_TRUE(replace) << replace.error().describe();
  EXPECT_FALSE(*replace);
  // A small object: If-None-Match: * on its PUT.
  ASSERT_TRUE(backend.put("kcache:v1:small", "one", 0).value_or(false));
  EXPECT_FALSE(backend.put("kcache:v1:small", "two", 0).value_or(true));
  EXPECT_EQ(backend.get("kcache:v1:small", 100).value_or(std::nullopt).value_or(""), "one");
  // A bounded read refuses a larger object.
  auto bounded = backend.get("kcache:v1:multipart", 1u << 20);
  ASSERT_FALSE(bounded);
  EXPECT_EQ(bounded.error().code, remote::k_object_too_large);
}

TEST_F(CliRemoteS3, LeasesAreConditionalObjectsWithAnExpiry) {
  auto spec = remote::parse_remote_url(s_server->url(m_prefix));
  ASSERT_TRUE(spec);
  const CredentialsInEnvironment credentials;
  remote::S3Backend s3(*spec);
  const std::string lease = "kcache:v1:lease:x";
  EXPECT_TRUE(s3.lease_take(lease, "a", 60000).value_or(false));
  EXPECT_FALSE(s3.lease_take(lease, "b", 60000).value_or(true)) << "held by a";
  auto info = s3.lease_inspect(lease);
  ASSERT_TRUE(info && *info);
  EXPECT_EQ((*info)->value, "a");
  EXPECT_GT((*info)->pttl_ms, 50000);
  EXPECT_LE((*info)->pttl_ms, 60000) << "never longer than written: not taken for a foreign lease";
  EXPECT_FALSE(s3.lease_take_foreign(lease, "a", "b", 1000).value_or(true)) << "kcache's own lease";
  EXPECT_TRUE(s3.lease_renew(lease, "a", 60000).value_or(false));
  EXPECT_FALSE(s3.lease_renew(lease, "b", 60000).value_or(true));
  EXPECT_FALSE(s3.lease_release(lease, "b").value_or(true)) << "another owner's is left alone";
  EXPECT_TRUE(s3.lease_release(lease, "a").value_or(false));
  EXPECT_FALSE(s3.lease_inspect(lease).value_or(std::nullopt).has_value());
  // An expired lease is taken over by the next taker, judged by the server's
  // clock (Date against Last-Modified, whole seconds, + 1 s): a 1 ms lease
  // holds for 1 to 2 s, then lapses (the 5 s bound proves "lapses", not a time).
  EXPECT_TRUE(s3.lease_take(lease, "c", 1).value_or(false));
  EXPECT_FALSE(s3.lease_take(lease, "d", 60000).value_or(true)) << "not before the server says so";
  const auto limit = Clock::now() + std::chrono::seconds(5);
  bool taken = false;
  while (!taken && Clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    taken = s3.lease_take(lease, "d", 60000).value_or(false);
  }
  EXPECT_TRUE(taken);
  EXPECT_EQ(s3.lease_inspect(lease).value_or(std::nullopt).value_or(remote::LeaseInfo{}).value, "d");
  EXPECT_FALSE(s3.lease_release(lease, "c").value_or(true));
  EXPECT_TRUE(s3.lease_release(lease, "d").value_or(false));
  // A lease object that is not kcache's (no expiry) is foreign: taken over
  // only through lease_take_foreign, naming the value seen.
  const std::string other = "kcache:v1:lease:y";
  ASSERT_TRUE(s3.put(other, "someone else's", 0).value_or(false));
  auto foreign = s3.lease_inspect(other);
  ASSERT_TRUE(foreign && *foreign);
  EXPECT_EQ((*foreign)->pttl_ms, -1);
  EXPECT_FALSE(s3.lease_take(other, "e", 60000).value_or(true));
  EXPECT_FALSE(s3.lease_take_foreign(other, "another value", "e", 60000).value_or(true));
  EXPECT_TRUE(s3.lease_take_foreign(other, "someone else's", "e", 60000).value_or(false));
  EXPECT_TRUE(s3.lease_release(other, "e").value_or(false));
}

TEST_F(CliRemoteS3, EightHostsOnOneColdKeyCompileOnce) {
  KCACHE_REQUIRE_TOOLKIT();
  // A kernel that takes NVRTC a moment (deep template instantiation), so the herd overlaps.
  std::string src = "template <int N> __device__ float f(float x) { return f<N - 1>(x * 1.0001f + N); }\n"
                    "template <> __device__ float f<0>(float x) { return x; }\n"
                    "extern \"C\" __global__ void s3_herd(float* p) {\n  float v = p[threadIdx.x];\n";
  for (int i = 0; i < 30; ++i) {
    src += "  v += f<" + std::to_string(100 + i) + ">(v);\n";
  }
  write_file(dir() / "herd.cu", src + "  p[threadIdx.x] = v;\n}\n");
  // A generous timeout: this test is about the lease, not deadlines (those have
  // their own tests); with the default 2 s, a SeaweedFS slowed by a loaded CI
  // machine once failed one host's request, which then compiled without the remote.
  const ShellRun herd = sh("export " + creds() + remote("&timeout_ms=30000") +
                           "\nfor i in 1 2 3 4 5 6 7 8; do KCACHE_DIR=\"$PWD/host$i\" \"$K\" compile herd.cu --target "
                           "cubin --arch sm_90 --json -o out$i.cubin > out$i.json 2> err$i & done; wait");
  ASSERT_EQ(herd.rc, 0);
  int compiled = 0;
  for (int i = 1; i <= 8; ++i) {
    const std::string n = std::to_string(i);
    const std::string out = read_file(dir() / ("out" + n + ".json"));
    ASSERT_FALSE(out.empty()) << read_file(dir() / ("err" + n));
    compiled += nlohmann::json::parse(out)["hit"].get<bool>() ? 0 : 1;
    EXPECT_EQ(read_file(dir() / ("out" + n + ".cubin")), read_file(dir() / "out1.cubin")) << "host " << i;
    EXPECT_EQ(warnings(read_file(dir() / ("err" + n))), 0U) << read_file(dir() / ("err" + n));
  }
  EXPECT_EQ(compiled, 1) << "one compile per key across 8 hosts";
  std::uint64_t taken = 0;
  for (int i = 1; i <= 8; ++i) {
    const ShellRun stats = sh("KCACHE_DIR=\"$PWD/host" + std::to_string(i) + "\" \"$K\" stats --json");
    taken += nlohmann::json::parse(stats.out)["remote"]["lease_taken"].get<std::uint64_t>();
  }
  EXPECT_GE(taken, 1U) << "the compile ran under an S3 lease";
  // Every lease was released: only the entry is left under the prefix.
  const CredentialsInEnvironment credentials;
  auto spec = remote::parse_remote_url(s_server->url(m_prefix));
  ASSERT_TRUE(spec);
  std::vector<std::string> names;
  ASSERT_TRUE(remote::S3Backend(*spec).list("kcache:", [&](std::string_view name) {
    names.emplace_back(name);
    return true;
  }));
  ASSERT_EQ(names.size(), 1U) << names.back();
  EXPECT_EQ(names[0].substr(0, 10), "kcache:v1:");
  EXPECT_EQ(names[0].size(), 10U + 64U);
}

// Starts `script` with bash in the background in `cwd`, stdout and stderr to
// `log`; returns its pid.
pid_t spawn_shell(const fs::path& cwd, const std::string& script, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const std::string cmd = "cd '" + cwd.string() + "' && exec " + script;
    ::execl("/bin/bash", "bash", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int exit_code(pid_t pid) {
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// The owner of a cold key is SIGKILLed mid-compile: its lease object stays
// (nothing releases it), and once its expiry (1.5 s) passes one waiter takes
// it over with a conditional PUT and compiles; the others get its entry.
TEST_F(CliRemoteS3, AKilledOwnersLeaseIsTakenOverAfterItsExpiry) {
  KCACHE_REQUIRE_TOOLKIT();
  std::string src = "template <int N> __device__ float f(float x) { return f<N - 1>(x * 1.0001f + N); }\n"
                    "template <> __device__ float f<0>(float x) { return x; }\n"
                    "extern \"C\" __global__ void s3_killed(float* p) {\n  float v = p[threadIdx.x];\n";
  for (int i = 0; i < 60; ++i) {
    src += "  v += f<" + std::to_string(100 + i) + ">(v);\n";
  }
  write_file(dir() / "killed.cu", src + "  p[threadIdx.x] = v;\n}\n");
  const std::string env = "env " + creds() + "KCACHE_REMOTE='" + s_server->url(m_prefix) +
                          "' KCACHE_REMOTE_LEASE_TTL_MS=1500 KCACHE_REMOTE_LEASE_WAIT_MS=600000 ";
  const std::string compile = " '" + std::string(KCACHE_CLI_PATH) +
                              "' compile killed.cu --target cubin --arch sm_90 --json -o ";
  const pid_t owner = spawn_shell(dir(), env + "KCACHE_DIR=\"$PWD/owner\"" + compile + "owner.cubin",
                                  dir() / "owner.log");
  const CredentialsInEnvironment credentials;
  remote::S3Backend s3(*remote::parse_remote_url(s_server->url(m_prefix)));
  auto lease_held = [&] {
    bool found = false;
    (void)s3.list("kcache:v1:lease:", [&](std::string_view) {
      found = true;
      return false;
    });
    return found;
  };
  // Wait (bounded) for the owner to take the lease: it is compiling now.
  const auto limit = Clock::now() + std::chrono::seconds(60);
  while (!lease_held() && Clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(lease_held()) << read_file(dir() / "owner.log");
  std::vector<pid_t> waiters;
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    waiters.push_back(spawn_shell(dir(), env + "KCACHE_DIR=\"$PWD/w" + n + "\"" + compile + "w" + n + ".cubin",
                                  dir() / ("w" + n + ".log")));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // sequencing only: the waiters find it held
  ::kill(owner, SIGKILL);
  EXPECT_EQ(exit_code(owner), 128 + SIGKILL);
  int compiled = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    ASSERT_EQ(exit_code(waiters[static_cast<std::size_t>(i)]), 0) << read_file(dir() / ("w" + n + ".log"));
    const std::string log = read_file(dir() / ("w" + n + ".log"));
    compiled += nlohmann::json::parse(log.substr(log.find('{')))["hit"].get<bool>() ? 0 : 1;
    EXPECT_EQ(read_file(dir() / ("w" + n + ".cubin")), read_file(dir() / "w0.cubin"));
  }
  EXPECT_EQ(compiled, 1) << "one waiter took over and compiled; the others got its entry";
  std::uint64_t takeovers = 0;
  for (int i = 0; i < 3; ++i) {
    const ShellRun stats = sh("KCACHE_DIR=\"$PWD/w" + std::to_string(i) + "\" \"$K\" stats --json");
    takeovers += nlohmann::json::parse(stats.out)["remote"]["lease_takeovers"].get<std::uint64_t>();
  }
  EXPECT_EQ(takeovers, 1U);
  EXPECT_FALSE(lease_held()) << "the new owner released it";
}

// A server that is stopped (nothing listens), hung (accepts, never answers)
// or slow (trickles): each compile ends, with one warning; the bound is
// generous (3x a 500 ms deadline plus process start), proving "bounded, not hung".
TEST_F(CliRemoteS3, StoppedHungAndSlowServersCostOneDeadlineAndOneWarning) {
  KCACHE_REQUIRE_TOOLKIT();
  std::string why;
  auto hung = MisbehavingServer::start("silent", &why);
  ASSERT_NE(hung, nullptr) << why;
  auto slow = MisbehavingServer::start("http-trickle", &why);
  ASSERT_NE(slow, nullptr) << why;
  const std::string endpoints[] = {"http://127.0.0.1:" + std::to_string(free_port()),
                                   "http://127.0.0.1:" + std::to_string(hung->port()),
                                   "http://127.0.0.1:" + std::to_string(slow->port())};
  int n = 0;
  for (const std::string& endpoint : endpoints) {
    const std::string name = "s3_down" + std::to_string(n++);
    write_file(dir() / (name + ".cu"), "extern \"C\" __global__ void " + name + "(int* p) { p[0] = 1; }\n");
    const auto start = Clock::now();
    const ShellRun r = sh(creds() + "KCACHE_DIR=\"$PWD/" + name + "\" KCACHE_REMOTE='s3://kc-team/x?endpoint=" +
                          endpoint + "&timeout_ms=500&connect_timeout_ms=200' \"$K\" compile " + name +
                          ".cu --target cubin --arch sm_90 -o " + name + ".cubin");
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    EXPECT_EQ(r.rc, 0) << endpoint << ": " << r.err;
    EXPECT_EQ(warnings(r.err), 1U) << endpoint << ": " << r.err;
    EXPECT_LT(took, 8000) << endpoint << ": bounded by the deadline, not hung";
  }
  // The suite's own server paused (SIGSTOP): the same.
  s_server->pause();
  write_file(dir() / "paused.cu", "extern \"C\" __global__ void s3_paused(int* p) { p[0] = 2; }\n");
  const auto start = Clock::now();
  const ShellRun r = sh(creds() + remote("&timeout_ms=500") + "\"$K\" compile paused.cu --target cubin --arch sm_90 "
                                                              "-o paused.cubin");
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  s_server->resume();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(warnings(r.err), 1U) << r.err;
  EXPECT_NE(r.err.find("timeout"), std::string::npos) << r.err;
  EXPECT_LT(took, 8000);
}


// A 300 MiB engine: uploaded in 64 MiB parts (multipart) read from the local
// entry as they are sent, downloaded and checked as it arrives into a file
// staged in the cache, with the peak RSS of each process within 64 MiB of
// the same command's on a missing key, whatever the entry's size.
TEST_F(CliRemoteS3, ALargeEngineUploadsInPartsAndDownloadsWithBoundedMemory) {
  constexpr std::uint64_t k_size = std::uint64_t{300} << 20;
  ASSERT_EQ(sh("head -c " + std::to_string(k_size) + " /dev/urandom > engine.bin").rc, 0);
  const ShellRun put = sh("KCACHE_FSYNC=none \"$K\" put engine.bin");
  ASSERT_EQ(put.rc, 0) << put.err;
  const std::string key = put.out.substr(0, 64);
  const std::string env = "KCACHE_DIR='" + cache().string() + "' KCACHE_FSYNC=none " + creds() +
                          "KCACHE_REMOTE='" + s_server->url(m_prefix) +
                          "&max_entry_size=400m&timeout_ms=120000'";
  const auto [push_rc, push_rss] = run_measured(dir(), env, "push " + key);
  ASSERT_EQ(push_rc, 0) << read_file(dir() / "measured.err");
  const std::string other = "KCACHE_DIR='" + (root() / "other").string() + "' KCACHE_FSYNC=none " + creds() +
                            "KCACHE_REMOTE='" + s_server->url(m_prefix) + "&max_entry_size=400m&timeout_ms=120000'";
  // The baseline: the same process asking for a key the remote does not hold.
  const auto [base_rc, base_rss] = run_measured(dir(), other, "pull " + std::string(64, '0'));
  ASSERT_EQ(base_rc, 3) << read_file(dir() / "measured.err");
  const auto [pull_rc, pull_rss] = run_measured(dir(), other, "pull " + key);
  ASSERT_EQ(pull_rc, 0) << read_file(dir() / "measured.err");
  const ShellRun same = sh("KCACHE_DIR='" + (root() / "other").string() + "' \"$K\" get " + key +
                           " -o got.bin && cmp -s got.bin engine.bin");
  EXPECT_EQ(same.rc, 0) << same.err;
  EXPECT_EQ(sh("ls -A '" + (root() / "other" / "v1" / "tmp").string() + "'").out, "") << "nothing left staged";
  constexpr long k_bound_kib = 64 * 1024;
  EXPECT_LT(push_rss, base_rss + k_bound_kib) << "push of a 300 MiB entry (baseline " << base_rss << " KiB)";
  EXPECT_LT(pull_rss, base_rss + k_bound_kib) << "pull of a 300 MiB entry (baseline " << base_rss << " KiB)";
  std::printf("300 MiB engine: peak RSS push %ld MiB, pull %ld MiB, baseline %ld MiB\n", push_rss >> 10,
              pull_rss >> 10, base_rss >> 10);
  // Over a smaller bound: refused before it is downloaded.
  const auto [small_rc, small_rss] = run_measured(
      dir(), "KCACHE_DIR='" + (root() / "third").string() + "' " + creds() + "KCACHE_REMOTE='" +
                 s_server->url(m_prefix) + "&max_entry_size=16m'",
      "pull " + key);
  EXPECT_NE(small_rc, 0);
  EXPECT_LT(small_rss, base_rss + k_bound_kib) << "refused on its Content-Length";
}

// Entries past the streaming bound (8 MiB), compressible and signed: a
// compile-path hit (`kcache get` through the configured tiers) streams the
// object into the cache and serves it from there; an object damaged on the
// server is refused for its signature and leaves nothing behind.
TEST_F(CliRemoteS3, StreamedEntriesAreSignedCompressedAndRefusedWhenDamaged) {
  ASSERT_EQ(sh("\"$K\" remote keygen team.key").rc, 0);
  const std::string team = "KCACHE_REMOTE_KEY_FILE='" + (dir() / "team.key").string() + "' ";
  // 24 MiB of base64 text: compressed (two passes: the header names the
  // body's length) to about 18 MiB, still past the streaming bound.
  ASSERT_EQ(sh("head -c 18874368 /dev/urandom | base64 -w0 > text.bin && KCACHE_FSYNC=none \"$K\" put text.bin > "
               "put.out").rc,
            0);
  const std::string key = read_file(dir() / "put.out").substr(0, 64);
  const ShellRun push = sh(team + creds() + remote("&multipart_size=5m") + "\"$K\" push " + key);
  ASSERT_EQ(push.rc, 0) << push.out << push.err;
  auto spec = remote::parse_remote_url(s_server->url(m_prefix));
  ASSERT_TRUE(spec);
  CredentialsInEnvironment env;
  remote::S3Backend backend(*spec);
  auto object = backend.get("kcache:v1:" + key, std::uint64_t{64} << 20);
  ASSERT_TRUE(object && object->has_value());
  EXPECT_LT((*object)->size(), std::size_t{21} << 20) << "compressed";
  EXPECT_GT((*object)->size(), std::size_t{8} << 20) << "streamed";

  // A hit of the configured tiers (RemoteStore::get with the file tier as
  // its local store): streamed into the cache, and served from the staged
  // file without reading the entry again.
  FileStoreOptions local_options;
  local_options.root = root() / "b";
  local_options.fsync = FsyncPolicy::none;
  auto local = FileStore::open(local_options);
  ASSERT_TRUE(local) << local.error().message;
  remote::RemoteStoreOptions options;
  options.spec = *spec;
  auto team_key = remote::load_team_key(dir() / "team.key");
  ASSERT_TRUE(team_key);
  options.codec.sign = *team_key;
  options.local = local->get();
  auto store = remote::RemoteStore::open(options);
  ASSERT_TRUE(store);
  const Key k = *Key::parse(key);
  auto hit = (*store)->get(k);
  ASSERT_TRUE(hit && hit->has_value());
  EXPECT_TRUE((*hit)->payload == read_file(dir() / "text.bin"));
  EXPECT_EQ((*store)->remote_stats().hits, 1U);
  // Served from the staged file (checked as it arrived), not read back through the entry.
  EXPECT_EQ((*local)->stats()->hits, 0U);
  auto here = (*local)->open_payload(k);
  ASSERT_TRUE(here && here->has_value()) << "published in the local store";
  EXPECT_EQ(sh("ls -A '" + (root() / "b" / "v1" / "tmp").string() + "'").out, "") << "nothing left staged";

  // Damage one byte in the middle of the stored object.
  std::string bad = std::move(**object);
  bad[bad.size() / 2] = static_cast<char>(bad[bad.size() / 2] ^ 0x20);
  ASSERT_TRUE(backend.remove("kcache:v1:" + key));
  ASSERT_TRUE(backend.put("kcache:v1:" + key, bad, 0));
  const std::string c = "KCACHE_DIR='" + (root() / "c").string() + "' ";
  const ShellRun refused = sh(c + team + creds() + remote() + "\"$K\" pull " + key);
  EXPECT_EQ(refused.rc, 3) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("bad_signature"), std::string::npos) << refused.err;
  EXPECT_EQ(sh(c + "\"$K\" get " + key + " -o /dev/null").rc, 3) << "never published";
  EXPECT_EQ(sh("ls -A '" + (root() / "c" / "v1" / "tmp").string() + "'").out, "") << "nothing left staged";
}

}  // namespace
}  // namespace kcache::test
