// python/src/py_bundle.cpp: kcache.bundle.keygen / create / verify / install /
// ls (as `kcache bundle ...`).
#include "bindings.hpp"
#include "kcache/bundle.hpp"
#include "kcache/file_store.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <optional>
#include <string>
#include <vector>

namespace kcache::python {

namespace {

// Raises a refusal as kcache.BundleRefused (the "bundle" family), anything else by its code.
[[noreturn]] void raise_bundle(Error error) {
  const bool refused = !bundle_refusal(error).empty();
  throw PyKcacheError{std::move(error), refused ? "bundle" : ""};
}

template <class T>
T unwrap_bundle(Result<T>&& result) {
  if (!result) {
    raise_bundle(std::move(result.error()));
  }
  return std::move(*result);
}

BundleTrust trust_of(const std::optional<std::vector<std::string>>& trust, const Config& config) {
  std::vector<std::filesystem::path> files;
  if (trust) {
    for (const auto& t : *trust) {
      refuse_nul(t, "trust");
      files.emplace_back(t);
    }
  } else {
    files = config.bundle_trusted_keys;
  }
  return BundleTrust{unwrap(read_bundle_public_keys(files))};
}

nb::dict info_dict(const BundleInfo& info) {
  nb::dict d;
  d["file"] = info.file.string();
  d["file_bytes"] = info.file_bytes;
  d["payload_bytes"] = info.payload_bytes;
  d["digest"] = info.digest_hex;
  d["signed"] = info.is_signed;
  d["signer"] = info.signer_id;
  nb::list entries;
  for (const auto& e : info.entries) {
    nb::dict x;
    x["key"] = e.key.hex();
    x["kind"] = e.passport.kind;
    x["size"] = e.passport.payload_size;
    x["arch"] = e.passport.target.arch;
    x["host"] = e.passport.target.host;
    x["producer"] = e.passport.producer.name;
    entries.append(x);
  }
  d["entries"] = entries;
  return d;
}

} // namespace

void bind_bundle(nb::module_& m) {
  m.def(
      "_bundle_keygen",
      [](const std::string& private_key, const std::string& public_key) {
        refuse_nul(private_key, "path");
        refuse_nul(public_key, "public");
        nb::gil_scoped_release release;
        return unwrap(generate_bundle_keys(private_key, public_key)).id();
      },
      nb::arg("private_key"), nb::arg("public_key"));

  m.def(
      "_bundle_create",
      [](const std::string& path, std::optional<std::vector<std::string>> keys,
         std::optional<std::string> sign, const Config& c) {
        refuse_nul(path, "path");
        BundleSummary summary;
        {
          nb::gil_scoped_release release;
          auto store = unwrap(FileStore::open(c.file_store_options()));
          std::vector<Key> wanted;
          if (keys) {
            for (const auto& k : *keys) {
              wanted.push_back(unwrap(Key::parse(k)));
            }
          } else {
            for (const auto& e : unwrap(store->list())) {
              wanted.push_back(e.key);
            }
          }
          std::vector<Artifact> artifacts;
          for (const Key& k : wanted) {
            auto a = unwrap(store->get(k));
            if (!a) {
              if (!keys) {
                continue; // evicted since it was listed
              }
              raise(ErrorCode::not_found, k.hex() + " is not in the local cache");
            }
            artifacts.push_back(std::move(*a));
          }
          BundleCreateOptions options;
          if (sign) {
            refuse_nul(*sign, "sign");
            options.sign_key_file = *sign;
          }
          summary = unwrap(create_bundle(path, std::move(artifacts), options));
        }
        nb::dict d;
        d["file"] = path;
        d["entries"] = summary.entries;
        d["payload_bytes"] = summary.payload_bytes;
        d["file_bytes"] = summary.file_bytes;
        d["digest"] = summary.digest_hex;
        d["signer"] = summary.signer_id;
        return d;
      },
      nb::arg("path"), nb::arg("keys").none(), nb::arg("sign").none(), nb::arg("config"));

  m.def(
      "_bundle_verify",
      [](const std::string& path, std::optional<std::vector<std::string>> trust, const Config& c) {
        refuse_nul(path, "path");
        BundleInfo info;
        {
          nb::gil_scoped_release release;
          info = unwrap_bundle(verify_bundle(path, trust_of(trust, c)));
        }
        return info_dict(info);
      },
      nb::arg("path"), nb::arg("trust").none(), nb::arg("config"));

  m.def(
      "_bundle_ls",
      [](const std::string& path) {
        refuse_nul(path, "path");
        BundleInfo info;
        {
          nb::gil_scoped_release release;
          info = unwrap_bundle(inspect_bundle(path));
        }
        return info_dict(info);
      },
      nb::arg("path"));

  m.def(
      "_bundle_install",
      [](const std::string& path, std::optional<std::vector<std::string>> trust, const Config& c, bool pin) {
        refuse_nul(path, "path");
        BundleInstallReport report;
        std::uint64_t pinned = 0;
        {
          nb::gil_scoped_release release;
          auto store = unwrap(FileStore::open(c.file_store_options()));
          FileStore& target = *store;
          BundleInstalled each;
          if (pin) {
            // As `kcache bundle install --pin`: every entry the store accepted
            // (stored or already present) is pinned; a failure stops the install.
            each = [&target, &pinned](const Artifact& a, PutOutcome) -> Result<void> {
              auto done = target.pin(a.passport.key);
              if (!done) {
                return tl::unexpected(std::move(done.error()));
              }
              ++pinned;
              return {};
            };
          }
          report = unwrap_bundle(install_bundle(path, trust_of(trust, c), target, each));
        }
        nb::dict d;
        d["entries"] = report.entries;
        d["installed"] = report.stored;
        d["already_present"] = report.already_present;
        d["bytes"] = report.bytes;
        d["pinned"] = pinned;
        return d;
      },
      nb::arg("path"), nb::arg("trust").none(), nb::arg("config"), nb::arg("pin") = false);
}

} // namespace kcache::python
