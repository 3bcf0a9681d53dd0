#include "support/seaweedfs_server.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "store/remote/remote_spec.hpp"
#include "store/remote/s3_backend.hpp"
#include "support/child.hpp"
#include "support/redis_server.hpp"

namespace kcache::test {

std::string weed_binary() {
  if (const char* env = std::getenv("KCACHE_WEED"); env != nullptr && *env != '\0') {
    return ::access(env, X_OK) == 0 ? std::string(env) : std::string();
  }
  const std::filesystem::path tools =
      std::filesystem::path(KCACHE_TEST_SUPPORT_DIR) / ".." / ".." / ".tools" / "seaweedfs" / "bin" / "weed";
  if (::access(tools.c_str(), X_OK) == 0) {
    return tools.lexically_normal().string();
  }
  return {};
}

std::unique_ptr<SeaweedfsServer> SeaweedfsServer::start(const std::filesystem::path& dir, std::string* why) {
  const std::string weed = weed_binary();
  if (weed.empty()) {
    if (why != nullptr) {
      *why = "SeaweedFS's weed is missing; run scripts/seaweedfs.sh (scripts/bootstrap.sh does) or set KCACHE_WEED";
    }
    return nullptr;
  }
  std::unique_ptr<SeaweedfsServer> s(new SeaweedfsServer());
  s->m_dir = dir;
  std::filesystem::create_directories(dir / "data");
  {
    std::ofstream out(dir / "s3.json");
    out << R"({"identities":[)"
        << R"({"name":"admin","credentials":[{"accessKey":")" << k_access_key << R"(","secretKey":")" << k_secret_key
        << R"("}],"actions":["Admin","Read","Write","List","Tagging"]},)"
        << R"({"name":"reader","credentials":[{"accessKey":")" << k_reader_key << R"(","secretKey":")"
        << k_reader_secret << R"("}],"actions":["Read","List"]},)"
        << R"({"name":"anonymous","actions":["Read:)" << k_public_bucket << R"(","List:)" << k_public_bucket
        << R"("]}]})" << "\n";
  }
  // weed mini listens on ten ports (http and grpc of master, volume, filer,
  // S3 and admin): ten distinct free ones.
  std::set<int> ports;
  while (ports.size() < 10) {
    ports.insert(free_port());
  }
  const std::vector<int> p(ports.begin(), ports.end());
  s->m_s3_port = p[6];
  std::vector<std::string> args = {weed,
                                   "mini",
                                   "-dir=" + (dir / "data").string(),
                                   "-ip=127.0.0.1",
                                   "-ip.bind=127.0.0.1",
                                   "-master.port=" + std::to_string(p[0]),
                                   "-master.port.grpc=" + std::to_string(p[1]),
                                   "-volume.port=" + std::to_string(p[2]),
                                   "-volume.port.grpc=" + std::to_string(p[3]),
                                   "-filer.port=" + std::to_string(p[4]),
                                   "-filer.port.grpc=" + std::to_string(p[5]),
                                   "-s3.port=" + std::to_string(p[6]),
                                   "-s3.port.grpc=" + std::to_string(p[7]),
                                   "-admin.port=" + std::to_string(p[8]),
                                   "-admin.port.grpc=" + std::to_string(p[9]),
                                   "-s3.port.iceberg=0",
                                   "-s3.port.lance=0",
                                   "-admin.ui=false",
                                   "-webdav=false",
                                   "-s3.config=" + (dir / "s3.json").string(),
                                   // Virtual-hosted addressing: BUCKET.localhost (libcurl
                                   // resolves *.localhost to the loopback itself).
                                   "-s3.domainName=localhost",
                                   std::string("-bucket=") + k_bucket + "," + k_public_bucket};
  const std::string log = (dir / "weed.log").string();
  const pid_t pid = spawn_server(std::move(args), log);
  s->m_pid = pid;
  // Up when both buckets answer an anonymous HEAD: the public one 200, the
  // team one 403 (it exists, and is not public).
  auto probe = [&](const char* bucket) -> long {
    auto spec = remote::parse_remote_url("s3://" + std::string(bucket) + "?anonymous=true&timeout_ms=1000&endpoint=" +
                                         s->endpoint());
    remote::S3Backend backend(*spec);
    auto r = backend.describe();  // HEAD on the bucket
    if (r) {
      return 200;
    }
    return r.error().code == ErrorCode::permission_denied ? 403 : 0;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      s->m_pid = -1;
      break;
    }
    if (probe(k_public_bucket) == 200 && probe(k_bucket) == 403) {
      return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  s->kill();
  if (why != nullptr) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    *why = "weed did not start within 30 s; its log " + log + " ends: " +
           text.substr(text.size() > 2000 ? text.size() - 2000 : 0);
  }
  return nullptr;
}

SeaweedfsServer::~SeaweedfsServer() {
  resume();
  kill();
}

std::string SeaweedfsServer::endpoint() const { return "http://127.0.0.1:" + std::to_string(m_s3_port); }

std::string SeaweedfsServer::virtual_endpoint() const { return "http://localhost:" + std::to_string(m_s3_port); }

std::string SeaweedfsServer::url(const std::string& prefix, const std::string& bucket) const {
  return "s3://" + bucket + (prefix.empty() ? "" : "/" + prefix) + "?endpoint=" + endpoint();
}

std::string SeaweedfsServer::env() {
  return std::string("AWS_ACCESS_KEY_ID=") + k_access_key + " AWS_SECRET_ACCESS_KEY=" + k_secret_key + " ";
}

void SeaweedfsServer::kill() { kill_child(m_pid); }

void SeaweedfsServer::pause() { signal_child(m_pid, SIGSTOP); }

void SeaweedfsServer::resume() { signal_child(m_pid, SIGCONT); }

}  // namespace kcache::test
