#include "support/nvrtc_output.hpp"

#include <cstdint>
#include <cstring>

#include "kcache/compiler.hpp"

namespace kcache::test {

namespace {

constexpr std::string_view k_markers[] = {"_INTERNAL_", "_GLOBAL__N__"};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); }

bool hex8_then_underscore(std::string_view s, std::size_t at) {
  if (at + 9 > s.size()) {
    return false;
  }
  for (std::size_t k = 0; k < 8; ++k) {
    if (!is_hex(s[at + k])) {
      return false;
    }
  }
  return s[at + 8] == '_';
}

// At `at` (just after a marker): "<8 hex>_<L>_<L chars>_". Returns the index
// after it, or npos.
std::size_t skip_module_prefix(std::string_view s, std::size_t at) {
  if (!hex8_then_underscore(s, at)) {
    return std::string_view::npos;
  }
  std::size_t j = at + 9;
  std::size_t len = 0;
  const std::size_t digits_start = j;
  while (j < s.size() && is_digit(s[j]) && j - digits_start < 6) {
    len = len * 10 + static_cast<std::size_t>(s[j] - '0');
    ++j;
  }
  if (j == digits_start || j >= s.size() || s[j] != '_') {
    return std::string_view::npos;
  }
  ++j;
  if (j + len >= s.size() || s[j + len] != '_') {
    return std::string_view::npos;
  }
  return j + len + 1;
}

struct Reader {
  std::string_view bytes;
  bool ok = true;
  template <class T>
  T at(std::size_t offset) {
    T v{};
    if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) {
      ok = false;
      return v;
    }
    std::memcpy(&v, bytes.data() + offset, sizeof(T));  // ELF64 little-endian, as is the host
    return v;
  }
};

std::string c_string_at(std::string_view table, std::uint64_t offset) {
  if (offset >= table.size()) {
    return "<bad name offset>";
  }
  const auto end = table.find('\0', offset);
  return std::string(table.substr(offset, end == std::string_view::npos ? std::string_view::npos : end - offset));
}

}  // namespace

std::string mask_module_ids(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    std::string_view marker;
    if (s[i] == '_') {
      for (const auto m : k_markers) {
        if (s.compare(i, m.size(), m) == 0) {
          marker = m;
          break;
        }
      }
    }
    if (marker.empty()) {
      out += s[i++];
      continue;
    }
    // The mangled length in front of the name grows with the digits of the pid.
    std::size_t k = out.size();
    while (k > 0 && is_digit(out[k - 1])) {
      --k;
    }
    if (k < out.size()) {
      out.resize(k);
      out += '#';
    }
    out.append(marker);
    i += marker.size();
    const std::size_t j = skip_module_prefix(s, i);
    if (j == std::string_view::npos || !hex8_then_underscore(s, j) || j + 9 >= s.size() || !is_digit(s[j + 9])) {
      continue;  // an id taken from an external name: reproducible, copied as is
    }
    out.append(s.substr(i, j - i));
    out += "H_P";
    i = j + 9;
    while (i < s.size() && is_digit(s[i])) {
      ++i;  // the pid, and the next mangled length glued to it in both outputs alike
    }
  }
  return out;
}

Result<std::string> canonical_cubin(std::string_view cubin) {
  Reader r{cubin};
  if (cubin.size() < 64 || cubin.substr(0, 4) != "\x7f" "ELF" || cubin[4] != 2 || cubin[5] != 1) {
    return make_error(ErrorCode::corrupt, "not an ELF64 little-endian file");
  }
  const auto type = r.at<std::uint16_t>(16);
  const auto machine = r.at<std::uint16_t>(18);
  const auto phoff = r.at<std::uint64_t>(32);
  const auto shoff = r.at<std::uint64_t>(40);
  const auto flags = r.at<std::uint32_t>(48);
  const auto phentsize = r.at<std::uint16_t>(54);
  const auto phnum = r.at<std::uint16_t>(56);
  const auto shentsize = r.at<std::uint16_t>(58);
  const auto shnum = r.at<std::uint16_t>(60);
  const auto shstrndx = r.at<std::uint16_t>(62);
  std::string out = "elf type " + std::to_string(type) + " machine " + std::to_string(machine) + " flags " +
                    std::to_string(flags) + "\n";
  for (std::uint16_t p = 0; p < phnum; ++p) {
    const std::uint64_t at = phoff + std::uint64_t{p} * phentsize;
    out += "phdr " + std::to_string(r.at<std::uint32_t>(at)) + " " + std::to_string(r.at<std::uint32_t>(at + 4)) +
           " " + std::to_string(r.at<std::uint64_t>(at + 16)) + " " + std::to_string(r.at<std::uint64_t>(at + 40)) +
           "\n";
  }
  struct Section {
    std::uint32_t name, type, link, info;
    std::uint64_t flags, addr, offset, size, align, entsize;
  };
  std::vector<Section> sections;
  for (std::uint16_t k = 0; k < shnum; ++k) {
    const std::uint64_t at = shoff + std::uint64_t{k} * shentsize;
    sections.push_back({r.at<std::uint32_t>(at), r.at<std::uint32_t>(at + 4), r.at<std::uint32_t>(at + 40),
                        r.at<std::uint32_t>(at + 44), r.at<std::uint64_t>(at + 8), r.at<std::uint64_t>(at + 16),
                        r.at<std::uint64_t>(at + 24), r.at<std::uint64_t>(at + 32), r.at<std::uint64_t>(at + 48),
                        r.at<std::uint64_t>(at + 56)});
  }
  if (!r.ok || shstrndx >= sections.size()) {
    return make_error(ErrorCode::corrupt, "truncated ELF headers");
  }
  auto content = [&](const Section& s) -> std::string_view {
    if (s.type == 8 /* SHT_NOBITS */ || s.offset > cubin.size() || cubin.size() - s.offset < s.size) {
      return {};
    }
    return cubin.substr(s.offset, s.size);
  };
  const std::string_view shstr = content(sections[shstrndx]);
  for (const auto& s : sections) {
    out += "section " + mask_module_ids(c_string_at(shstr, s.name)) + " type " + std::to_string(s.type) +
           " flags " + std::to_string(s.flags) + " addr " + std::to_string(s.addr) + " link " +
           std::to_string(s.link) + " info " + std::to_string(s.info) + " align " + std::to_string(s.align) +
           " entsize " + std::to_string(s.entsize) + "\n";
    if (s.type == 3 /* SHT_STRTAB */) {
      continue;  // seen through the names that point into it
    }
    const std::string_view bytes = content(s);
    if (s.type == 2 /* SHT_SYMTAB */ && s.link < sections.size() && s.entsize == 24) {
      const std::string_view strtab = content(sections[s.link]);
      Reader sym{bytes};
      for (std::uint64_t e = 0; e + 24 <= bytes.size(); e += 24) {
        out += "  sym " + mask_module_ids(c_string_at(strtab, sym.at<std::uint32_t>(e))) + " " +
               std::to_string(sym.at<std::uint8_t>(e + 4)) + " " + std::to_string(sym.at<std::uint8_t>(e + 5)) +
               " " + std::to_string(sym.at<std::uint16_t>(e + 6)) + " " +
               std::to_string(sym.at<std::uint64_t>(e + 8)) + " " + std::to_string(sym.at<std::uint64_t>(e + 16)) +
               "\n";
      }
      continue;
    }
    const std::string masked = mask_module_ids(bytes);
    out += "  " + std::to_string(masked.size()) + " bytes\n";
    out += masked;
    out += "\n";
  }
  return out;
}

Result<std::string> comparable_output(std::string_view kind, const std::string& bytes, const std::string& arch) {
  if (kind == "ptx") {
    return mask_module_ids(bytes);
  }
  if (kind == "cubin") {
    return canonical_cubin(bytes);
  }
  if (kind != "ltoir") {
    return make_error(ErrorCode::invalid_argument, "unknown output kind '" + std::string(kind) + "'");
  }
  CompileRequest link;
  link.backend = "nvjitlink";
  link.name = "comparable";
  link.target_kind = "ptx";
  link.options = {"-arch=" + arch, "-lto"};
  link.inputs = {{"input.ltoir", "ltoir", bytes}};
  auto linked = compile_uncached(link);
  if (!linked) {
    return tl::unexpected(linked.error());
  }
  return mask_module_ids(linked->payload);
}

}  // namespace kcache::test
