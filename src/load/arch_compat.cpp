// Arch parsing, cubin/PTX inspection and the compatibility table
// (include/kcache/arch_compat.hpp, docs/loading.md).
#include "kcache/arch_compat.hpp"

#include <charconv>

namespace kcache {

namespace {

std::uint64_t le(std::string_view b, std::size_t at, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    v |= std::uint64_t{static_cast<unsigned char>(b[at + i])} << (8 * i);
  }
  return v;
}

auto corrupt(const std::string& why) { return make_error(ErrorCode::corrupt, why); }

std::string cc_text(const DeviceInfo& d) { return std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor); }

// Whether code for `code` runs on `device`. Virtual (PTX) code may run on any
// newer major; real code only within its major.
bool runs_on(const ArchName& code, const DeviceInfo& device) {
  const unsigned dev = static_cast<unsigned>(device.cc_major * 10 + device.cc_minor);
  // SASS is loaded only on exactly the SM it was compiled for. The driver
  // would also run sm_80 SASS on an sm_86 device, and an sm_100f cubin across
  // its family, but kcache keys binaries by their exact arch and serves each
  // device its own: a binary built for one variant is never used on another.
  if (!code.is_virtual || code.suffix == 'a') {
    return dev == code.number;
  }
  // PTX is JIT-compiled by the driver for any device at or above its target
  // (family-specific PTX only within its major).
  if (code.suffix == 'f') {
    return static_cast<unsigned>(device.cc_major) == code.major() && static_cast<unsigned>(device.cc_minor) >= code.minor();
  }
  return dev >= code.number;
}

}  // namespace

std::string ArchName::text() const {
  std::string s = is_virtual ? "compute_" : "sm_";
  s += std::to_string(number);
  if (suffix != 0) {
    s += suffix;
  }
  return s;
}

Result<ArchName> parse_arch(std::string_view text) {
  ArchName a;
  std::string_view rest;
  if (text.substr(0, 3) == "sm_") {
    rest = text.substr(3);
  } else if (text.substr(0, 8) == "compute_") {
    rest = text.substr(8);
    a.is_virtual = true;
  } else {
    return make_error(ErrorCode::invalid_argument, "not an arch name: '" + std::string(text) + "'");
  }
  if (!rest.empty() && (rest.back() == 'a' || rest.back() == 'f')) {
    a.suffix = rest.back();
    rest.remove_suffix(1);
  }
  const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), a.number);
  if (ec != std::errc() || ptr != rest.data() + rest.size() || rest.size() < 2 || rest.size() > 3 ||
      a.number < 10) {
    return make_error(ErrorCode::invalid_argument, "not an arch name: '" + std::string(text) + "'");
  }
  return a;
}

Result<CubinInfo> inspect_cubin(std::string_view b) {
  constexpr std::size_t k_ehdr = 64;
  if (b.size() < k_ehdr || b.substr(0, 4) != std::string_view("\x7f" "ELF", 4)) {
    return corrupt("cubin is not an ELF file");
  }
  if (b[4] != 2 || b[5] != 1) {
    return corrupt("cubin is not ELF64 little-endian");
  }
  if (le(b, 18, 2) != 190) {
    return corrupt("ELF e_machine is " + std::to_string(le(b, 18, 2)) + ", not 190 (NVIDIA CUDA)");
  }
  CubinInfo info;
  info.sm = static_cast<unsigned>((le(b, 48, 4) >> 8) & 0xffU);
  if (info.sm < 10) {
    return corrupt("ELF e_flags hold no SM number");
  }
  const std::uint64_t shoff = le(b, 0x28, 8);
  const std::uint64_t shentsize = le(b, 0x3a, 2);
  const std::uint64_t shnum = le(b, 0x3c, 2);
  if (shnum != 0 && (shentsize < 64 || shoff > b.size() || shnum > (b.size() - shoff) / shentsize)) {
    return corrupt("ELF section headers lie outside the file");
  }
  // Find the ptxas command line in the .note.nv.tkinfo note: "-arch sm_90a".
  for (std::uint64_t i = 0; i < shnum; ++i) {
    const std::size_t sh = static_cast<std::size_t>(shoff + i * shentsize);
    if (le(b, sh + 4, 4) != 7) {  // SHT_NOTE
      continue;
    }
    const std::uint64_t off = le(b, sh + 0x18, 8);
    const std::uint64_t size = le(b, sh + 0x20, 8);
    if (off > b.size() || size > b.size() - off) {
      return corrupt("ELF note section lies outside the file");
    }
    const std::string_view note = b.substr(static_cast<std::size_t>(off), static_cast<std::size_t>(size));
    const auto at = note.find("-arch sm_");
    if (at == std::string_view::npos) {
      continue;
    }
    std::string_view arch = note.substr(at + 6);
    arch = arch.substr(0, arch.find_first_of(std::string_view(" \0", 2)));
    auto parsed = parse_arch(arch);
    if (!parsed || parsed->number != info.sm) {
      return corrupt("cubin notes say '-arch " + std::string(arch) + "' but e_flags say sm_" + std::to_string(info.sm));
    }
    info.suffix = parsed->suffix;
    info.has_tool_note = true;
  }
  return info;
}

Result<PtxInfo> inspect_ptx(std::string_view text) {
  PtxInfo info;
  bool have_version = false;
  bool have_target = false;
  std::size_t pos = 0;
  // The directives come before any code; look at the first 64 KiB of lines.
  while (pos < text.size() && pos < (std::size_t{64} << 10) && !(have_version && have_target)) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) {
      eol = text.size();
    }
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) {
      line.remove_prefix(1);
    }
    if (line.substr(0, 9) == ".version ") {
      std::string_view v = line.substr(9);
      const auto dot = v.find('.');
      if (dot == std::string_view::npos) {
        return corrupt("PTX .version is malformed");
      }
      auto r1 = std::from_chars(v.data(), v.data() + dot, info.isa_major);
      auto r2 = std::from_chars(v.data() + dot + 1, v.data() + v.size(), info.isa_minor);
      if (r1.ec != std::errc() || r2.ec != std::errc()) {
        return corrupt("PTX .version is malformed");
      }
      have_version = true;
    } else if (line.substr(0, 8) == ".target ") {
      std::string_view t = line.substr(8);
      t = t.substr(0, t.find_first_of(", \t\r"));
      auto arch = parse_arch(t);
      if (!arch) {
        return corrupt("PTX .target '" + std::string(t) + "' is not an arch");
      }
      info.target = *arch;
      info.target.is_virtual = true;
      have_target = true;
    }
  }
  if (!have_version || !have_target) {
    return corrupt("PTX has no .version or .target directive");
  }
  return info;
}

std::pair<unsigned, unsigned> max_ptx_isa(int driver_version) noexcept {
  struct Row {
    int driver;
    unsigned major, minor;
  };
  static constexpr Row k_table[] = {
      {11000, 7, 0}, {11010, 7, 1}, {11020, 7, 2}, {11030, 7, 3}, {11040, 7, 4}, {11050, 7, 5},
      {11060, 7, 6}, {11070, 7, 7}, {11080, 7, 8}, {12000, 8, 0}, {12010, 8, 1}, {12020, 8, 2},
      {12030, 8, 3}, {12040, 8, 4}, {12050, 8, 5}, {12060, 8, 5}, {12080, 8, 7}, {12090, 8, 8},
      {13000, 9, 0},
  };
  std::pair<unsigned, unsigned> best{6, 0};
  for (const auto& row : k_table) {
    if (driver_version >= row.driver) {
      best = {row.major, row.minor};
    }
  }
  return best;
}

Result<void> check_loadable(const Artifact& artifact, const DeviceInfo& device) {
  if (auto ok = artifact.verify(); !ok) {
    return ok;
  }
  const Passport& p = artifact.passport;
  const std::string& kind = p.kind;
  const std::string dev = "this device (" + (device.name.empty() ? std::string("GPU") : device.name) +
                          ", compute capability " + cc_text(device) + ")";
  if (kind == "cubin") {
    auto cubin = inspect_cubin(artifact.payload);
    if (!cubin) {
      return tl::unexpected(cubin.error());
    }
    ArchName code{cubin->sm, cubin->suffix, false};
    if (!p.target.arch.empty()) {
      auto claimed = parse_arch(p.target.arch);
      if (!claimed || claimed->number != cubin->sm || (cubin->has_tool_note && claimed->suffix != cubin->suffix)) {
        return corrupt("passport says arch '" + p.target.arch + "' but the cubin is for " + code.text());
      }
      code.suffix = claimed->suffix;  // the passport is the authority where the cubin has no note
    }
    if (!runs_on(code, device)) {
      return make_error(ErrorCode::unsupported, "cubin for " + code.text() + " cannot run on " + dev);
    }
    return {};
  }
  if (kind == "ptx") {
    auto ptx = inspect_ptx(artifact.payload);
    if (!ptx) {
      return tl::unexpected(ptx.error());
    }
    if (!p.target.arch.empty()) {
      auto claimed = parse_arch(p.target.arch);
      if (!claimed || claimed->number != ptx->target.number || claimed->suffix != ptx->target.suffix) {
        return corrupt("passport says arch '" + p.target.arch + "' but the PTX targets " + ptx->target.text());
      }
    }
    if (!runs_on(ptx->target, device)) {
      return make_error(ErrorCode::unsupported, "PTX for " + ptx->target.text() + " cannot run on " + dev);
    }
    const auto [mj, mn] = max_ptx_isa(device.driver_version);
    if (ptx->isa_major > mj || (ptx->isa_major == mj && ptx->isa_minor > mn)) {
      return make_error(ErrorCode::unsupported,
                        "PTX ISA " + std::to_string(ptx->isa_major) + "." + std::to_string(ptx->isa_minor) +
                            " is newer than the driver (" + std::to_string(device.driver_version) + ") can JIT (up to " +
                            std::to_string(mj) + "." + std::to_string(mn) + "); update the driver or compile for an older toolkit");
    }
    return {};
  }
  if (kind == "fatbin") {
    return {};
  }
  if (kind == "ltoir") {
    return make_error(ErrorCode::unsupported, "LTO-IR cannot be loaded directly: link it to a cubin first (kcache link / Linker)");
  }
  return make_error(ErrorCode::unsupported, "artifacts of kind '" + kind + "' cannot be loaded into CUDA");
}

}  // namespace kcache
