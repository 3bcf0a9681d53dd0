#include "compile/elf_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "util/fd.hpp"
#include "util/hex.hpp"

namespace kcache::jit {

namespace {

template <class T>
T load_le(const unsigned char* p) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    v = static_cast<T>(v | (static_cast<T>(p[i]) << (8 * i)));
  }
  return v;
}

bool pread_all(int fd, void* buf, std::size_t size, off_t offset) {
  auto* out = static_cast<unsigned char*>(buf);
  while (size > 0) {
    const ssize_t n = ::pread(fd, out, size, offset);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    out += n;
    size -= static_cast<std::size_t>(n);
    offset += n;
  }
  return true;
}

constexpr std::size_t k_ehdr_size = 64;
constexpr std::uint32_t k_pt_note = 4;
constexpr std::uint32_t k_nt_gnu_build_id = 3;
constexpr std::size_t k_max_note_bytes = 1 << 16;

}  // namespace

Result<std::optional<std::string>> read_build_id(const std::filesystem::path& path) {
  util::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return make_errno_error(errno, "open " + path.string());
  }
  unsigned char eh[k_ehdr_size];
  if (!pread_all(fd.get(), eh, sizeof eh, 0) || std::memcmp(eh, "\x7f" "ELF", 4) != 0 || eh[4] != 2 ||
      eh[5] != 1) {
    return make_error(ErrorCode::corrupt, path.string() + " is not a 64-bit little-endian ELF file");
  }
  const auto phoff = load_le<std::uint64_t>(eh + 32);
  const auto phentsize = load_le<std::uint16_t>(eh + 54);
  const auto phnum = load_le<std::uint16_t>(eh + 56);
  if (phentsize < 56 || phnum == 0 || phnum > 512) {
    return std::optional<std::string>{};
  }
  std::vector<unsigned char> ph(static_cast<std::size_t>(phentsize) * phnum);
  if (!pread_all(fd.get(), ph.data(), ph.size(), static_cast<off_t>(phoff))) {
    return make_error(ErrorCode::corrupt, path.string() + ": truncated program headers");
  }
  for (std::size_t i = 0; i < phnum; ++i) {
    const unsigned char* p = ph.data() + i * phentsize;
    if (load_le<std::uint32_t>(p) != k_pt_note) {
      continue;
    }
    const auto off = load_le<std::uint64_t>(p + 8);
    const auto size = load_le<std::uint64_t>(p + 32);
    if (size == 0 || size > k_max_note_bytes) {
      continue;
    }
    std::vector<unsigned char> note(size);
    if (!pread_all(fd.get(), note.data(), note.size(), static_cast<off_t>(off))) {
      continue;
    }
    std::size_t pos = 0;
    while (pos + 12 <= note.size()) {
      const auto namesz = load_le<std::uint32_t>(note.data() + pos);
      const auto descsz = load_le<std::uint32_t>(note.data() + pos + 4);
      const auto type = load_le<std::uint32_t>(note.data() + pos + 8);
      const std::size_t name_at = pos + 12;
      const std::size_t desc_at = name_at + ((namesz + 3u) & ~3u);
      const std::size_t next = desc_at + ((descsz + 3u) & ~3u);
      if (next > note.size() || desc_at + descsz > note.size()) {
        break;
      }
      if (type == k_nt_gnu_build_id && namesz == 4 &&
          std::memcmp(note.data() + name_at, "GNU", 4) == 0 && descsz > 0) {
        return std::optional<std::string>(util::to_hex(note.data() + desc_at, descsz));
      }
      pos = next;
    }
  }
  return std::optional<std::string>{};
}

Result<CubinHeader> read_cubin_header(std::string_view bytes) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < k_ehdr_size || std::memcmp(b, "\x7f" "ELF", 4) != 0) {
    return make_error(ErrorCode::corrupt, "not an ELF file");
  }
  if (b[4] != 2 || b[5] != 1) {
    return make_error(ErrorCode::corrupt, "not a 64-bit little-endian ELF file");
  }
  CubinHeader h;
  h.machine = load_le<std::uint16_t>(b + 18);
  h.flags = load_le<std::uint32_t>(b + 48);
  h.sm = (h.flags >> 8) & 0xffu;
  return h;
}

unsigned arch_number(std::string_view arch) noexcept {
  const auto us = arch.find('_');
  if (us == std::string_view::npos) {
    return 0;
  }
  unsigned n = 0;
  bool any = false;
  for (std::size_t i = us + 1; i < arch.size() && arch[i] >= '0' && arch[i] <= '9'; ++i) {
    n = n * 10 + static_cast<unsigned>(arch[i] - '0');
    any = true;
  }
  return any ? n : 0;
}

}  // namespace kcache::jit
