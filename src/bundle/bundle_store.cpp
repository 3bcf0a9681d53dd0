// BundleStore: hits from mapped bundle files, checked like any read (bundle_store.hpp).
#include "bundle/bundle_store.hpp"

#include "bundle/bundle_file.hpp"
#include "store/file/file_check_table.hpp"
#include "util/hex.hpp"
#include "util/sha256.hpp"

#include <fmt/format.h>

#include <time.h>

namespace kcache::bundle {

// One usable bundle and what this process learnt about its payloads.
struct BundleStore::Open {
  std::shared_ptr<const BundleFile> file;
  // Per entry: 0 not checked yet, 1 checked (xxh3 holds its XXH3).
  std::unique_ptr<std::atomic<std::uint8_t>[]> checked;
  std::unique_ptr<std::atomic<std::uint64_t>[]> xxh3;
  std::atomic<bool> refused{false};
  // A remembered bundle: payloads verified in full by any process, so a
  // first hit here checks XXH3 (bundle_verdicts.hpp). Null: SHA-256.
  util::Fd place;
  std::unique_ptr<store::FileCheckTable> checks;
};

BundleStore::~BundleStore() = default;

std::unique_ptr<BundleStore>
BundleStore::open(const std::vector<std::filesystem::path>& paths, const BundleTrust& trust,
                  ReadVerify verify, const std::function<void(const std::string&)>& warn,
                  const BundleVerdicts& verdicts) {
  std::unique_ptr<BundleStore> store(new BundleStore()); // NOLINT: private constructor
  store->m_verify = verify;
  store->m_warn = warn;
  for (const auto& path : paths) {
    auto file = BundleFile::open(path, &verdicts);
    Result<void> trusted =
        file ? (*file)->check_signature(trust) : Result<void>(tl::unexpected(file.error()));
    if (!trusted) {
      if (warn) {
        warn(fmt::format("{}; the bundle is not used", trusted.error().message));
      }
      continue;
    }
    if (!(*file)->remembered()) {
      // Checked in full and trusted: later processes check only what they use.
      struct stat after {};
      struct timespec now {};
      if (::stat(path.c_str(), &after) == 0 && ::clock_gettime(CLOCK_REALTIME, &now) == 0) {
        verdicts.remember((*file)->seal(), after,
                          static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec);
      }
    }
    auto open = std::make_unique<Open>();
    const std::size_t n = (*file)->count();
    open->checked = std::make_unique<std::atomic<std::uint8_t>[]>(n);
    open->xxh3 = std::make_unique<std::atomic<std::uint64_t>[]>(n);
    if ((*file)->remembered() && verify == ReadVerify::fast_when_unchanged) {
      open->place = verdicts.open_place((*file)->seal());
      if (open->place) {
        open->checks = store::FileCheckTable::open(
            open->place.get(), 0600, store::FileCheckTable::slots_for_entries(n, store::FileCheckTable::k_max_slots),
            store::FileCheckTable::TableFile::on_first_use);
      }
    }
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
    const auto entry = b->file->entry(i);
    if (!entry) {
      m_corrupt.fetch_add(1, std::memory_order_relaxed);
      if (!b->refused.exchange(true) && m_warn) {
        m_warn(fmt::format("{}; the bundle is not used from now on", entry.error().message));
      }
      continue;
    }
    const BundleFile::Entry& e = **entry;
    const std::string_view bytes = b->file->payload_view(e);
    bool good = true;
    if (m_verify == ReadVerify::always_full || b->checked[i].load(std::memory_order_acquire) == 0) {
      // Through the mapping: what is checked is what a hit hands out. A
      // record of a full check of this very file (any process) lets XXH3
      // stand in for SHA-256, as in the disk tier.
      const std::uint64_t sha_prefix = store::sha256_prefix_of_hex(e.passport.payload_sha256);
      const std::uint64_t xxh = util::xxh3_64(bytes);
      store::CheckRecord rec;
      const bool fast = m_verify == ReadVerify::fast_when_unchanged && b->checks != nullptr && sha_prefix != 0 &&
                        b->checks->find(key, rec) &&
                        rec == store::CheckRecord::from_stat(b->file->file_stat(), xxh, sha_prefix);
      good = fast || util::to_hex(util::sha256(bytes).data(), 32) == e.passport.payload_sha256;
      if (good) {
        if (!fast && b->checks != nullptr) {
          b->checks->record(key, store::CheckRecord::from_stat(b->file->file_stat(), xxh, sha_prefix));
        }
        b->xxh3[i].store(xxh, std::memory_order_relaxed);
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
    return std::optional<Artifact>(Artifact{b->file->payload(e), e.passport});
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
      const auto entry = b->file->entry(*at);
      auto ok = entry ? b->file->copy_payload(**entry, sink) : Result<void>(tl::unexpected(entry.error()));
      if (!ok) {
        if (!bundle_refusal(ok.error()).empty()) {
          m_corrupt.fetch_add(1, std::memory_order_relaxed);
          b->refused.store(true, std::memory_order_release);
        }
        return tl::unexpected(ok.error());
      }
      m_bytes_read.fetch_add((*entry)->payload_size, std::memory_order_relaxed);
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
    for (std::size_t i = 0; i < b->file->count(); ++i) {
      const auto e = b->file->entry(i);
      if (!e) {
        b->refused.store(true, std::memory_order_release);
        if (m_warn) {
          m_warn(fmt::format("{}; the bundle is not used from now on", e.error().message));
        }
        break;
      }
      out.push_back(
          EntryInfo{(*e)->key, (*e)->passport.kind, (*e)->payload_size, (*e)->passport.created_unix_ms, 0});
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
      s.entries += b->file->count();
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
