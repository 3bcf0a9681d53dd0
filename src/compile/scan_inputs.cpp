#include "compile/scan_inputs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <string_view>

#include "util/atomic_write.hpp"
#include "util/fd.hpp"
#include "util/hex.hpp"
#include "util/sha256.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

void add_field(util::Sha256& h, std::string_view tag, std::string_view value) {
  const std::uint64_t n = value.size();
  h.update(tag);
  h.update(&n, sizeof n);
  h.update(value);
}

}  // namespace

// The digest of everything a scan's result depends on besides the files and
// directories it records: the manifest's name.
std::string manifest_key(const ScanInput& in, const std::string& cwd) {
  util::Sha256 h;
  add_field(h, "format", "kcache-header-scan-1");
  add_field(h, "cwd", cwd.empty() ? "?" : cwd);
  add_field(h, "name", in.program_name);
  add_field(h, "source_path", in.source_path);
  const std::array<std::uint8_t, 32> none{};
  const auto sd = in.source_sha256 != none ? in.source_sha256 : util::sha256(in.source);
  add_field(h, "source", std::string_view(reinterpret_cast<const char*>(sd.data()), sd.size()));
  if (in.memory_headers != nullptr) {
    const bool given = in.memory_header_sha256.size() == in.memory_headers->size();
    for (std::size_t i = 0; i < in.memory_headers->size(); ++i) {
      const auto& m = (*in.memory_headers)[i];
      add_field(h, "memory", m.name);
      const auto md = given ? in.memory_header_sha256[i] : util::sha256(m.bytes);
      add_field(h, "bytes", std::string_view(reinterpret_cast<const char*>(md.data()), md.size()));
    }
  }
  for (const auto& d : in.include_dirs) {
    add_field(h, "include", d);
  }
  for (const auto& p : in.pre_includes) {
    add_field(h, "pre_include", p);
  }
  for (const auto& d : in.defines) {
    add_field(h, "define", d);
  }
  add_field(h, "toolkit", in.toolkit_root.string());
  add_field(h, "toolkit_fingerprint", in.toolkit_fingerprint);
  const auto d = h.finish();
  return util::to_hex(d.data(), d.size());
}

// The digest of what decides where names resolve (working directory, search
// path, toolkit), without the source and the definitions: scans with equal
// families read the same headers mostly, whatever kernel they scan.
std::string family_key(const ScanInput& in, const std::string& cwd) {
  util::Sha256 h;
  add_field(h, "format", "kcache-header-family-1");
  add_field(h, "cwd", cwd.empty() ? "?" : cwd);
  for (const auto& d : in.include_dirs) {
    add_field(h, "include", d);
  }
  add_field(h, "toolkit", in.toolkit_root.string());
  add_field(h, "toolkit_fingerprint", in.toolkit_fingerprint);
  const auto d = h.finish();
  return util::to_hex(d.data(), d.size()).substr(0, 32);
}

namespace {

constexpr std::string_view k_family_magic = "kcache-header-family 1\n";

// Where the last manifest of family `family` is named: in the shard of the
// family's digest, so the shard's caps bound these files too.
fs::path family_file(const fs::path& memo_dir, const std::string& family) {
  return memo_dir / family.substr(0, 2) / ("family-" + family);
}

}  // namespace

// family_file() holds exactly "kcache-header-family 1\n" hex64 "\n".
std::string family_manifest_name(const fs::path& memo_dir, const std::string& family) {
  if (memo_dir.empty()) {
    return {};
  }
  util::Fd fd(::open(family_file(memo_dir, family).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    return {};
  }
  char buf[128];
  const ssize_t n = ::read(fd.get(), buf, sizeof buf);
  const std::size_t want = k_family_magic.size() + 65;
  if (n != static_cast<ssize_t>(want)) {
    return {};
  }
  const std::string_view t(buf, want);
  std::string key(t.substr(k_family_magic.size(), 64));
  if (!t.starts_with(k_family_magic) || t.back() != '\n' ||
      key.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return {};
  }
  return key;
}

void note_family(const fs::path& memo_dir, const std::string& family, const HeaderManifest& m) {
  if (memo_dir.empty() || m.headers.empty() || m.input.size() != 64) {
    return;
  }
  const fs::path file = family_file(memo_dir, family);
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  (void)util::write_file_atomically(file, std::string(k_family_magic) + m.input + "\n", 0600, util::FileSync::none);
}


}  // namespace kcache::jit
