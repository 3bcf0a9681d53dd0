#include "deps/scan_inputs.hpp"

#include <fcntl.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "deps/memo_reader.hpp"
#include "deps/scan_directories.hpp"
#include "util/atomic_write.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"
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

// The in-memory headers of `in`: each one's name and SHA-256.
void add_memory_headers(util::Sha256& h, const ScanInput& in) {
  if (in.memory_headers == nullptr) {
    return;
  }
  const bool given = in.memory_header_sha256.size() == in.memory_headers->size();
  for (std::size_t i = 0; i < in.memory_headers->size(); ++i) {
    const auto& m = (*in.memory_headers)[i];
    add_field(h, "memory", m.name);
    const auto md = given ? in.memory_header_sha256[i] : util::sha256(m.bytes);
    add_field(h, "bytes", std::string_view(reinterpret_cast<const char*>(md.data()), md.size()));
  }
}

}  // namespace

// The digest of everything a scan's result depends on besides the files and
// directories it records: the manifest's name.
std::string manifest_key(const ScanInput& in, const std::string& cwd) {
  util::Sha256 h;
  add_field(h, "format", "kcache-header-scan-2");
  add_field(h, "cwd", cwd.empty() ? "?" : cwd);
  add_field(h, "name", in.program_name);
  add_field(h, "source_path", in.source_path);
  const std::array<std::uint8_t, 32> none{};
  const auto sd = in.source_sha256 != none ? in.source_sha256 : util::sha256(in.source);
  add_field(h, "source", std::string_view(reinterpret_cast<const char*>(sd.data()), sd.size()));
  add_memory_headers(h, in);
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
  add_field(h, "format", "kcache-header-family-2");
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

constexpr std::string_view k_family_magic = "kcache-header-family 2\n";

// Where the members of family `family` are named: in the shard of the
// family's digest, so the shard's caps bound these files too.
fs::path family_file(const fs::path& memo_dir, const std::string& family) {
  return memo_dir / family.substr(0, 2) / ("family-" + family);
}

// The name a -D value (`NAME`, `NAME=VALUE`, `NAME(a)=VALUE`) defines.
std::string_view defined_name(std::string_view d) {
  return d.substr(0, d.find_first_of("(="));
}

bool looked_up(const std::vector<std::string>& identifiers, std::string_view name) {
  return std::binary_search(identifiers.begin(), identifiers.end(), name, std::less<>());
}

std::string serialize_family(const std::vector<FamilyMember>& members) {
  std::string out(k_family_magic);
  auto put_str = [&out](std::string_view s) {
    out += std::to_string(s.size());
    out += ':';
    out += s;
  };
  for (const auto& m : members) {
    out += "m " + m.manifest + " " + m.roots + " " + std::to_string(m.identifiers.size()) + "\n";
    for (const auto& i : m.identifiers) {
      out += "i ";
      put_str(i);
      out += '\n';
    }
  }
  out += "end\n";
  return out;
}

std::optional<std::vector<FamilyMember>> parse_family(std::string_view text) {
  MemoReader r(text);
  std::vector<FamilyMember> members;
  if (!r.lit(k_family_magic)) {
    return std::nullopt;
  }
  while (r.peek("m ")) {
    FamilyMember m;
    std::size_t count = 0;
    if (members.size() == k_max_family_members || !r.lit("m ") || !r.hex64(m.manifest) || !r.lit(" ") ||
        !r.hex64(m.roots) || !r.lit(" ") || !r.num(count) || !r.lit("\n") || count > text.size()) {
      return std::nullopt;
    }
    for (std::size_t i = 0; i < count; ++i) {
      std::string id;
      if (!r.lit("i ") || !r.str(id) || !r.lit("\n") || id.empty() ||
          (!m.identifiers.empty() && m.identifiers.back() >= id)) {
        return std::nullopt;  // sorted, unique
      }
      m.identifiers.push_back(std::move(id));
    }
    members.push_back(std::move(m));
  }
  if (!r.lit("end\n") || !r.at_end()) {
    return std::nullopt;
  }
  return members;
}

}  // namespace

std::vector<FamilyMember> family_members(const fs::path& memo_dir, const std::string& family) {
  if (memo_dir.empty()) {
    return {};
  }
  const auto text = util::io::read_small_file(family_file(memo_dir, family).string(), k_max_family_bytes, O_NOFOLLOW);
  if (!text) {
    return {};
  }
  auto members = parse_family(*text);
  return members ? std::move(*members) : std::vector<FamilyMember>{};
}

std::string roots_key(const ScanInput& in, const FileDirectives& source, const std::vector<std::string>& identifiers,
                      const std::string& predefined_id) {
  util::Sha256 h;
  add_field(h, "format", "kcache-header-roots-1");
  add_field(h, "predefined", predefined_id);
  // The directories the source's quoted includes search (ClosureScan's main directories).
  add_field(h, "name_dir", dir_of(in.program_name));
  add_field(h, "source_dir", in.source_path.empty() ? std::string() : dir_of(in.source_path));
  for (const auto& i : source.includes) {
    add_field(h, i.computed ? "computed" : (i.angled ? "angled" : "quoted"), i.name);
  }
  for (const auto& d : source.defines) {
    if (looked_up(identifiers, d.name)) {
      add_field(h, d.function_like ? "define_f" : "define_o", d.name);
      add_field(h, "params", d.params);
      add_field(h, "body", d.body);
    }
  }
  for (const auto& p : in.pre_includes) {
    add_field(h, "pre_include", p);
  }
  add_memory_headers(h, in);
  for (const auto& d : in.defines) {
    if (looked_up(identifiers, defined_name(d))) {
      add_field(h, "define", d);
    }
  }
  const auto d = h.finish();
  return util::to_hex(d.data(), d.size());
}

void note_family(const fs::path& memo_dir, const std::string& family, const HeaderManifest& m,
                 const std::string& roots) {
  if (memo_dir.empty() || m.headers.empty() || m.input.size() != 64 || roots.size() != 64 ||
      !m.not_cacheable.empty()) {
    return;
  }
  std::vector<FamilyMember> members{{m.input, roots, m.looked_up}};
  for (auto& old : family_members(memo_dir, family)) {
    if (members.size() < k_max_family_members && old.manifest != m.input && old.roots != roots) {
      members.push_back(std::move(old));
    }
  }
  std::string text = serialize_family(members);
  while (text.size() > k_max_family_bytes && members.size() > 1) {
    members.pop_back();
    text = serialize_family(members);
  }
  if (text.size() > k_max_family_bytes) {
    return;
  }
  const fs::path file = family_file(memo_dir, family);
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  (void)util::write_file_atomically(file, text, 0600, util::FileSync::none);
}

}  // namespace kcache::jit
