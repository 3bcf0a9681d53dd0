#include "store/remote/remote_store.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "store/remote/object_stream.hpp"
#include "store/remote/remote_counters.hpp"

namespace kcache::remote {

namespace {
using Clock = std::chrono::steady_clock;
constexpr std::size_t k_latency_samples = 4096;


// `message` without the URL of the remote it came from, for a line that
// names the remote once already: the backends name the server in their
// errors, and nested errors (a cluster's retries) name it again.
std::string without_url(std::string message, const RemoteSpec& spec) {
  const std::string masked = spec.masked();
  const std::string server = masked.substr(0, masked.find('?'));
  for (const std::string& url : {masked, server}) {
    const std::pair<std::string, std::string> forms[] = {
        {" on " + url + ":", ":"}, {" to " + url + ":", ":"}, {" on " + url, ""}, {" to " + url, ""},
        {" of " + url, ""},        {url + ": ", ""},          {url, "it"}};
    for (const auto& [form, by] : forms) {
      for (auto at = message.find(form); at != std::string::npos; at = message.find(form, at + by.size())) {
        message.replace(at, form.size(), by);
      }
    }
  }
  return message;
}

// Receives a downloaded object: held in memory while it is small, else
// decoded as it arrives into a payload staged in the local store.
class SpoolSink final : public ObjectSink {
 public:
  // `memory_fallback`: when `local` cannot stage the object, hold it in
  // memory instead of failing (a hit; a pull fails with the local error).
  SpoolSink(const Key& key, const CodecOptions& codec, FileStore* local, std::uint64_t stream_min,
            bool memory_fallback)
      : m_key(key), m_codec(codec), m_local(local), m_stream_min(stream_min), m_memory_fallback(memory_fallback) {}

  bool begin(std::optional<std::uint64_t> size) override {
    if (size && m_local != nullptr && *size >= m_stream_min) {
      return start_stream(*size);
    }
    if (size) {
      m_buffer.reserve(static_cast<std::size_t>(*size));
    }
    return true;
  }

  bool write(std::string_view bytes) override {
    if (m_decoder) {
      return m_decoder->write(bytes);
    }
    if (m_local != nullptr && m_buffer.size() + bytes.size() >= m_stream_min) {
      // No Content-Length (or a short one): switch to streaming on the way.
      if (!start_stream(0)) {
        return false;
      }
      if (!m_decoder) {  // fell back to memory
        m_buffer.append(bytes);
        return true;
      }
      if (!m_decoder->write(m_buffer)) {
        return false;
      }
      std::string().swap(m_buffer);
      return m_decoder->write(bytes);
    }
    m_buffer.append(bytes);
    return true;
  }

  ObjectDecoder* decoder() noexcept { return m_decoder.get(); }
  std::string& buffer() noexcept { return m_buffer; }
  StagedPayload& staged() noexcept { return m_staged; }
  // The local store's error that stopped the download (staging or writing).
  std::optional<Error> local_error() const {
    if (m_local_error) {
      return m_local_error;
    }
    return m_decoder ? m_decoder->sink_error() : std::nullopt;
  }
  std::uint64_t received() const noexcept { return m_decoder ? m_decoder->received() : m_buffer.size(); }

 private:
  bool start_stream(std::uint64_t size) {
    auto staged = m_local->stage_payload(size, StagedAs::fill);
    if (!staged && m_memory_fallback) {
      // The local store cannot take it (read-only, degraded, full): a hit
      // still serves it, held in memory as for a store without one (bounded
      // by max_entry_size).
      m_local = nullptr;
      return true;
    }
    if (!staged) {
      m_local_error = staged.error();
      return false;
    }
    m_staged = std::move(*staged);
    m_decoder = std::make_unique<ObjectDecoder>(m_key, m_codec,
                                                [this](std::string_view b) { return m_staged.write(b); });
    return true;
  }

  const Key& m_key;
  const CodecOptions& m_codec;
  FileStore* m_local;
  std::uint64_t m_stream_min;
  bool m_memory_fallback;
  std::string m_buffer;
  StagedPayload m_staged;
  std::unique_ptr<ObjectDecoder> m_decoder;
  std::optional<Error> m_local_error;
};

// What a fetch brought: an artifact decoded in memory, or an entry published
// in the local store (outcome, with its verified passport and the committed
// staged payload), or nothing (a miss).
struct Fetch {
  std::optional<Artifact> artifact;
  Fetched outcome = Fetched::miss;
  std::optional<Passport> passport;  // streamed: the passport committed
  StagedPayload staged;              // streamed: the payload committed
};

}  // namespace

struct RemoteStore::Impl {
  RemoteStoreOptions options;
  std::unique_ptr<RemoteBackend> backend;
  std::shared_ptr<RemoteBreaker> breaker;  // never null; shared per server in this process
  BreakerPolicy policy;

  mutable std::mutex mutex;  // guards everything below
  RemoteStats stats;
  std::unordered_set<Key, KeyHash> rejected_keys;
  std::vector<std::uint32_t> latencies;
  std::size_t latency_next = 0;
  std::once_flag warned_down;  // one line per process: failed, skipped by the breaker, or out of budget

  // Counts into this remote's counters (shared by the directory's processes
  // with its breaker; `kcache stats` adds up every remote's for its totals).
  void count(RemoteCounter c, std::uint64_t v = 1) { breaker->counters().add(c, v); }
  std::once_flag warned_rejected;

  void warn(const std::string& line) {
    if (options.warn) {
      options.warn(line);
    } else {
      std::fprintf(stderr, "kcache: warning: %s\n", line.c_str());
    }
  }

  std::string skipped_message() const {
    return "remote " + options.spec.masked() + " is skipped for now after repeated failures (circuit breaker)";
  }

  // True when an operation may go to the server; counts a skip otherwise.
  bool admit() {
    (void)take_failover_wait();  // what an earlier operation of this thread waited is not this one's
    if (options.budget && options.budget->spent()) {
      std::lock_guard lock(mutex);
      ++stats.skipped;
      count(RemoteCounter::skipped);
      count(RemoteCounter::budget_skipped);
      return false;
    }
    if (breaker->admit(policy) != BreakerAdmit::open) {
      return true;
    }
    {
      std::lock_guard lock(mutex);
      ++stats.skipped;
      count(RemoteCounter::skipped);
    }
    // Opened by another process (or an earlier store of this one): say once
    // why this process does not use the remote.
    if (!options.warn_failures) {
      return false;
    }
    std::call_once(warned_down, [&] {
      const BreakerState st = breaker->state();
      const std::uint64_t now = RemoteBreaker::now_ms();
      const std::uint64_t left = st.open_until_ms > now ? (st.open_until_ms - now + 999) / 1000 : 0;
      warn(fmt::format("remote {} is skipped: it failed recently ({} failure(s) in a row, seen by the processes "
                       "of this cache directory); compiles go on without it, and it is tried again in {} s (see "
                       "`kcache stats`)",
                       options.spec.masked(), st.failures, left));
    });
    return false;
  }

  // Spends a failed or slow operation's time from the process's budget, less
  // the time it waited for a cluster to fail over: waiting is not lost time.
  void spend(Clock::duration elapsed, bool failed_op) {
    elapsed -= std::min(elapsed, take_failover_wait());
    if (!options.budget) {
      return;
    }
    const auto timeout = std::chrono::milliseconds(options.spec.timeout_ms);
    if (!failed_op && elapsed * 2 < timeout) {
      return;
    }
    if (options.budget->spend(elapsed)) {
      std::call_once(warned_down, [&] {});  // this line says it all
      warn(fmt::format("remote work of this process has cost {} ms (remote_budget_ms = {}); every remote is "
                       "skipped for the rest of this process (last: {})",
                       options.budget->spent_ms(), options.budget->limit_ms(), options.spec.masked()));
    }
  }

  void succeeded(Clock::duration elapsed) {
    breaker->succeeded();
    spend(elapsed, false);
  }

  void failed(const Error& error, std::string_view op, Clock::duration elapsed) {
    const bool hung = error.code == ErrorCode::timeout ||
                      elapsed >= std::chrono::milliseconds(options.spec.timeout_ms);
    const bool opened = breaker->failed(policy, hung);
    {
      std::lock_guard lock(mutex);
      ++stats.errors;
      count(RemoteCounter::errors);
      if (opened) {
        ++stats.breaker_opened;
        count(RemoteCounter::breaker_opened);
      }
    }
    if (options.warn_failures) {
      std::call_once(warned_down, [&] {
        const std::string what_next =
            options.breaker_failures == 0
                ? std::string("its circuit breaker is off: remote_breaker_failures = 0")
                : fmt::format("after {} failures in a row, or one timeout, every process of this cache directory "
                              "skips it for {} s; see `kcache stats`",
                              options.breaker_failures, options.breaker_seconds);
        warn(fmt::format("remote {} failed ({}: {}); compiles go on without it ({})", options.spec.masked(), op,
                         without_url(error.describe(), options.spec), what_next));
      });
    }
    spend(elapsed, true);
  }

  void record_latency(Clock::duration d) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
    const auto v = static_cast<std::uint32_t>(std::min<long long>(us, 0xffffffffLL));
    breaker->counters().add_latency(v);
    std::lock_guard lock(mutex);
    if (latencies.size() < k_latency_samples) {
      latencies.push_back(v);
    } else {
      latencies[latency_next] = v;
      latency_next = (latency_next + 1) % k_latency_samples;
    }
  }

  // Counts a bad object of `size` downloaded bytes as a miss rejected for
  // `reason`, warns once, and never fetches `key` again. Returns the miss.
  std::optional<Artifact> reject(const Key& key, Rejection reason, const std::string& why, std::size_t size) {
    std::lock_guard lock(mutex);
    stats.bytes_in += size;
    count(RemoteCounter::bytes_in, size);
    ++stats.rejected;
    ++stats.rejected_by[static_cast<std::size_t>(reason)];
    ++stats.misses;
    count(RemoteCounter::rejected);
    count(static_cast<RemoteCounter>(static_cast<unsigned>(RemoteCounter::rejected_too_large) +
                                     static_cast<unsigned>(reason)));
    count(RemoteCounter::misses);
    rejected_keys.insert(key);
    std::call_once(warned_rejected, [&] {
      warn(fmt::format("remote {} holds a bad object for key {} ({}: {}); it is ignored (a miss), never copied "
                       "locally, and counted in `kcache stats`",
                       options.spec.masked(), key.hex(), to_string(reason), why));
    });
    return std::nullopt;
  }

  // Runs one small operation (a lease command, EXISTS) through the breaker.
  // `lease`: refused as unsupported where this remote takes no leases.
  template <class Op>
  auto guarded(std::string_view what, bool lease, const Op& op) -> decltype(op()) {
    if (lease && (!backend->supports_leases() || options.spec.read_only)) {
      return make_error(ErrorCode::unsupported, "remote " + options.spec.masked() + " takes no leases");
    }
    if (!admit()) {
      return make_error(ErrorCode::busy, skipped_message());
    }
    const auto start = Clock::now();
    auto r = op();
    if (!r) {
      if (r.error().code != ErrorCode::unsupported) {
        failed(r.error(), what, Clock::now() - start);
      }
      return r;
    }
    if (lease) {
      // A lease command that succeeded spends nothing from the budget, however
      // long it took: on a cluster it rides out a failover (up to twice
      // cluster-node-timeout) on purpose, and the budget is for a remote that
      // fails or hangs, not for one that answered.
      breaker->succeeded();
    } else {
      succeeded(Clock::now() - start);
    }
    return r;
  }

  // Why an upload is not sent at all (read_only, the breaker, the budget); {} when it may go.
  Result<void> may_upload() {
    if (options.spec.read_only) {
      return make_error(ErrorCode::read_only,
                        "remote " + options.spec.masked() + " is read_only; nothing is written to it");
    }
    if (!admit()) {
      return make_error(ErrorCode::busy, skipped_message());
    }
    return {};
  }

  bool streams_entry(std::uint64_t payload_size) const {
    return backend->streams() && payload_size >= options.stream_min_bytes;
  }

  Result<PutOutcome> upload(const Artifact& artifact) {
    if (auto ok = may_upload(); !ok) {
      return tl::unexpected(ok.error());
    }
    if (streams_entry(artifact.payload.size())) {
      // Read from the payload already in memory as it is sent: no copy of it.
      const Payload& payload = artifact.payload;
      return upload_streamed(artifact.passport, [&payload](std::uint64_t at, char* out, std::size_t n) -> Result<void> {
        std::memcpy(out, payload.data() + at, n);
        return {};
      });
    }
    const std::string object = encode_object(artifact, options.codec);
    return send_object(artifact.passport.key, object.size(),
                       [&] { return backend->put(object_name(artifact.passport.key), object, options.spec.ttl_s); });
  }

  Result<PutOutcome> upload_streamed(const Passport& passport, PayloadReadAt read) {
    auto encoder = ObjectEncoder::make(passport, std::move(read), options.codec);
    if (!encoder) {
      breaker->succeeded();  // the local read failed, not the remote (gives a probe back)
      return tl::unexpected(encoder.error());
    }
    ObjectEncoder& source = **encoder;
    return send_object(passport.key, source.size(),
                       [&] { return backend->put_stream(object_name(passport.key), source, options.spec.ttl_s); });
  }

  // Sends an object of `size` bytes with `send` (after the size check).
  Result<PutOutcome> send_object(const Key& key, std::uint64_t size, const std::function<Result<bool>()>& send) {
    if (size > options.spec.max_entry_size) {
      // Not a failure of the remote: the entry is simply not shared (and a
      // half-open probe claimed by admit() is given back). Said once per
      // process (whatever the remote), counted every time.
      breaker->succeeded();
      const std::string why =
          fmt::format("entry {} is {} bytes as a remote object, above max_entry_size ({} bytes); not uploaded to {}",
                      key.hex(), size, options.spec.max_entry_size, options.spec.masked());
      {
        std::lock_guard lock(mutex);
        ++stats.puts_too_large;
        count(RemoteCounter::puts_too_large);
      }
      static std::atomic<bool> warned_too_large{false};
      if (!warned_too_large.exchange(true)) {
        warn(why + " (raise it with ?max_entry_size=BYTES on the remote URL; further entries over it are only "
                   "counted, `kcache stats`)");
      }
      return make_error(ErrorCode::invalid_argument, why);
    }
    const auto start = Clock::now();
    auto r = send();
    if (!r) {
      failed(r.error(), "put", Clock::now() - start);
      return tl::unexpected(r.error());
    }
    succeeded(Clock::now() - start);
    std::lock_guard lock(mutex);
    if (*r) {
      ++stats.puts;
      stats.bytes_out += size;
      count(RemoteCounter::puts);
      count(RemoteCounter::bytes_out, size);
    } else {
      ++stats.puts_present;
      count(RemoteCounter::puts_present);
    }
    return *r ? PutOutcome::stored : PutOutcome::already_present;
  }

  // Counts a hit of `size` downloaded bytes.
  void count_hit(std::uint64_t size, std::uint64_t compile_us) {
    std::lock_guard lock(mutex);
    stats.bytes_in += size;
    count(RemoteCounter::bytes_in, size);
    ++stats.hits;
    stats.compile_us_saved += compile_us;
    count(RemoteCounter::hits);
    count(RemoteCounter::compile_us_saved, compile_us);
  }

  void count_miss() {
    std::lock_guard lock(mutex);
    ++stats.misses;
    count(RemoteCounter::misses);
  }

  // get() of `key`: with `local` (and a streaming backend) an object of
  // stream_min_bytes or more is published into `local` as it arrives, a
  // smaller one decoded in memory (and a large one too, with
  // `memory_fallback`, when `local` cannot stage it). Failure: only
  // `local`'s write error (a miss is counted as every miss).
  Result<Fetch> fetch(const Key& key, FileStore* local, bool memory_fallback) {
    {
      std::lock_guard lock(mutex);
      if (rejected_keys.contains(key)) {
        ++stats.misses;
        return Fetch{};
      }
    }
    if (!admit()) {
      return Fetch{};
    }
    const bool streamed = local != nullptr && backend->streams();
    SpoolSink sink(key, options.codec, local, options.stream_min_bytes, memory_fallback);
    std::optional<std::string> whole;
    const auto start = Clock::now();
    Result<bool> got = true;
    if (streamed) {
      got = backend->get_stream(object_name(key), options.spec.max_entry_size, sink);
    } else {
      auto value = backend->get(object_name(key), options.spec.max_entry_size);
      got = value.map([&](std::optional<std::string>& v) {
        whole = std::move(v);
        return whole.has_value();
      });
    }
    const auto elapsed = Clock::now() - start;
    record_latency(elapsed);
    if (!got && got.error().code == k_object_too_large) {
      // Larger than max_entry_size, refused before it was downloaded
      // (RemoteBackend::get): a bad object, not a failure of the remote.
      succeeded(elapsed);
      reject(key, Rejection::too_large, got.error().message, 0);
      return Fetch{};
    }
    if (!got) {
      failed(got.error(), "get", elapsed);
      return Fetch{};
    }
    succeeded(elapsed);
    if (auto local_error = sink.local_error()) {
      return tl::unexpected(*local_error);  // the local store warned and counted it
    }
    if (ObjectDecoder* decoder = sink.decoder()) {
      auto passport = decoder->finish();
      if (!passport) {
        reject(key, passport.error().reason, passport.error().message, decoder->received());
        return Fetch{};  // the staged payload is dropped with the sink
      }
      auto put = sink.staged().commit(*passport);
      if (!put) {
        return tl::unexpected(put.error());
      }
      count_hit(decoder->received(), passport->compile_duration_us);
      return Fetch{std::nullopt, *put == PutOutcome::stored ? Fetched::stored : Fetched::already_present,
                   std::move(*passport), std::move(sink.staged())};
    }
    if (streamed) {
      whole = std::move(sink.buffer());
    }
    if (!*got || !whole || (streamed && whole->empty())) {  // an empty HTTP body is no object
      count_miss();
      return Fetch{};
    }
    auto decoded = decode_object(*whole, key, options.codec);
    if (!decoded) {
      reject(key, decoded.error().reason, decoded.error().message, whole->size());
      return Fetch{};
    }
    count_hit(whole->size(), decoded->passport.compile_duration_us);
    return Fetch{std::move(*decoded), Fetched::stored, std::nullopt, StagedPayload()};
  }
};

Result<std::unique_ptr<RemoteStore>> RemoteStore::open(RemoteStoreOptions options) {
  auto backend = make_backend(options.spec);
  if (!backend) {
    return tl::unexpected(backend.error());
  }
  return std::make_unique<RemoteStore>(std::move(options), std::move(*backend));
}

RemoteStore::RemoteStore(RemoteStoreOptions options, std::unique_ptr<RemoteBackend> backend)
    : m_impl(std::make_unique<Impl>()) {
  m_impl->options = std::move(options);
  m_impl->options.codec.max_entry_size = m_impl->options.spec.max_entry_size;
  m_impl->backend = std::move(backend);
  const RemoteStoreOptions& o = m_impl->options;
  m_impl->breaker = RemoteBreaker::open(o.stats_dir, o.spec, o.stats_group_shared);
  m_impl->policy.failures = o.breaker_failures;
  m_impl->policy.seconds = o.breaker_seconds;
  // A probe is one operation: bounded by its connect and operation timeouts
  // (twice for a cluster's retries), plus slack for a loaded machine.
  m_impl->policy.probe_ms = std::uint64_t{o.spec.connect_timeout_ms} + 2 * std::uint64_t{o.spec.timeout_ms} + 1000;
}

RemoteStore::~RemoteStore() = default;

bool RemoteStore::writable() const noexcept { return !m_impl->options.spec.read_only; }

Result<std::optional<Artifact>> RemoteStore::get(const Key& key) {
  Impl& m = *m_impl;
  FileStore* local = m.options.local;
  auto fetched = m.fetch(key, local, true);
  if (!fetched) {
    return std::optional<Artifact>{};  // the local store could not take it: a miss (it warned)
  }
  if (fetched->artifact) {
    return std::move(fetched->artifact);
  }
  if (fetched->outcome == Fetched::miss) {
    return std::optional<Artifact>{};
  }
  // Streamed into the local store: the bytes were SHA-256-checked as they
  // were staged and the passport fully verified, so they are served from the
  // staged file itself, not read and hashed again through the entry
  // (StagedPayload::committed_payload). Only if that fails, read the entry.
  if (auto payload = fetched->staged.committed_payload(); payload && fetched->passport) {
    Artifact artifact;
    artifact.passport = std::move(*fetched->passport);
    artifact.payload = std::move(*payload);
    return std::optional<Artifact>(std::move(artifact));
  }
  auto here = local->get(key);
  if (!here) {
    return std::optional<Artifact>{};
  }
  return std::move(*here);
}

Result<Fetched> RemoteStore::fetch_into(const Key& key, FileStore& local) {
  auto fetched = m_impl->fetch(key, &local, false);
  if (!fetched) {
    return tl::unexpected(fetched.error());
  }
  if (!fetched->artifact) {
    return fetched->outcome;
  }
  auto put = local.fill(*fetched->artifact);
  if (!put) {
    return tl::unexpected(put.error());
  }
  return *put == PutOutcome::stored ? Fetched::stored : Fetched::already_present;
}

Result<PutOutcome> RemoteStore::put_file(const PayloadFile& file) {
  Impl& m = *m_impl;
  if (!m.streams_entry(file.size())) {
    std::string bytes(file.size(), '\0');
    if (auto r = file.read_at(0, bytes.data(), bytes.size()); !r) {
      return tl::unexpected(r.error());
    }
    Artifact artifact;
    artifact.passport = file.passport();
    artifact.payload = Payload(std::move(bytes));
    return fill(artifact);
  }
  if (auto ok = m.may_upload(); !ok) {
    return tl::unexpected(ok.error());
  }
  return m.upload_streamed(file.passport(), [&file](std::uint64_t at, char* out, std::size_t n) {
    return file.read_at(at, out, n);
  });
}

Result<PutOutcome> RemoteStore::put(const Artifact& artifact) {
  if (auto ok = artifact.verify(); !ok) {
    return tl::unexpected(ok.error());
  }
  return m_impl->upload(artifact);
}

Result<PutOutcome> RemoteStore::fill(const Artifact& artifact) {
  if (auto ok = artifact.verify_shape(); !ok) {
    return tl::unexpected(ok.error());
  }
  return m_impl->upload(artifact);
}

Result<bool> RemoteStore::remove(const Key& key) {
  if (m_impl->options.spec.read_only) {
    return false;
  }
  if (!m_impl->admit()) {
    return false;
  }
  const auto start = Clock::now();
  auto r = m_impl->backend->remove(object_name(key));
  if (!r) {
    m_impl->failed(r.error(), "remove", Clock::now() - start);
    return tl::unexpected(r.error());
  }
  m_impl->succeeded(Clock::now() - start);
  return *r;
}

Result<std::vector<EntryInfo>> RemoteStore::list() { return std::vector<EntryInfo>{}; }

Result<StoreStats> RemoteStore::stats() {
  const RemoteStats r = remote_stats();
  StoreStats s;
  s.hits = r.hits;
  s.misses = r.misses;
  s.puts = r.puts;
  s.puts_skipped = r.skipped;
  s.corrupt = r.rejected;
  s.errors = r.errors;
  s.bytes_read = r.bytes_in;
  s.bytes_written = r.bytes_out;
  s.compile_us_saved = r.compile_us_saved;
  s.remote = true;
  return s;
}

bool RemoteStore::supports_leases() const noexcept {
  return m_impl->backend->supports_leases() && !m_impl->options.spec.read_only;
}

Result<bool> RemoteStore::lease_take(const Key& key, std::string_view token, std::uint64_t ttl_ms) {
  return m_impl->guarded("lease", true, [&] { return m_impl->backend->lease_take(lease_name(key), token, ttl_ms); });
}

Result<bool> RemoteStore::lease_renew(const Key& key, std::string_view token, std::uint64_t ttl_ms) {
  return m_impl->guarded("lease renew", true,
                         [&] { return m_impl->backend->lease_renew(lease_name(key), token, ttl_ms); });
}

Result<bool> RemoteStore::lease_release(const Key& key, std::string_view token) {
  return m_impl->guarded("lease release", true,
                         [&] { return m_impl->backend->lease_release(lease_name(key), token); });
}

Result<std::optional<LeaseInfo>> RemoteStore::lease_inspect(const Key& key) {
  return m_impl->guarded("lease inspect", true, [&] { return m_impl->backend->lease_inspect(lease_name(key)); });
}

Result<bool> RemoteStore::lease_take_foreign(const Key& key, std::string_view seen, std::string_view token,
                                             std::uint64_t ttl_ms) {
  return m_impl->guarded("lease takeover", true, [&] {
    return m_impl->backend->lease_take_foreign(lease_name(key), seen, token, ttl_ms);
  });
}

Result<bool> RemoteStore::exists(const Key& key) {
  return m_impl->guarded("exists", false, [&] { return m_impl->backend->exists(object_name(key)); });
}

RemoteStats RemoteStore::remote_stats() const {
  std::lock_guard lock(m_impl->mutex);
  RemoteStats out = m_impl->stats;
  if (!m_impl->latencies.empty()) {
    std::vector<std::uint32_t> sorted = m_impl->latencies;
    std::sort(sorted.begin(), sorted.end());
    auto at = [&](double q) {
      const auto i = static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
      return sorted[std::min(i, sorted.size() - 1)];
    };
    out.get_p50_us = at(0.50);
    out.get_p99_us = at(0.99);
  }
  return out;
}

RemoteBreaker& RemoteStore::breaker() const noexcept { return *m_impl->breaker; }

const RemoteSpec& RemoteStore::spec() const noexcept { return m_impl->options.spec; }

Result<std::string> RemoteStore::describe() { return m_impl->backend->describe(); }

}  // namespace kcache::remote
