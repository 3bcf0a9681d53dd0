// WorkerPool::compile_many: deduplicate by key, fan out over the workers,
// optionally through a single-flight Cache, and return results in order.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "kcache/cache.hpp"
#include "kcache/compiler.hpp"
#include "kcache/request_stats.hpp"
#include "compile/request_keys.hpp"
#include "kcache/worker_pool.hpp"
#include "passport/failed_compile.hpp"
#include "util/sha256.hpp"
#include "worker/worker_protocol.hpp"

namespace kcache {

std::vector<Result<Artifact>> WorkerPool::compile_many(const std::vector<CompileRequest>& requests, Cache* cache,
                                                       const CompileProgress& progress) {
  const std::size_t n = requests.size();
  std::vector<Result<Artifact>> results(n, make_error(ErrorCode::internal, "not compiled"));
  // One job per distinct key. A request that cannot be keyed is grouped with
  // requests identical to it byte for byte (its encoded form).
  struct Job {
    std::size_t first = 0;        // index of the request that is compiled
    std::optional<Key> key;       // absent: not cacheable
    std::vector<std::size_t> members;
  };
  std::vector<Job> jobs;
  std::map<std::string, std::size_t> job_of;
  // Without a cache no key is derived (no header scanned): identical requests
  // are still compiled once.
  const bool keyed = cache != nullptr && !cache->store().disabled();
  for (std::size_t i = 0; i < n; ++i) {
    auto kb = keyed ? derive_key(requests[i])
                    : Result<KeyBuilder>(make_error(ErrorCode::unsupported, "compiled without a cache"));
    std::string id;
    std::optional<Key> key;
    if (kb) {
      key = kb->key();
      id = "k" + key->hex();
    } else if (kb.error().code == ErrorCode::unsupported) {
      // Unkeyed: the same request is the same compile, whatever the spelling
      // of its options (their checked list, no header scanned).
      CompileRequest same = requests[i];
      if (!keyed) {
        if (auto d = jit::derive_unkeyed(same)) {
          same.options = d->options;
        }
      }
      id = "r" + util::sha256_hex(worker::encode_request(same));
    } else {
      results[i] = tl::unexpected(kb.error());
      continue;
    }
    auto [it, inserted] = job_of.emplace(id, jobs.size());
    if (inserted) {
      jobs.push_back(Job{i, key, {}});
    } else {
      note_deduplicated();
    }
    jobs[it->second].members.push_back(i);
  }
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> done{0};
  std::mutex progress_mutex;
  auto work = [&] {
    for (std::size_t j = next++; j < jobs.size(); j = next++) {
      const Job& job = jobs[j];
      const CompileRequest& request = requests[job.first];
      Result<Artifact> r = make_error(ErrorCode::internal, "unset");
      if (cache != nullptr && job.key) {
        r = cache->get_or_compile(*job.key, [&] { return compile(request); });
      } else {
        const auto t0 = std::chrono::steady_clock::now();
        auto out = compile(request);
        // A worker's negative entry (a failed compile, compile_in_process) is its error here.
        r = out ? served_or_failed(std::move(out->artifact)) : Result<Artifact>(tl::unexpected(out.error()));
        if (cache != nullptr) {
          // Not cacheable: one request all the same (kcache/request_stats.hpp); the cache counts the others.
          const auto us = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                         std::chrono::steady_clock::now() - t0)
                                                         .count());
          record_request(&cache->store(), {}, r ? RequestOutcome::uncached : RequestOutcome::failed, std::nullopt,
                         us);
        }
      }
      for (std::size_t i : job.members) {
        results[i] = r;
      }
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        progress(++done, jobs.size(), request, r);
      }
    }
  };
  const std::size_t threads = std::min<std::size_t>(size(), jobs.size());
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t) {
    pool.emplace_back(work);
  }
  if (threads > 0) {
    work();
  }
  for (auto& t : pool) {
    t.join();
  }
  return results;
}

}  // namespace kcache
