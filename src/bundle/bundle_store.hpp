// bundle/bundle_store.hpp: the read-only bundle tier.
//
// A BundleStore serves entries straight from bundle files (the `bundles`
// setting, KCACHE_BUNDLES), memory-mapped: a hit returns a Payload that
// points into the mapping, nothing is copied and nothing is ever written
// beside the files (no index, no lock, no stamp).
//
// Opening checks each bundle as a whole: its structure, digest and every
// passport (BundleFile::open), and its signature against the trusted keys. A
// bundle that fails is skipped with one warning naming the file and the
// reason; the others are used. Cost: one SHA-256 over each bundle's metadata
// (header, index, passports, padding) and one Ed25519 verification per
// bundle; no payload byte is read at open. A bundle that passed is remembered
// (bundle/bundle_verdicts.hpp): a later process that finds the same file
// unchanged checks its header, trailer and signer, and each entry it serves,
// when it first serves it (a small file read, whatever the bundle's size).
//
// Reads are verified like any read (store.hpp): the first hit of an entry in
// a process hashes its payload with SHA-256 against its passport; later hits
// compare an XXH3 of the payload with the one recorded then (ReadVerify::
// fast_when_unchanged) or hash it again (always_full). A payload that does
// not match is a miss, counted in `corrupt`, and makes the whole bundle
// refused from then on (one warning): a bundle is trusted as a whole or not
// at all.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include "bundle/bundle_verdicts.hpp"
#include "kcache/bundle.hpp"
#include "kcache/file_store.hpp"
#include "kcache/store.hpp"

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kcache::bundle {

class BundleFile;

class BundleStore final : public Store {
public:
  // Opens every file of `paths` in order (an earlier bundle wins for a key
  // held by two). Never fails: a bundle that cannot be opened or verified is
  // reported to `warn` (one line each) and skipped. `verdicts`: where
  // bundles that passed are remembered (an empty directory: none are).
  static std::unique_ptr<BundleStore> open(const std::vector<std::filesystem::path>& paths,
                                           const BundleTrust& trust, ReadVerify verify,
                                           const std::function<void(const std::string&)>& warn,
                                           const BundleVerdicts& verdicts = BundleVerdicts({}));
  ~BundleStore() override;

  std::string_view name() const noexcept override { return "bundle"; }
  std::optional<Tier> tier_kind() const noexcept override { return Tier::bundle; }
  bool writable() const noexcept override { return false; }
  // Hit: the entry from the first usable bundle that holds it (its payload
  // maps the file). Miss: no usable bundle holds it, or its payload failed
  // its check (then counted in `corrupt`). Never an error.
  Result<std::optional<Artifact>> get(const Key& key) override;
  // Hands the payload of `key` to `sink` in chunks read from the bundle file
  // (BundleFile::copy_payload: the bytes handed on are the bytes hashed, and
  // a file changed or truncated in place since it was opened is refused, not
  // copied), from the first usable bundle that holds it. Returns false when
  // none does. A refusal (`payload-mismatch`, `truncated`) is returned and
  // makes that bundle refused from then on, as a failed hit does; what `sink`
  // received must then not be used. `kcache get` copies a bundle hit this way.
  Result<bool> copy_payload(const Key& key, const std::function<Result<void>(std::string_view)>& sink);
  // Refused with `read_only`: a bundle is never written.
  Result<PutOutcome> put(const Artifact& artifact) override;
  // Returns false: nothing is ever removed from a bundle.
  Result<bool> remove(const Key& key) override;
  Result<std::vector<EntryInfo>> list() override;
  // hits, misses, corrupt, bytes_read of this process; entries and
  // size_bytes (file bytes) of the usable bundles.
  Result<StoreStats> stats() override;

  // How many bundles are in use (opened, verified and not refused since).
  std::size_t bundles_in_use() const noexcept;

private:
  struct Open;
  BundleStore() = default;
  std::vector<std::unique_ptr<Open>> m_bundles;
  ReadVerify m_verify = ReadVerify::fast_when_unchanged;
  std::function<void(const std::string&)> m_warn;
  std::atomic<std::uint64_t> m_hits{0};
  std::atomic<std::uint64_t> m_misses{0};
  std::atomic<std::uint64_t> m_corrupt{0};
  std::atomic<std::uint64_t> m_bytes_read{0};
};

} // namespace kcache::bundle
