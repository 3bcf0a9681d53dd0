#include "deps/derivation_memo.hpp"

#include "deps/header_manifest.hpp"
#include "deps/working_directory.hpp"
#include "util/sha256.hpp"

namespace kcache::jit {

namespace {

// Picks a slot; the request itself is compared whole, so a collision costs a
// derivation, never a wrong key. One-shot XXH3 of each part, mixed in order
// (a streaming state costs more than a warm hit's whole lookup here).
std::uint64_t request_digest(const CompileRequest& r) {
  std::uint64_t d = r.options.size();
  auto add = [&d](std::string_view s) {
    d = (d ^ util::xxh3_64(s)) * 0x9e3779b97f4a7c15ULL;
    d ^= d >> 29;
  };
  add(r.backend);
  add(r.target_kind);
  add(r.name);
  add(r.source);
  for (const auto& o : r.options) {
    add(o);
  }
  return d;
}

std::size_t request_bytes(const CompileRequest& r) {
  std::size_t n = r.source.size() + r.extra_digest.size();
  for (const auto& h : r.headers) {
    n += h.bytes.size();
  }
  for (const auto& in : r.inputs) {
    n += in.bytes.size();
  }
  return n;
}

}  // namespace

DerivationMemo& DerivationMemo::instance() {
  // Never destroyed: freeing every remembered derivation (a large tree's
  // manifest with it) at exit would cost a short process more than its hit.
  static auto* memo = new DerivationMemo();  // NOLINT: process lifetime
  return *memo;
}

namespace {

// The working directories `d` depends on are the same as when it was derived.
bool directories_hold(const Derivation& d) {
  if (current_directory() != d.scan_directory) {
    return false;
  }
  if (!d.keyed_directory.empty()) {
    const auto now = nvrtc_working_directory();
    if (!now || *now != d.keyed_directory) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool derivation_still_holds(const Derivation& d) {
  return d.checks != nullptr && directories_hold(d) && checks_still_apply(*d.checks);
}

std::shared_ptr<const Derivation> DerivationMemo::find(const CompileRequest& request, std::uint64_t generation,
                                                       bool check) {
  const auto digest = request_digest(request);
  std::shared_ptr<const Derivation> d;
  {
    std::lock_guard lock(m_mutex);
    const auto it = m_entries.find(digest);
    if (it == m_entries.end() || it->second.generation != generation || !(it->second.request == request)) {
      return nullptr;
    }
    d = it->second.derivation;
  }
  if (!directories_hold(*d)) {
    return nullptr;
  }
  if (!check) {
    return d;
  }
  auto manifest = still_applying(d->checks->manifest, &d->checks->trusted_dirs);
  if (!manifest) {
    return nullptr;
  }
  if (manifest != d->checks->manifest) {
    // A directory judged by its names that hold: remembered with its identity
    // now, so that the hits after check it by one stat again.
    auto fresh = std::make_shared<Derivation>(*d);
    fresh->checks = std::make_shared<const ManifestChecks>(ManifestChecks{std::move(manifest), d->checks->trusted_dirs});
    std::lock_guard lock(m_mutex);
    if (const auto it = m_entries.find(digest); it != m_entries.end() && it->second.derivation == d) {
      it->second.derivation = fresh;
    }
    return fresh;
  }
  return d;
}

void DerivationMemo::remember(const CompileRequest& request, std::uint64_t generation,
                              std::shared_ptr<const Derivation> derivation) {
  if (!derivation || !derivation->checks || !derivation->not_cacheable.empty() ||
      derivation->scan_directory.empty()) {
    return;
  }
  const std::size_t bytes = request_bytes(request);
  if (bytes > k_max_bytes) {
    return;
  }
  const auto digest = request_digest(request);
  std::lock_guard lock(m_mutex);
  if (const auto it = m_entries.find(digest); it != m_entries.end()) {
    m_bytes -= it->second.bytes;
    m_entries.erase(it);
  }
  if (m_entries.size() >= k_max_entries || m_bytes + bytes > k_max_bytes) {
    m_entries.clear();
    m_bytes = 0;
  }
  m_entries.emplace(digest, Entry{request, generation, std::move(derivation), bytes});
  m_bytes += bytes;
}

void DerivationMemo::clear() {
  std::lock_guard lock(m_mutex);
  m_entries.clear();
  m_bytes = 0;
}

}  // namespace kcache::jit
