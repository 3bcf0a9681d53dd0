#include "store/file_check_table.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "util/fd.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache::store {

namespace {

constexpr char k_magic[8] = {'K', 'C', 'C', 'H', 'K', '0', '0', '1'};
constexpr std::uint32_t k_version = 1;
constexpr const char* k_name = "checks";
constexpr std::uint64_t k_seal_salt = 0x6b63616368653031ULL;  // "kcache01"
constexpr std::size_t k_words = FileCheckTable::k_slot_bytes / 8;  // 12
constexpr std::size_t k_sealed_words = 10;                          // key(4) + 6 fields

bool header_ok(const void* p) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint32_t version = 0;
  std::uint32_t slots = 0;
  std::memcpy(&version, b + 8, 4);
  std::memcpy(&slots, b + 12, 4);
  return std::memcmp(b, k_magic, 8) == 0 && version == k_version && slots == FileCheckTable::k_slots;
}

bool create_file(int dir_fd, mode_t mode, bool replace) {
  std::random_device rd;
  const std::string tmp = std::string(".checks-") + std::to_string(::getpid()) + "-" + std::to_string(rd()) + ".tmp";
  util::Fd fd(util::io::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode));
  if (!fd) {
    return false;
  }
  std::string image(FileCheckTable::k_file_size, '\0');
  std::memcpy(image.data(), k_magic, 8);
  std::memcpy(image.data() + 8, &k_version, 4);
  const std::uint32_t slots = FileCheckTable::k_slots;
  std::memcpy(image.data() + 12, &slots, 4);
  bool ok = util::io::fchmod(fd.get(), mode) == 0 && util::io::write_all(fd.get(), image) == 0;
  if (ok) {
    ok = replace ? util::io::renameat(dir_fd, tmp.c_str(), dir_fd, k_name) == 0
                 : (util::io::linkat(dir_fd, tmp.c_str(), dir_fd, k_name, 0) == 0 || errno == EEXIST);
  }
  util::io::unlinkat(dir_fd, tmp.c_str(), 0);
  return ok;
}

void* map_file(int dir_fd) {
  util::Fd fd(util::io::openat(dir_fd, k_name, O_RDWR | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) {
    return nullptr;
  }
  struct stat st {};
  if (util::io::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::size_t>(st.st_size) != FileCheckTable::k_file_size) {
    return nullptr;
  }
  void* p = ::mmap(nullptr, FileCheckTable::k_file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    return nullptr;
  }
  if (!header_ok(p)) {
    ::munmap(p, FileCheckTable::k_file_size);
    return nullptr;
  }
  return p;
}

std::uint64_t load(std::uint64_t* w) noexcept {
  return std::atomic_ref<std::uint64_t>(*w).load(std::memory_order_relaxed);
}
void store_word(std::uint64_t* w, std::uint64_t v) noexcept {
  std::atomic_ref<std::uint64_t>(*w).store(v, std::memory_order_relaxed);
}

std::array<std::uint64_t, 4> key_words(const Key& key) noexcept {
  std::array<std::uint64_t, 4> out{};
  std::memcpy(out.data(), key.bytes().data(), 32);
  return out;
}

std::uint64_t seal_of(const std::array<std::uint64_t, k_words>& words) noexcept {
  return util::xxh3_64(std::string_view(reinterpret_cast<const char*>(words.data()), k_sealed_words * 8)) ^
         k_seal_salt;
}

}  // namespace

CheckRecord CheckRecord::from_stat(const struct stat& st, std::uint64_t xxh3, std::uint64_t sha256_prefix) noexcept {
  CheckRecord r;
  r.ino = static_cast<std::uint64_t>(st.st_ino);
  r.size = static_cast<std::uint64_t>(st.st_size);
  r.mtime_ns = static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1000000000ULL +
               static_cast<std::uint64_t>(st.st_mtim.tv_nsec);
  r.ctime_ns = static_cast<std::uint64_t>(st.st_ctim.tv_sec) * 1000000000ULL +
               static_cast<std::uint64_t>(st.st_ctim.tv_nsec);
  r.xxh3 = xxh3;
  r.sha256_prefix = sha256_prefix;
  return r;
}

std::unique_ptr<FileCheckTable> FileCheckTable::open(int stats_dir_fd, mode_t mode) {
  void* p = map_file(stats_dir_fd);
  if (p == nullptr) {
    struct stat st {};
    const bool exists = util::io::fstatat(stats_dir_fd, k_name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (create_file(stats_dir_fd, mode, exists)) {
      p = map_file(stats_dir_fd);
    }
  }
  if (p == nullptr) {
    return nullptr;
  }
  return std::unique_ptr<FileCheckTable>(new FileCheckTable(p));
}

FileCheckTable::~FileCheckTable() { ::munmap(m_mapped, k_file_size); }

std::uint64_t* FileCheckTable::slot(const Key& key) const noexcept {
  const auto& b = key.bytes();
  const unsigned index = ((unsigned{b[2]} << 8) | b[3]) % k_slots;
  return reinterpret_cast<std::uint64_t*>(static_cast<char*>(m_mapped) + 64 + std::size_t{index} * k_slot_bytes);
}

bool FileCheckTable::find(const Key& key, CheckRecord& out) const noexcept {
  std::uint64_t* s = slot(key);
  std::array<std::uint64_t, k_words> w{};
  for (std::size_t i = 0; i < k_words; ++i) {
    w[i] = load(s + i);
  }
  const auto kw = key_words(key);
  if (w[0] != kw[0] || w[1] != kw[1] || w[2] != kw[2] || w[3] != kw[3] || w[10] != seal_of(w)) {
    return false;
  }
  out = CheckRecord{w[4], w[5], w[6], w[7], w[8], w[9]};
  return true;
}

void FileCheckTable::record(const Key& key, const CheckRecord& rec) noexcept {
  const auto kw = key_words(key);
  std::array<std::uint64_t, k_words> w{kw[0], kw[1], kw[2], kw[3], rec.ino, rec.size, rec.mtime_ns,
                                       rec.ctime_ns, rec.xxh3, rec.sha256_prefix, 0, 0};
  w[10] = seal_of(w);
  std::uint64_t* s = slot(key);
  store_word(s + 10, 0);  // unseal first so a reader never pairs a new body with the old seal
  for (std::size_t i = 0; i < k_words; ++i) {
    store_word(s + i, w[i]);
  }
}

void FileCheckTable::forget(const Key& key) noexcept {
  CheckRecord r;
  if (find(key, r)) {
    store_word(slot(key) + 10, 0);
  }
}

std::uint64_t sha256_prefix_of_hex(std::string_view hex) noexcept {
  if (hex.size() < 16) {
    return 0;
  }
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < 16; ++i) {
    const char c = hex[i];
    unsigned d = 0;
    if (c >= '0' && c <= '9') {
      d = static_cast<unsigned>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      d = static_cast<unsigned>(c - 'a' + 10);
    } else {
      return 0;
    }
    v = (v << 4) | d;
  }
  return v;
}

}  // namespace kcache::store
