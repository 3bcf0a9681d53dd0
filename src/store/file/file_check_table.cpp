#include "store/file/file_check_table.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "store/file/shared_file.hpp"
#include "util/fd.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache::store {

namespace {

constexpr SharedFileFormat format_for(unsigned slots) {
  return SharedFileFormat{"checks", {'K', 'C', 'C', 'H', 'K', '0', '0', '1'}, 1, slots,
                          FileCheckTable::file_size(slots)};
}

bool valid_slots(std::uint32_t slots) noexcept {
  return slots >= FileCheckTable::k_min_slots && slots <= FileCheckTable::k_max_slots && (slots & (slots - 1)) == 0;
}

// Maps the existing table at the size it has (one open, one fstat, one mmap:
// this runs in every process). Returns {null, 0} when there is no usable file
// (missing, damaged, or of another format).
std::pair<void*, unsigned> map_existing(int stats_dir_fd) {
  util::Fd fd(util::io::openat(stats_dir_fd, "checks", O_RDWR | O_NOFOLLOW | O_NONBLOCK));
  struct stat st {};
  if (!fd || util::io::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size < static_cast<off_t>(FileCheckTable::k_header_bytes) ||
      (static_cast<std::size_t>(st.st_size) - FileCheckTable::k_header_bytes) % FileCheckTable::k_slot_bytes != 0) {
    return {nullptr, 0};
  }
  const std::size_t n = (static_cast<std::size_t>(st.st_size) - FileCheckTable::k_header_bytes) /
                        FileCheckTable::k_slot_bytes;
  if (n > FileCheckTable::k_max_slots || !valid_slots(static_cast<std::uint32_t>(n))) {
    return {nullptr, 0};
  }
  const auto slots = static_cast<unsigned>(n);
  const SharedFileFormat format = format_for(slots);
  void* p = ::mmap(nullptr, format.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    return {nullptr, 0};
  }
  std::uint32_t version = 0;
  std::uint32_t count = 0;
  std::memcpy(&version, static_cast<const char*>(p) + 8, 4);
  std::memcpy(&count, static_cast<const char*>(p) + 12, 4);
  if (std::memcmp(p, format.magic.data(), 8) != 0 || version != format.version || count != slots) {
    ::munmap(p, format.size);
    return {nullptr, 0};
  }
  return {p, slots};
}

constexpr std::uint64_t k_seal_salt = 0x6b63616368653031ULL;  // "kcache01"
constexpr std::size_t k_words = FileCheckTable::k_slot_bytes / 8;  // 12
constexpr std::size_t k_sealed_words = 10;                          // key(4) + 6 fields

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

// A key's home slot: bytes 2..3 of the key modulo N (every kcache looks
// there first; one before sets of ways looked nowhere else).
unsigned home_index(const unsigned char* key_bytes, unsigned slots) noexcept {
  return ((unsigned{key_bytes[2]} << 8) | key_bytes[3]) & (slots - 1);
}

// The k-th way probed for a key whose home is `home`: its set is the aligned
// group of k_ways slots around home, probed from home on, wrapping in the set.
constexpr unsigned k_ways = FileCheckTable::k_ways;
unsigned way_index(unsigned home, unsigned k) noexcept {
  return (home & ~(k_ways - 1)) | ((home + k) & (k_ways - 1));
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

unsigned FileCheckTable::slots_for_cap(std::uint64_t cap_bytes) noexcept {
  if (cap_bytes == 0) {
    return k_max_slots;
  }
  unsigned slots = k_min_slots;
  while (slots < k_max_slots && std::uint64_t{slots} * 2 * k_cap_bytes_per_slot <= cap_bytes) {
    slots *= 2;
  }
  return slots;
}

unsigned FileCheckTable::slots_for_entries(std::uint64_t entries, unsigned max_slots) noexcept {
  unsigned slots = k_min_slots;
  while (slots < max_slots && slots < k_max_slots && std::uint64_t{slots} < 2 * entries) {
    slots *= 2;
  }
  return slots;
}

std::unique_ptr<FileCheckTable> FileCheckTable::open(int stats_dir_fd, mode_t mode, unsigned max_slots,
                                                     TableFile when) {
  if (!valid_slots(max_slots)) {
    max_slots = k_min_slots;
  }
  if (when == TableFile::on_first_use) {
    return std::unique_ptr<FileCheckTable>(new FileCheckTable(stats_dir_fd, mode, max_slots, Mapping{}));
  }
  // Another process may have made the table larger (with use, or with another cap): its size wins.
  if (const auto [p, slots] = map_existing(stats_dir_fd); p != nullptr) {
    return std::unique_ptr<FileCheckTable>(new FileCheckTable(stats_dir_fd, mode, max_slots, Mapping{p, slots}));
  }
  // Missing or damaged: a new, small table (another process may create one
  // at the same moment: the first one linked in place wins).
  void* p = map_shared_file(stats_dir_fd, format_for(k_min_slots), mode).data;
  if (p == nullptr) {
    // Another process's table of another size won the race.
    if (const auto [q, slots] = map_existing(stats_dir_fd); q != nullptr) {
      return std::unique_ptr<FileCheckTable>(new FileCheckTable(stats_dir_fd, mode, max_slots, Mapping{q, slots}));
    }
    return nullptr;
  }
  return std::unique_ptr<FileCheckTable>(new FileCheckTable(stats_dir_fd, mode, max_slots, Mapping{p, k_min_slots}));
}

FileCheckTable::FileCheckTable(int dir_fd, mode_t mode, unsigned max_slots, Mapping first)
    : m_dir_fd(dir_fd), m_mode(mode), m_max_slots(max_slots) {
  if (first.data != nullptr) {
    m_mappings.push_back(first);
    m_current.store(&m_mappings.back(), std::memory_order_release);
  }
}

const FileCheckTable::Mapping* FileCheckTable::map_or_make() const noexcept {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (const Mapping* m = m_current.load(std::memory_order_acquire); m != nullptr) {
    return m;  // another thread made it first
  }
  // As open() does: the table another process made (its size wins), else a new, small one.
  Mapping made;
  if (const auto [p, slots] = map_existing(m_dir_fd); p != nullptr) {
    made = Mapping{p, slots};
  } else if (const unsigned want = m_unmade_slots.load(std::memory_order_relaxed);
             void* q = map_shared_file(m_dir_fd, format_for(want), m_mode).data) {
    made = Mapping{q, want};
  } else if (const auto [r, other_slots] = map_existing(m_dir_fd); r != nullptr) {
    made = Mapping{r, other_slots};  // another process's table of another size won the race
  } else {
    return nullptr;
  }
  try {
    m_mappings.push_back(made);
  } catch (...) {
    unmap_shared_file(made.data, format_for(made.slots));
    return nullptr;
  }
  m_current.store(&m_mappings.back(), std::memory_order_release);
  return &m_mappings.back();
}


FileCheckTable::~FileCheckTable() {
  for (const Mapping& m : m_mappings) {
    unmap_shared_file(m.data, format_for(m.slots));
  }
}

namespace {

bool replaced(const void* mapped) noexcept {
  auto* word = reinterpret_cast<std::uint64_t*>(static_cast<char*>(const_cast<void*>(mapped)) +
                                                FileCheckTable::k_replaced_offset);
  return load(word) != 0;
}

}  // namespace

const FileCheckTable::Mapping* FileCheckTable::current() const noexcept {
  const Mapping* m = m_current.load(std::memory_order_acquire);
  if (m == nullptr) {
    return map_or_make();
  }
  return replaced(m->data) ? follow(m) : m;
}

const FileCheckTable::Mapping* FileCheckTable::mapped() const noexcept {
  const Mapping* m = m_current.load(std::memory_order_acquire);
  return m != nullptr && replaced(m->data) ? follow(m) : m;
}

const FileCheckTable::Mapping* FileCheckTable::follow(const Mapping* seen) const noexcept {
  std::lock_guard<std::mutex> lock(m_mutex);
  const Mapping* m = m_current.load(std::memory_order_acquire);
  if (m != seen && !replaced(m->data)) {
    return m;  // another thread followed it already
  }
  // The file in place may itself be replaced between reading its header and
  // mapping it: a few tries, then the old table (still correct, only unshared).
  for (int attempt = 0; attempt < 4; ++attempt) {
    const auto [p, slots] = map_existing(m_dir_fd);
    if (p == nullptr) {
      break;
    }
    if (replaced(p)) {
      unmap_shared_file(p, format_for(slots));
      continue;
    }
    try {
      m_mappings.push_back(Mapping{p, slots});
    } catch (...) {
      unmap_shared_file(p, format_for(slots));  // no memory: keep the old table (correct, only unshared)
      return m;
    }
    m_current.store(&m_mappings.back(), std::memory_order_release);
    return &m_mappings.back();
  }
  return m;
}

void FileCheckTable::fit(std::uint64_t entries) noexcept {
  const unsigned want = slots_for_entries(entries, m_max_slots);
  const Mapping* m = mapped();
  if (m == nullptr) {
    // Not made yet: it is made at this size by its first use.
    unsigned asked = m_unmade_slots.load(std::memory_order_relaxed);
    while (asked < want && !m_unmade_slots.compare_exchange_weak(asked, want, std::memory_order_relaxed)) {
    }
    return;
  }
  if (m->slots >= want) {
    return;
  }
  try {
    std::lock_guard<std::mutex> lock(m_mutex);
    const Mapping* old = m_current.load(std::memory_order_acquire);
    if (old->slots >= want || replaced(old->data)) {
      return;  // grown meanwhile (by this process, or by another: followed on the next lookup)
    }
    // Carry over the records that still seal (relaxed loads: a record torn
    // by a concurrent writer fails its seal and is left behind).
    std::string image(file_size(want), '\0');
    for (unsigned i = 0; i < old->slots; ++i) {
      auto* from = reinterpret_cast<std::uint64_t*>(static_cast<char*>(old->data) + k_header_bytes +
                                                   std::size_t{i} * k_slot_bytes);
      std::array<std::uint64_t, k_words> w{};
      for (std::size_t j = 0; j < k_words; ++j) {
        w[j] = load(from + j);
      }
      if (w[10] == 0 || w[10] != seal_of(w)) {
        continue;
      }
      // Into the first free way of its set in the new table (home first); a
      // set already full drops it (the table is a cache).
      unsigned char key_bytes[32];
      std::memcpy(key_bytes, w.data(), 32);
      const unsigned home = home_index(key_bytes, want);
      for (unsigned k = 0; k < k_ways; ++k) {
        char* to = image.data() + k_header_bytes + std::size_t{way_index(home, k)} * k_slot_bytes;
        std::uint64_t to_seal = 0;
        std::memcpy(&to_seal, to + k_sealed_words * 8, 8);
        if (to_seal == 0) {
          std::memcpy(to, w.data(), k_slot_bytes);
          break;
        }
      }
    }
    const MappedSharedFile grown =
        replace_shared_file(m_dir_fd, format_for(want), m_mode, std::move(image), k_replaced_offset);
    if (grown.data == nullptr) {
      return;
    }
    m_mappings.push_back(Mapping{grown.data, want});
    m_current.store(&m_mappings.back(), std::memory_order_release);
  } catch (...) {
    // No memory for the image: keep the table as it is.
  }
}

std::uint64_t* FileCheckTable::slot(const Mapping& m, unsigned index) noexcept {
  return reinterpret_cast<std::uint64_t*>(static_cast<char*>(m.data) + k_header_bytes +
                                         std::size_t{index} * k_slot_bytes);
}

namespace {

std::array<std::uint64_t, k_words> load_slot(std::uint64_t* s) noexcept {
  std::array<std::uint64_t, k_words> w{};
  for (std::size_t i = 0; i < k_words; ++i) {
    w[i] = load(s + i);
  }
  return w;
}

bool holds_key(const std::array<std::uint64_t, k_words>& w, const std::array<std::uint64_t, 4>& kw) noexcept {
  return w[0] == kw[0] && w[1] == kw[1] && w[2] == kw[2] && w[3] == kw[3];
}

bool sealed(const std::array<std::uint64_t, k_words>& w) noexcept { return w[10] != 0 && w[10] == seal_of(w); }

}  // namespace

bool FileCheckTable::find(const Key& key, CheckRecord& out) const noexcept {
  const Mapping* m = current();
  if (m == nullptr) {
    return false;
  }
  const auto kw = key_words(key);
  const unsigned home = home_index(key.bytes().data(), m->slots);
  for (unsigned k = 0; k < k_ways; ++k) {
    const auto w = load_slot(slot(*m, way_index(home, k)));
    if (holds_key(w, kw) && sealed(w)) {
      out = CheckRecord{w[4], w[5], w[6], w[7], w[8], w[9]};
      return true;
    }
  }
  return false;
}

void FileCheckTable::record(const Key& key, const CheckRecord& rec) noexcept {
  const auto kw = key_words(key);
  std::array<std::uint64_t, k_words> w{kw[0], kw[1], kw[2], kw[3], rec.ino, rec.size, rec.mtime_ns,
                                       rec.ctime_ns, rec.xxh3, rec.sha256_prefix, 0, 0};
  w[10] = seal_of(w);
  const Mapping* m = current();
  if (m == nullptr) {
    return;
  }
  // The way that holds this key already (sealed or not), else the first way
  // that holds no record (home first), else one chosen by the record's own
  // bits: keys that share a home no longer take turns in one slot.
  const unsigned home = home_index(key.bytes().data(), m->slots);
  unsigned chosen = k_ways;
  unsigned free_way = k_ways;
  for (unsigned k = 0; k < k_ways && chosen == k_ways; ++k) {
    const auto there = load_slot(slot(*m, way_index(home, k)));
    if (holds_key(there, kw)) {
      chosen = k;
    } else if (free_way == k_ways && !sealed(there)) {
      free_way = k;
    }
  }
  if (chosen == k_ways) {
    chosen = free_way != k_ways ? free_way : static_cast<unsigned>((rec.xxh3 ^ rec.ctime_ns) % k_ways);
  }
  std::uint64_t* s = slot(*m, way_index(home, chosen));
  store_word(s + 10, 0);  // unseal first so a reader never pairs a new body with the old seal
  for (std::size_t i = 0; i < k_words; ++i) {
    store_word(s + i, w[i]);
  }
}

void FileCheckTable::forget(const Key& key) noexcept {
  const Mapping* m = current();
  if (m == nullptr) {
    return;
  }
  const auto kw = key_words(key);
  const unsigned home = home_index(key.bytes().data(), m->slots);
  for (unsigned k = 0; k < k_ways; ++k) {  // every way: two processes may have recorded the key in two
    std::uint64_t* s = slot(*m, way_index(home, k));
    if (holds_key(load_slot(s), kw)) {
      store_word(s + 10, 0);
    }
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
