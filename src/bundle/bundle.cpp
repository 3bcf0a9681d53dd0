// inspect_bundle, verify_bundle, install_bundle: the checks of a whole
// bundle, in the order kcache/bundle.hpp gives.
#include "kcache/bundle.hpp"

#include "bundle/bundle_file.hpp"
#include "kcache/file_store.hpp"

#include <fmt/format.h>

namespace kcache {

namespace {

// Opens `path` and runs every check: structure, digest, passports, the
// signature against `trust`, then every payload (read in bounded chunks:
// memory does not grow with the bundle's size).
Result<std::shared_ptr<const bundle::BundleFile>> open_verified(const std::filesystem::path& path,
                                                                const BundleTrust& trust) {
  auto file = bundle::BundleFile::open(path);
  if (!file) {
    return tl::unexpected(file.error());
  }
  if (auto ok = (*file)->check_signature(trust); !ok) {
    return tl::unexpected(ok.error());
  }
  for (std::size_t i = 0; i < (*file)->entries().size(); ++i) {
    if (auto ok = (*file)->check_payload((*file)->entries()[i]); !ok) {
      return tl::unexpected(ok.error());
    }
  }
  return file;
}

// Copies entry `i` into `target` and returns what the target did. The bytes
// the target stores are the bytes hashed as they were copied (never the
// mapping, which a write into the file could change after its check): into
// a FileStore, staged in chunks and published only when they match the
// passport; into another store, copied into memory first.
Result<PutOutcome> install_entry(const bundle::BundleFile& file, std::size_t i, Store& target) {
  const auto& e = file.entries()[i];
  if (auto* disk = dynamic_cast<FileStore*>(&target); disk != nullptr) {
    auto staged = disk->stage_payload(e.payload_size + e.passport_size, StagedAs::fill);
    if (!staged) {
      return tl::unexpected(staged.error());
    }
    if (auto copied = file.copy_payload(e, [&](std::string_view chunk) { return staged->write(chunk); });
        !copied) {
      return tl::unexpected(copied.error());
    }
    return staged->commit(e.passport);
  }
  std::string bytes;
  bytes.reserve(static_cast<std::size_t>(e.payload_size));
  if (auto copied = file.copy_payload(e, [&](std::string_view chunk) -> Result<void> {
        bytes.append(chunk);
        return {};
      });
      !copied) {
    return tl::unexpected(copied.error());
  }
  return target.fill(Artifact{Payload(std::move(bytes)), e.passport});
}

} // namespace

Result<BundleInfo> inspect_bundle(const std::filesystem::path& path) {
  auto file = bundle::BundleFile::open(path);
  if (!file) {
    return tl::unexpected(file.error());
  }
  return (*file)->info();
}

Result<BundleInfo> verify_bundle(const std::filesystem::path& path, const BundleTrust& trust) {
  auto file = open_verified(path, trust);
  if (!file) {
    return tl::unexpected(file.error());
  }
  return (*file)->info();
}

Result<BundleInstallReport> install_bundle(const std::filesystem::path& path,
                                           const BundleTrust& trust, Store& target,
                                           const BundleInstalled& installed) {
  // Everything is checked before the first entry is written: a bundle that
  // fails anywhere installs nothing.
  auto file = open_verified(path, trust);
  if (!file) {
    return tl::unexpected(file.error());
  }
  BundleInstallReport report;
  const auto& entries = (*file)->entries();
  report.entries = entries.size();
  // A failure part way (a full disk, a bundle changed in place) says how far the install got.
  const auto stopped = [&](Error error) {
    if (bundle_refusal(error).empty() || report.stored + report.already_present > 0) {
      error.message = fmt::format("{} (installed {} of {} entries, {} already present, before it stopped; "
                                  "what was installed stays)",
                                  error.message, report.stored, report.entries, report.already_present);
    }
    return tl::unexpected(std::move(error));
  };
  for (std::size_t i = 0; i < entries.size(); ++i) {
    auto outcome = install_entry(**file, i, target);
    if (!outcome) {
      return stopped(std::move(outcome.error()));
    }
    if (*outcome == PutOutcome::already_present) {
      ++report.already_present;
    } else {
      ++report.stored;
      report.bytes += entries[i].payload_size;
    }
    if (installed) {
      if (auto ok = installed(Artifact{(*file)->payload(entries[i]), entries[i].passport}, *outcome); !ok) {
        return stopped(std::move(ok.error()));
      }
    }
  }
  return report;
}

std::string_view bundle_refusal(const Error& error) noexcept {
  const std::string_view m = error.message;
  if (m.rfind("bundle ", 0) != 0) {
    return {};
  }
  const std::size_t open = m.find(" refused (");
  if (open == std::string_view::npos) {
    return {};
  }
  const std::size_t start = open + 10;
  const std::size_t close = m.find(')', start);
  return close == std::string_view::npos ? std::string_view{} : m.substr(start, close - start);
}

} // namespace kcache
