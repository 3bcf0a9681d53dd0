// kcache_store_tool: drives a FileStore from a separate process for tests.
//
//   kcache_store_tool put ROOT KEY_SEED PAYLOAD_SEED LEN [FSYNC]   prints "ACK stored|already_present" or "ERR <code>"
//   kcache_store_tool get ROOT KEY_SEED                           prints "HIT <payload seed>", "MISS", "WRONG" or "ERR <code>"
//   kcache_store_tool put2 ROOT KEY_SEED                          two puts; prints each outcome and "WARNINGS <n>"
//   kcache_store_tool report - N                                   counts N served requests in the `kcache run`
//                                                                 report KCACHE_RUN_REPORT names; prints
//                                                                 "REPORT <served in it> top|not-top" or "REPORT none"
//
// FSYNC is none|file|dir (default file). Exit status 0 unless the arguments are bad.
// The fault seam reads KCACHE_FAULT from the environment.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kcache/file_store.hpp"
#include "kcache/request_stats.hpp"
#include "store/file/request_file.hpp"
#include "support/payload.hpp"

using namespace kcache;

namespace {

std::unique_ptr<FileStore> open_store(const char* root, FsyncPolicy fsync, int* warnings) {
  FileStoreOptions o;
  o.root = root;
  o.max_size_bytes = 0;
  o.fsync = fsync;
  o.stale_temp_age = std::chrono::seconds(3600);
  o.warn = [warnings](const std::string& line) {
    ++*warnings;
    std::fprintf(stderr, "kcache: warning: %s\n", line.c_str());
  };
  auto s = FileStore::open(o);
  if (!s) {
    std::printf("ERR %s\n", s.error().describe().c_str());
    return nullptr;
  }
  return std::move(*s);
}

void print_put(const Result<PutOutcome>& r) {
  if (r) {
    std::printf("ACK %s\n", *r == PutOutcome::stored ? "stored" : "already_present");
  } else {
    std::printf("ERR %s\n", std::string(to_string(r.error().code)).c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  if (args.size() < 4) {
    std::fprintf(stderr, "usage: kcache_store_tool put|get|put2 ROOT KEY_SEED ...\n");
    return 2;
  }
  int warnings = 0;
  const std::uint64_t key_seed = std::strtoull(argv[3], nullptr, 10);
  if (args[1] == "put" && args.size() >= 6) {
    FsyncPolicy fsync = FsyncPolicy::file;
    if (args.size() >= 7) {
      fsync = args[6] == "none" ? FsyncPolicy::none : args[6] == "dir" ? FsyncPolicy::file_and_directory : FsyncPolicy::file;
    }
    auto store = open_store(argv[2], fsync, &warnings);
    if (!store) {
      return 0;
    }
    print_put(store->put(test::make_artifact(key_seed, std::strtoull(argv[4], nullptr, 10),
                                             std::strtoull(argv[5], nullptr, 10))));
    return 0;
  }
  if (args[1] == "put2") {
    auto store = open_store(argv[2], FsyncPolicy::file, &warnings);
    if (!store) {
      return 0;
    }
    print_put(store->put(test::make_artifact(key_seed, key_seed, 4096)));
    print_put(store->put(test::make_artifact(key_seed + 1, key_seed + 1, 4096)));
    std::printf("DEGRADED %d\nWARNINGS %d\n", store->degraded() ? 1 : 0, warnings);
    return 0;
  }
  if (args[1] == "get") {
    auto store = open_store(argv[2], FsyncPolicy::file, &warnings);
    if (!store) {
      return 0;
    }
    auto r = store->get(test::test_key(key_seed));
    if (!r) {
      std::printf("ERR %s\n", r.error().describe().c_str());
    } else if (!r->has_value()) {
      std::printf("MISS\n");
    } else if (auto seed = test::check_payload((*r)->payload)) {
      std::printf("HIT %llu\n", static_cast<unsigned long long>(*seed));
    } else {
      std::printf("WRONG\n");
    }
    return 0;
  }
  if (args[1] == "report") {
    for (std::uint64_t i = 0; i < key_seed; ++i) {
      record_request(static_cast<Store*>(nullptr), "run", RequestOutcome::served, Tier::disk, 5);
    }
    const RequestStats* report = store::run_report();
    if (report == nullptr) {
      std::printf("REPORT none\n");
    } else {
      std::printf("REPORT %llu %s\n", static_cast<unsigned long long>(report->total().served_total()),
                  store::is_run_top() ? "top" : "not-top");
    }
    return 0;
  }
  std::fprintf(stderr, "kcache_store_tool: unknown command %s\n", argv[1]);
  return 2;
}
