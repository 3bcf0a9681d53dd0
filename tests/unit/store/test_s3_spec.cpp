// s3:// URLs and where an S3 remote's credentials come from (no server:
// the environment and the AWS files only). The S3 protocol itself is tested
// against a real SeaweedFS in tests/integration/test_cli_remote_s3.cpp.
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "kcache/config.hpp"
#include "kcache/file_store.hpp"
#include "store/remote/remote_spec.hpp"
#include "store/remote/s3_backend.hpp"
#include "store/remote/s3_credentials.hpp"
#include "support/payload.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "util/fd.hpp"

namespace kcache::remote {
namespace {

// Clears every AWS_* setting that changes the answer, and restores nothing:
// each test sets what it needs.
class S3Env : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                          "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"}) {
      ::unsetenv(v);
    }
    ::setenv("HOME", m_dir.path().c_str(), 1);
  }
  void TearDown() override { SetUp(); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(m_dir.path() / name) << text;
  }
  std::string path(const std::string& name) const { return (m_dir.path() / name).string(); }
  test::TempDir m_dir;
};

TEST(S3Spec, BucketPrefixAndAttributesParseAndPrintWithoutSecrets) {
  auto spec = parse_remote_url("s3://team-builds/ci/kcache/?endpoint=http://127.0.0.1:9000/&region=eu-west-1&"
                               "addressing=path&read_only=true&timeout_ms=900&multipart_size=8m&profile=team");
  ASSERT_TRUE(spec) << spec.error().describe();
  EXPECT_EQ(spec->scheme, Scheme::s3);
  EXPECT_EQ(spec->host, "team-builds");
  EXPECT_EQ(spec->path, "/ci/kcache");
  EXPECT_EQ(spec->endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(spec->region, "eu-west-1");
  EXPECT_EQ(spec->addressing, S3Addressing::path);
  EXPECT_TRUE(spec->read_only);
  EXPECT_EQ(spec->multipart_size, std::uint64_t{8} << 20);
  EXPECT_EQ(spec->masked(),
            "s3://team-builds/ci/kcache?read_only=true&timeout_ms=900&endpoint=http://127.0.0.1:9000&"
            "region=eu-west-1&addressing=path&profile=team&multipart_size=8388608");
  auto again = parse_remote_url(spec->masked());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->masked(), spec->masked());
  EXPECT_EQ(S3Backend(*spec).object_key("kcache:v1:ab"), "ci/kcache/kcache/v1/ab");
  auto bare = parse_remote_url("s3://bucket");
  ASSERT_TRUE(bare);
  EXPECT_EQ(S3Backend(*bare).object_key("kcache:v1:lease:ab"), "kcache/v1/lease/ab");
}

TEST(S3Spec, BadUrlsAreRefusedWithWhatToDo) {
  struct Case {
    std::string url, says;
  };
  for (const Case& c : {Case{"s3://ab", "bad bucket name"}, Case{"s3://Upper", "bad bucket name"},
                        Case{"s3://AKIA:secret@bucket", "holds no credentials"},
                        Case{"s3://bucket?endpoint=ftp://x", "endpoint"},
                        Case{"s3://bucket?endpoint=http://h/path", "endpoint"},
                        Case{"s3://bucket?multipart_size=1m", "multipart_size"},
                        Case{"s3://bucket?addressing=dns", "addressing"},
                        Case{"s3://bucket?bearer_token_env=X", "unknown attribute"}}) {
    auto spec = parse_remote_url(c.url);
    ASSERT_FALSE(spec) << c.url;
    EXPECT_EQ(spec.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(spec.error().message.find(c.says), std::string::npos) << spec.error().message;
    EXPECT_EQ(spec.error().message.find("secret"), std::string::npos) << spec.error().message;
  }
}

TEST_F(S3Env, CredentialsComeInTheAwsToolsOrder) {
  auto spec = *parse_remote_url("s3://bucket");
  // Nothing anywhere: anonymous, us-east-1.
  auto none = resolve_s3_credentials(spec);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->anonymous());
  EXPECT_EQ(none->region, "us-east-1");

  write("credentials", "# team\n[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = sdefault\n"
                       "[team]\naws_access_key_id=AKTEAM\naws_secret_access_key=steam\naws_session_token=tok-9f3e\n");
  write("config", "[profile team]\nregion = ap-south-1\n[default]\nregion = eu-north-1\n");
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", path("credentials").c_str(), 1);
  ::setenv("AWS_CONFIG_FILE", path("config").c_str(), 1);
  auto def = resolve_s3_credentials(spec);
  ASSERT_TRUE(def);
  EXPECT_EQ(def->access_key, "AKDEFAULT");
  EXPECT_EQ(def->region, "eu-north-1");

  ::setenv("AWS_PROFILE", "team", 1);
  auto team = resolve_s3_credentials(spec);
  ASSERT_TRUE(team);
  EXPECT_EQ(team->access_key, "AKTEAM");
  EXPECT_EQ(team->session_token, "tok-9f3e");
  EXPECT_EQ(team->region, "ap-south-1");
  EXPECT_EQ(team->describe().find("steam"), std::string::npos) << "never the secret";
  EXPECT_EQ(team->describe().find("tok-9f3e"), std::string::npos) << "never the token";

  // The environment's key pair comes first; the URL's region first of all.
  ::setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "senv", 1);
  ::setenv("AWS_REGION", "us-west-2", 1);
  auto from_env = resolve_s3_credentials(spec);
  ASSERT_TRUE(from_env);
  EXPECT_EQ(from_env->access_key, "AKENV");
  EXPECT_EQ(from_env->region, "us-west-2");
  EXPECT_EQ(resolve_s3_credentials(*parse_remote_url("s3://bucket?region=sa-east-1"))->region, "sa-east-1");
  // ?profile= on the URL is more specific than the environment; anonymous wins over all.
  EXPECT_EQ(resolve_s3_credentials(*parse_remote_url("s3://bucket?profile=team"))->access_key, "AKTEAM");
  EXPECT_TRUE(resolve_s3_credentials(*parse_remote_url("s3://bucket?anonymous=true"))->anonymous());

  // A named profile that is nowhere is an error naming the files.
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::setenv("AWS_PROFILE", "nope", 1);
  auto missing = resolve_s3_credentials(spec);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::permission_denied);
  EXPECT_NE(missing.error().message.find(path("credentials")), std::string::npos) << missing.error().message;
}

TEST_F(S3Env, HalfAKeyPairInAProfileIsRefused) {
  write("credentials", "[half]\naws_access_key_id = AKHALF\n");
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", path("credentials").c_str(), 1);
  auto r = resolve_s3_credentials(*parse_remote_url("s3://bucket?profile=half"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("half of a key pair"), std::string::npos) << r.error().message;
}

// The number of inotify events waiting on `fd` (non-blocking).
int pending_events(int fd) {
  int n = 0;
  alignas(inotify_event) char buffer[4096];
  for (ssize_t got = 0; (got = ::read(fd, buffer, sizeof buffer)) > 0;) {
    for (ssize_t at = 0; at < got; ++n) {
      at += static_cast<ssize_t>(sizeof(inotify_event) + reinterpret_cast<inotify_event*>(buffer + at)->len);
    }
  }
  return n;
}

// Issue 23: what only a remote needs costs nothing on a local hit. The
// credentials file of an S3 remote is watched (inotify, IN_OPEN | IN_ACCESS):
// a local hit through the configured chain never opens it; the first
// operation that reaches the remote (a miss, its endpoint down) does, which
// shows the watch sees the backend's read.
TEST_F(S3Env, ALocalHitReadsNoCredentialsFileAndTheFirstRemoteOperationDoes) {
  write("credentials", "[default]\naws_access_key_id = AKLAZY\naws_secret_access_key = slazy\n");
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", path("credentials").c_str(), 1);
  ::setenv("AWS_CONFIG_FILE", path("config").c_str(), 1);  // absent
  const Artifact a = test::make_artifact(23, 1, 4000);
  {
    FileStoreOptions o;
    o.root = path("cache");
    auto local = FileStore::open(o);
    ASSERT_TRUE(local.has_value()) << local.error().message;
    ASSERT_TRUE((*local)->put(a).has_value());
  }
  ConfigInputs in;
  in.command_line["cache_dir"] = path("cache");
  in.command_line["remote"] = "s3://kcache-lazy?endpoint=http://127.0.0.1:" + std::to_string(test::free_port()) +
                              "&connect_timeout_ms=300&timeout_ms=300";
  in.getenv = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  auto config = Config::load_from(in);
  ASSERT_TRUE(config.has_value()) << config.error().message;

  const util::Fd watch(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  ASSERT_TRUE(watch.valid());
  ASSERT_GE(::inotify_add_watch(watch.get(), path("credentials").c_str(), IN_OPEN | IN_ACCESS), 0);
  auto store = open_configured_store(*config);
  ASSERT_TRUE(store.has_value()) << store.error().message;
  auto hit = (*store)->get(a.passport.key);
  ASSERT_TRUE(hit.has_value() && hit->has_value());
  EXPECT_EQ(**hit, a);
  EXPECT_EQ(pending_events(watch.get()), 0) << "the local hit opened the S3 credentials file";

  (void)(*store)->get(test::test_key(24));  // a miss: asks the remote, which is down
  EXPECT_GT(pending_events(watch.get()), 0) << "the first remote operation did not read the credentials";
}

}  // namespace
}  // namespace kcache::remote
