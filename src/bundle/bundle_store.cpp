// BundleStore: hits from mapped bundle files, checked like any read (bundle_store.hpp).
#include "bundle/bundle_store.hpp"

#include "bundle/bundle_file.hpp"
#include "util/hex.hpp"
#include "util/sha256.hpp"

#include <fmt/format.h>

namespace kcache::bundle {

// One usable bundle and what this process learnt about its payloads.
struct BundleStore::Open {
  std::shared_ptr<const BundleFile> file;
  // Per entry: 0 not checked yet, 1 checked (xxh3 holds its XXH3).
  std::unique_ptr<std::atomic<std::uint8_t>[]> checked;
  std::unique_ptr<std::atomic<std::uint64_t>[]> xxh3;
  std::atomic<bool> refused{false};
};

BundleStore::~BundleStore() = default;

std::unique_ptr<BundleStore>
BundleStore::open(const std::vector<std::filesystem::path>& paths, const BundleTrust& trust,
                  ReadVerify verify, const std::function<void(const std::string&)>& warn) {
  std::unique_ptr<BundleStore> store(new BundleStore()); // NOLINT: private constructor
  store->m_verify = verify;
  store->m_warn = warn;
  for (const auto& path : paths) {
    auto file = BundleFile::open(path);
    Result<void> trusted =
        file ? (*file)->check_signature(trust) : Result<void>(tl::unexpected(file.error()));
    if (!trusted) {
      if (warn) {
        warn(fmt::format("{}; the bundle is not used", trusted.error().message));
      }
      continue;
    }
    auto open = std::make_unique<Open>();
    const std::size_t n = (*file)->entries().size();
    open->checked = std::make_unique<std::atomic<std::uint8_t>[]>(n);
    open->xxh3 = std::make_unique<std::atomic<std::uint64_t>[]>(n);
    open->file = std::move(*file);
    store->m_bundles.push_back(std::move(open));
  }
  return store;
}

Result<std::optional<Artifact>> BundleStore::get(const Key& key) {
  for (const auto& b : m_bundles) {
    if (b->refused.load(std::memory_order_acquire)) {
      continue;
    }
    const auto at = b->file->find(key);
    if (!at) {
      continue;
    }
    const std::size_t i = *at;
    const std::string_view bytes = b->file->payload_view(i);
    bool good = true;
    if (m_verify == ReadVerify::always_full || b->checked[i].load(std::memory_order_acquire) == 0) {
      // Through the mapping: what is checked is what a hit hands out.
      good = util::to_hex(util::sha256(bytes).data(), 32) == b->file->entries()[i].passport.payload_sha256;
      if (good) {
        b->xxh3[i].store(util::xxh3_64(bytes), std::memory_order_relaxed);
        b->checked[i].store(1, std::memory_order_release);
      }
    } else {
      good = util::xxh3_64(bytes) == b->xxh3[i].load(std::memory_order_relaxed);
    }
    if (!good) {
      m_corrupt.fetch_add(1, std::memory_order_relaxed);
      if (!b->refused.exchange(true) && m_warn) {
        m_warn(fmt::format(
            "bundle {} refused (payload-mismatch): the payload of entry {} changed after the "
            "bundle "
            "was opened or does not match its passport; the bundle is not used from now on",
            b->file->path().string(), key.hex()));
      }
      continue;
    }
    m_hits.fetch_add(1, std::memory_order_relaxed);
    m_bytes_read.fetch_add(bytes.size(), std::memory_order_relaxed);
    return std::optional<Artifact>(Artifact{b->file->payload(i), b->file->entries()[i].passport});
  }
  m_misses.fetch_add(1, std::memory_order_relaxed);
  return std::optional<Artifact>{};
}

Result<bool> BundleStore::copy_payload(const Key& key, const BundleFile::ChunkSink& sink) {
  for (const auto& b : m_bundles) {
    if (b->refused.load(std::memory_order_acquire)) {
      continue;
    }
    if (const auto at = b->file->find(key)) {
      if (auto ok = b->file->copy_payload(*at, sink); !ok) {
        if (!bundle_refusal(ok.error()).empty()) {
          m_corrupt.fetch_add(1, std::memory_order_relaxed);
          b->refused.store(true, std::memory_order_release);
        }
        return tl::unexpected(ok.error());
      }
      m_bytes_read.fetch_add(b->file->entries()[*at].payload_size, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

Result<PutOutcome> BundleStore::put(const Artifact& artifact) {
  return make_error(ErrorCode::read_only,
                    fmt::format("the bundle tier is read-only; {} is not written to it",
                                artifact.passport.key.hex()));
}

Result<bool> BundleStore::remove(const Key&) {
  return false;
}

Result<std::vector<EntryInfo>> BundleStore::list() {
  std::vector<EntryInfo> out;
  for (const auto& b : m_bundles) {
    if (b->refused.load(std::memory_order_acquire)) {
      continue;
    }
    for (const auto& e : b->file->entries()) {
      out.push_back(
          EntryInfo{e.key, e.passport.kind, e.payload_size, e.passport.created_unix_ms, 0});
    }
  }
  return out;
}

Result<StoreStats> BundleStore::stats() {
  StoreStats s;
  s.hits = m_hits.load(std::memory_order_relaxed);
  s.misses = m_misses.load(std::memory_order_relaxed);
  s.corrupt = m_corrupt.load(std::memory_order_relaxed);
  s.bytes_read = m_bytes_read.load(std::memory_order_relaxed);
  for (const auto& b : m_bundles) {
    if (!b->refused.load(std::memory_order_acquire)) {
      s.entries += b->file->entries().size();
      s.size_bytes += b->file->size();
    }
  }
  return s;
}

std::size_t BundleStore::bundles_in_use() const noexcept {
  std::size_t n = 0;
  for (const auto& b : m_bundles) {
    n += b->refused.load(std::memory_order_acquire) ? 0 : 1;
  }
  return n;
}

} // namespace kcache::bundle
