// MemoryStore: an LRU list of keys plus a hash map from key to entry, under
// one mutex. The list front is the most recently used entry; eviction pops
// from the back until the payload bytes fit under the cap.
#include "kcache/memory_store.hpp"

#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace kcache {

namespace {

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct MemoryStore::Impl {
  struct Entry {
    std::shared_ptr<const Artifact> artifact;  // never null; shared with get_shared() callers
    std::list<Key>::iterator position;  // in `lru`
    std::int64_t last_used_unix_ms = 0;
  };

  explicit Impl(std::uint64_t cap) : max_bytes(cap) {}

  // REQUIRES: `mutex` held. Removes least recently used entries until the
  // payload bytes held are at most `max_bytes`.
  void evict_to_cap() {
    while (size_bytes > max_bytes && !lru.empty()) {
      const auto it = entries.find(lru.back());
      size_bytes -= it->second.artifact->payload.size();
      entries.erase(it);
      lru.pop_back();
      ++counters.evictions;
    }
  }

  const std::uint64_t max_bytes;
  std::mutex mutex;
  std::list<Key> lru;
  std::unordered_map<Key, Entry, KeyHash> entries;
  std::uint64_t size_bytes = 0;
  StoreStats counters;
};

MemoryStore::MemoryStore(std::uint64_t max_bytes) : m_impl(std::make_unique<Impl>(max_bytes)) {}

MemoryStore::~MemoryStore() = default;

std::shared_ptr<const Artifact> MemoryStore::find(const Key& key) {
  const std::lock_guard lock(m_impl->mutex);
  const auto it = m_impl->entries.find(key);
  if (it == m_impl->entries.end()) {
    ++m_impl->counters.misses;
    return nullptr;
  }
  Impl::Entry& entry = it->second;
  m_impl->lru.splice(m_impl->lru.begin(), m_impl->lru, entry.position);
  entry.last_used_unix_ms = now_unix_ms();
  ++m_impl->counters.hits;
  m_impl->counters.bytes_read += entry.artifact->payload.size();
  m_impl->counters.compile_us_saved += entry.artifact->passport.compile_duration_us;
  return entry.artifact;
}

Result<std::optional<Artifact>> MemoryStore::get(const Key& key) {
  // A copy of the passport; the payload's bytes are shared (immutable), so the
  // caller keeps them however soon the entry is evicted.
  auto held = find(key);
  return held ? std::optional<Artifact>{*held} : std::optional<Artifact>{};
}

Result<std::shared_ptr<const Artifact>> MemoryStore::get_shared(const Key& key) { return find(key); }

Result<PutOutcome> MemoryStore::put(const Artifact& artifact) {
  // Verify outside the lock: hashing the payload is the expensive part.
  return insert(artifact, artifact.verify());
}

Result<PutOutcome> MemoryStore::fill(const Artifact& artifact) {
  // The payload matched its digest in the lower tier that just returned it.
  return insert(artifact, artifact.verify_shape());
}

Result<PutOutcome> MemoryStore::insert(const Artifact& artifact, Result<void> check) {
  if (auto& ok = check; !ok) {
    const std::lock_guard lock(m_impl->mutex);
    ++m_impl->counters.errors;
    return tl::unexpected(ok.error());
  }
  const Key& key = artifact.passport.key;
  const std::lock_guard lock(m_impl->mutex);
  if (const auto it = m_impl->entries.find(key); it != m_impl->entries.end()) {
    m_impl->lru.splice(m_impl->lru.begin(), m_impl->lru, it->second.position);
    return PutOutcome::already_present;
  }
  if (artifact.payload.size() > m_impl->max_bytes) {
    // Storing it would flush every other entry and then the artifact itself:
    // keep the others and count the artifact as evicted at once.
    ++m_impl->counters.puts;
    ++m_impl->counters.evictions;
    return PutOutcome::stored;
  }
  m_impl->lru.push_front(key);
  Impl::Entry entry{std::make_shared<Artifact>(artifact), m_impl->lru.begin(), now_unix_ms()};
  m_impl->entries.emplace(key, std::move(entry));
  m_impl->size_bytes += artifact.payload.size();
  ++m_impl->counters.puts;
  m_impl->counters.bytes_written += artifact.payload.size();
  m_impl->evict_to_cap();
  return PutOutcome::stored;
}

Result<bool> MemoryStore::remove(const Key& key) {
  const std::lock_guard lock(m_impl->mutex);
  const auto it = m_impl->entries.find(key);
  if (it == m_impl->entries.end()) {
    return false;
  }
  m_impl->size_bytes -= it->second.artifact->payload.size();
  m_impl->lru.erase(it->second.position);
  m_impl->entries.erase(it);
  return true;
}

Result<std::vector<EntryInfo>> MemoryStore::list() {
  const std::lock_guard lock(m_impl->mutex);
  std::vector<EntryInfo> out;
  out.reserve(m_impl->entries.size());
  // Most recently used first, which is the order people expect from an LRU.
  for (const Key& key : m_impl->lru) {
    const Impl::Entry& entry = m_impl->entries.at(key);
    const Passport& p = entry.artifact->passport;
    out.push_back(EntryInfo{key, p.kind, p.payload_size, p.created_unix_ms, entry.last_used_unix_ms});
  }
  return out;
}

Result<StoreStats> MemoryStore::stats() {
  const std::lock_guard lock(m_impl->mutex);
  StoreStats s = m_impl->counters;
  s.entries = m_impl->entries.size();
  s.size_bytes = m_impl->size_bytes;
  s.max_size_bytes = m_impl->max_bytes;
  return s;
}

}  // namespace kcache
