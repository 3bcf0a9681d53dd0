// inspect_bundle, verify_bundle, install_bundle: the checks of a whole
// bundle, in the order kcache/bundle.hpp gives.
#include "kcache/bundle.hpp"

#include "bundle/bundle_file.hpp"

namespace kcache {

namespace {

// Opens `path` and runs every check: structure, digest, passports, the
// signature against `trust`, then every payload.
Result<std::shared_ptr<const bundle::BundleFile>> open_verified(const std::filesystem::path& path,
                                                                const BundleTrust& trust) {
  auto file = bundle::BundleFile::open(path, bundle::BundleFile::Reading::whole);
  if (!file) {
    return tl::unexpected(file.error());
  }
  if (auto ok = (*file)->check_signature(trust); !ok) {
    return tl::unexpected(ok.error());
  }
  for (std::size_t i = 0; i < (*file)->entries().size(); ++i) {
    if (auto ok = (*file)->check_payload(i); !ok) {
      return tl::unexpected(ok.error());
    }
  }
  return file;
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
  for (std::size_t i = 0; i < entries.size(); ++i) {
    Artifact artifact{(*file)->payload(i), entries[i].passport};
    auto outcome = target.fill(artifact); // its payload was hashed just now
    if (!outcome) {
      return tl::unexpected(outcome.error());
    }
    if (*outcome == PutOutcome::already_present) {
      ++report.already_present;
    } else {
      ++report.stored;
      report.bytes += artifact.payload.size();
    }
    if (installed) {
      if (auto ok = installed(artifact, *outcome); !ok) {
        return tl::unexpected(ok.error());
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
