// store/file/file_payload.cpp: reading and checking a payload file in bounded
// chunks (FileStore::get, open_payload, verify) and PayloadFile.
//
// A payload is read in chunks of k_chunk bytes, each hashed right after it is
// read, while it is still in the CPU's cache: one pass over the bytes instead
// of a read followed by a hashing pass. get() reads into the returned payload
// without zero-filling it first (and, with LargeReads::mapped, maps payloads of
// 1 MiB or more); open_payload() and verify() hash through one
// chunk-sized buffer, so their memory does not grow with the payload.
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "store/file/file_store_impl.hpp"
#include "util/chunk_digest.hpp"
#include "util/copy_hash.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"
#include "util/uninit_string.hpp"

namespace kcache {

namespace io = util::io;

namespace {

// Big enough that a 4 MiB payload takes 16 reads, small enough to stay in a
// core's L2 cache between the read and the hash.
constexpr std::size_t k_chunk = 256 * 1024;

// Reads exactly `size` bytes at `offset` into `data` (pread: the descriptor's
// own offset is neither used nor moved), retrying EINTR and short reads.
// Returns 0, EPIPE when the file ends first, or an errno.
int read_fully(int fd, char* data, std::size_t size, std::uint64_t offset) noexcept {
  std::size_t have = 0;
  while (have < size) {
    const ssize_t n = ::pread(fd, data + have, size - have, static_cast<off_t>(offset + have));
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno;
    }
    if (n == 0) {
      return EPIPE;
    }
    have += static_cast<std::size_t>(n);
  }
  return 0;
}

// A read-only private mapping of a payload file, followed by a NUL byte
// (Payload::c_str): the bytes past the end of the file in its last page are
// zero, and a file of whole pages gets an anonymous (zero) page after it.
// Unmapped when the last Payload sharing it goes.
struct PayloadMapping {
  void* address = nullptr;
  std::size_t length = 0;
  PayloadMapping(void* a, std::size_t n) : address(a), length(n) {}
  PayloadMapping(const PayloadMapping&) = delete;
  PayloadMapping& operator=(const PayloadMapping&) = delete;
  ~PayloadMapping() { ::munmap(address, length); }
};

// Maps `size` (> 0) bytes of `fd` as above, its pages read in at once
// (MAP_POPULATE). Returns the mapping, or null with errno set.
std::shared_ptr<const PayloadMapping> map_payload(int fd, std::size_t size) {
  static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  // (Reserving an anonymous region first and mapping the file over it with
  // MAP_FIXED makes MAP_POPULATE about three times slower here: the file is
  // mapped first, and only a whole-page file has its last page replaced.)
  const bool whole_pages = size % page == 0;
  const std::size_t length = whole_pages ? size + page : size;
  // Populated up front from 1 MiB; below, faulted in as the check reads it
  // (the kernel maps 16 cached pages per fault): for a 155 KB payload in a new
  // process, 3 µs against 37 µs populated and 160 µs read into a fresh buffer
  // (docs/performance.md, "Process start").
  const int populate = size >= FileStore::k_map_min_bytes ? MAP_POPULATE : 0;
  void* region = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE | populate, fd, 0);
  if (region == MAP_FAILED) {
    return nullptr;
  }
  if (whole_pages && ::mmap(static_cast<char*>(region) + size, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                            -1, 0) == MAP_FAILED) {
    const int e = errno;
    ::munmap(region, length);
    errno = e;
    return nullptr;
  }
  return std::make_shared<const PayloadMapping>(region, length);
}

std::int64_t ctime_ns(const struct stat& st) noexcept {
  return static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
}

// Hashes `size` bytes of `fd` from offset 0 through one chunk-sized buffer.
// Returns 0, EPIPE when the file is shorter, or an errno.
int hash_file(int fd, std::uint64_t size, util::ChunkDigest* xxh, util::Sha256* sha) {
  const auto buffer = std::make_unique_for_overwrite<char[]>(static_cast<std::size_t>(std::min<std::uint64_t>(size, k_chunk)));
  std::uint64_t done = 0;
  while (done < size) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(k_chunk, size - done));
    std::size_t have = 0;
    while (have < n) {
      const ssize_t r = ::pread(fd, buffer.get() + have, n - have, static_cast<off_t>(done + have));
      if (r < 0) {
        if (errno == EINTR) {
          continue;
        }
        return errno;
      }
      if (r == 0) {
        return EPIPE;
      }
      have += static_cast<std::size_t>(r);
    }
    if (xxh != nullptr) {
      xxh->update(buffer.get(), n);
    }
    if (sha != nullptr) {
      sha->update(buffer.get(), n);
    }
    done += n;
  }
  return 0;
}

}  // namespace

int sha256_hex_of_file(int fd, std::uint64_t size, std::string& hex) {
  util::Sha256 sha;
  if (int e = hash_file(fd, size, nullptr, &sha); e != 0) {
    return e;
  }
  const auto digest = sha.finish();
  hex = util::to_hex(digest.data(), digest.size());
  return 0;
}

FileStore::Impl::PayloadCheck FileStore::Impl::check_payload(const Key& key, int fd, const struct stat& st,
                                                             const Passport& passport, Payload* out,
                                                             const PayloadAllocator* allocate) {
  const std::uint64_t size = passport.payload_size;
  const std::uint64_t sha_prefix = store::sha256_prefix_of_hex(passport.payload_sha256);
  const bool fast_allowed = options.verify == ReadVerify::fast_when_unchanged && checks != nullptr;
  // A record made by a full check of this very file (same inode, size, mtime,
  // ctime) lets XXH3 stand in for SHA-256.
  store::CheckRecord rec;
  const bool fast = fast_allowed && sha_prefix != 0 && checks->find(key, rec) &&
                    rec == store::CheckRecord::from_stat(st, rec.xxh3, sha_prefix);

  util::Sha256 sha;
  std::uint64_t xxh_value = 0;  // the fast check's digest (util/chunk_digest.hpp)
  int err = 0;
  std::string bytes;  // read into, then handed to *out without a copy
  const bool large = out != nullptr && size >= map_min_bytes();
  // Read straight into the memory the caller lends (a Python bytes object)
  // from FileStore::k_lend_min_bytes up, so that no copy follows the read.
  const bool lend = out != nullptr && allocate != nullptr && size >= FileStore::k_lend_min_bytes &&
                    !(large && options.large_reads == LargeReads::mapped);
  PayloadBuffer lent;
  if (lend) {
    lent = (*allocate)(static_cast<std::size_t>(size));
  }
  if (large && options.large_reads == LargeReads::copied) {
    if (lent.data == nullptr) {  // no memory lent: the payload's own, not zero-filled
      auto own = std::make_shared_for_overwrite<char[]>(static_cast<std::size_t>(size) + 1);
      lent = PayloadBuffer{std::shared_ptr<const void>(own, own.get()), own.get()};
    }
  }
  if (lent.data != nullptr) {
    // Into the caller's memory (or, LargeReads::copied, the payload's own): read (never mapped: a
    // truncated file is a short read, not a SIGBUS), the copy hashed behind
    // the reading as in the mapped case, and from 1 MiB up read and hashed
    // by two threads side by side, a chunk each at a time (util/copy_hash.hpp);
    // the bytes returned are the bytes checked, in memory no other process can write.
    const auto n = static_cast<std::size_t>(size);
    xxh_value = util::fill_and_chunk_digest(
        lent.data, n,
        [fd](char* to, std::size_t offset, std::size_t len) noexcept { return read_fully(fd, to, len, offset); },
        err);
    if (err == 0) {
      lent.data[n] = '\0';
      *out = Payload::adopt(std::move(lent.owner), std::string_view(lent.data, n));
      if (!fast) {
        sha.update(out->view());
      }
    }
  } else if (large && options.large_reads == LargeReads::mapped) {
    // Mapped: hashed where the page cache holds it, never copied, and shared
    // as it is by the returned Payload. kcache never writes an entry's file in
    // place (puts publish by rename, removals unlink), so the mapped bytes stay
    // the ones checked here (docs/on-disk-format.md, "Reading").
    auto mapping = map_payload(fd, static_cast<std::size_t>(size));
    if (mapping == nullptr) {
      return {PayloadVerdict::error, errno};
    }
    std::string_view mapped(static_cast<const char*>(mapping->address), static_cast<std::size_t>(size));
    if (PayloadBuffer into = allocate != nullptr ? (*allocate)(mapped.size()) : PayloadBuffer{}; into.data != nullptr) {
      // Copied into the caller's memory and checked there (the bytes returned
      // are the bytes checked), the copy hashed behind the copying on a second
      // core where one is free (util/copy_hash.hpp).
      xxh_value = util::copy_and_chunk_digest(into.data, mapped.data(), mapped.size());
      into.data[mapped.size()] = '\0';
      mapped = std::string_view(into.data, mapped.size());
      *out = Payload::adopt(std::move(into.owner), mapped);
    } else {
      xxh_value = util::chunk_digest(mapped);
      *out = Payload::adopt(std::move(mapping), mapped);
    }
    if (!fast) {
      sha.update(mapped);
    }
  } else if (out != nullptr && size <= k_chunk) {
    util::overwrite_string(bytes, static_cast<std::size_t>(size), [&](char* data, std::size_t n) -> std::size_t {
      err = read_fully(fd, data, n, 0);
      return err == 0 ? n : 0;
    });
    if (err == 0) {
      xxh_value = util::chunk_digest(bytes);
      if (!fast) {
        sha.update(bytes);
      }
    }
  } else if (out != nullptr) {
    util::ChunkDigest xxh(size);
    util::overwrite_string(bytes, static_cast<std::size_t>(size), [&](char* data, std::size_t n) -> std::size_t {
      for (std::size_t done = 0; done < n; done += k_chunk) {
        const std::size_t len = std::min(k_chunk, n - done);
        if ((err = read_fully(fd, data + done, len, done)) != 0) {
          return 0;
        }
        xxh.update(data + done, len);
        if (!fast) {
          sha.update(data + done, len);
        }
      }
      return n;
    });
    xxh_value = xxh.digest();
  } else {
    util::ChunkDigest xxh(size);
    err = hash_file(fd, size, &xxh, fast ? nullptr : &sha);
    xxh_value = xxh.digest();
  }
  if (err == EPIPE) {
    return {PayloadVerdict::bad, 0};  // shorter than its stat said: changed under us
  }
  if (err != 0) {
    return {PayloadVerdict::error, err};
  }
  if (out != nullptr && out->empty() && !bytes.empty()) {
    *out = std::move(bytes);
  }
  std::string sha_hex;
  if (!fast) {
    const auto digest = sha.finish();
    sha_hex = util::to_hex(digest.data(), digest.size());
  }
  return judge_payload(key, st, passport, fast, fast_allowed, rec, xxh_value, sha_hex, [&](std::string& hex) {
    if (out != nullptr) {
      hex = util::sha256_hex(out->view());
      return 0;
    }
    return sha256_hex_of_file(fd, size, hex);
  });
}

tl::expected<Payload, int> FileStore::Impl::load_checked_payload(int fd, std::uint64_t size) const {
  const auto n = static_cast<std::size_t>(size);
  if (size >= map_min_bytes() && options.large_reads == LargeReads::mapped) {
    auto mapping = map_payload(fd, n);
    if (mapping == nullptr) {
      return tl::unexpected(errno);
    }
    const std::string_view mapped(static_cast<const char*>(mapping->address), n);
    return Payload::adopt(std::move(mapping), mapped);
  }
  // Read (never mapped with LargeReads::copied: a truncated file is a short read, not a SIGBUS).
  auto own = std::make_shared_for_overwrite<char[]>(n + 1);
  if (const int e = read_fully(fd, own.get(), n, 0); e != 0) {
    return tl::unexpected(e);
  }
  own[n] = '\0';
  const std::string_view bytes(own.get(), n);
  return Payload::adopt(std::shared_ptr<const void>(own, own.get()), bytes);
}

FileStore::Impl::PayloadCheck FileStore::Impl::judge_payload(const Key& key, const struct stat& st,
                                                             const Passport& passport, bool fast, bool fast_allowed,
                                                             const store::CheckRecord& rec, std::uint64_t xxh_value,
                                                             const std::string& sha_hex,
                                                             const std::function<int(std::string&)>& rehash) {
  if (fast && xxh_value == rec.xxh3) {
    return {PayloadVerdict::ok, 0};
  }
  std::string hex = sha_hex;
  if (fast) {
    // The record did not hold: judge by SHA-256 after all.
    if (int e = rehash(hex); e != 0) {
      return {e == EPIPE ? PayloadVerdict::bad : PayloadVerdict::error, e == EPIPE ? 0 : e};
    }
  }
  if (hex != passport.payload_sha256) {
    return {PayloadVerdict::bad, 0};
  }
  if (fast_allowed) {
    checks->record(key, store::CheckRecord::from_stat(st, xxh_value, store::sha256_prefix_of_hex(passport.payload_sha256)));
  }
  return {PayloadVerdict::ok, 0};
}

FileStore::Impl::PayloadCheck FileStore::Impl::check_payload_view(const Key& key, int fd, const struct stat& st,
                                                                  const Passport& passport, PayloadView& view) {
  const std::uint64_t size = passport.payload_size;
  const std::uint64_t sha_prefix = store::sha256_prefix_of_hex(passport.payload_sha256);
  const bool fast_allowed = options.verify == ReadVerify::fast_when_unchanged && checks != nullptr;
  store::CheckRecord rec;
  const bool fast = fast_allowed && sha_prefix != 0 && checks->find(key, rec) &&
                    rec == store::CheckRecord::from_stat(st, rec.xxh3, sha_prefix);
  view.reset();
  if (size >= FileStore::k_map_min_bytes) {
    // Mapped: the bytes are the page cache's, hashed where they lie, never copied.
    void* map = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED) {
      return {PayloadVerdict::error, errno};
    }
    view.m_data = static_cast<const char*>(map);
    view.m_mapped = true;
  } else {
    view.m_owned = std::make_unique_for_overwrite<char[]>(static_cast<std::size_t>(std::max<std::uint64_t>(size, 1)));
    if (int e = read_fully(fd, view.m_owned.get(), static_cast<std::size_t>(size), 0); e != 0) {
      view.reset();
      return {e == EPIPE ? PayloadVerdict::bad : PayloadVerdict::error, e == EPIPE ? 0 : e};
    }
    view.m_data = view.m_owned.get();
  }
  view.m_size = static_cast<std::size_t>(size);
  const std::string_view bytes = view.bytes();
  const std::uint64_t xxh_value = util::chunk_digest(bytes);
  const std::string sha_hex = fast ? std::string() : util::sha256_hex(bytes);
  auto verdict = judge_payload(key, st, passport, fast, fast_allowed, rec, xxh_value, sha_hex, [&](std::string& hex) {
    hex = util::sha256_hex(bytes);
    return 0;
  });
  if (verdict.verdict != PayloadVerdict::ok) {
    view.reset();
  }
  return verdict;
}

// ---------------------------------------------------------------- PayloadView

PayloadView::PayloadView(PayloadView&& other) noexcept
    : m_passport(std::move(other.m_passport)),
      m_data(std::exchange(other.m_data, nullptr)),
      m_size(std::exchange(other.m_size, 0)),
      m_mapped(std::exchange(other.m_mapped, false)),
      m_owned(std::move(other.m_owned)) {}

PayloadView& PayloadView::operator=(PayloadView&& other) noexcept {
  if (this != &other) {
    reset();
    m_passport = std::move(other.m_passport);
    m_data = std::exchange(other.m_data, nullptr);
    m_size = std::exchange(other.m_size, 0);
    m_mapped = std::exchange(other.m_mapped, false);
    m_owned = std::move(other.m_owned);
  }
  return *this;
}

PayloadView::~PayloadView() { reset(); }

void PayloadView::reset() noexcept {
  if (m_mapped && m_data != nullptr) {
    ::munmap(const_cast<char*>(m_data), m_size);
  }
  m_data = nullptr;
  m_size = 0;
  m_mapped = false;
  m_owned.reset();
}

// ---------------------------------------------------------------- PayloadFile

PayloadFile::PayloadFile(PayloadFile&& other) noexcept
    : m_passport(std::move(other.m_passport)),
      m_fd(std::exchange(other.m_fd, -1)),
      m_ino(other.m_ino),
      m_mtime_ns(other.m_mtime_ns),
      m_ctime_ns(other.m_ctime_ns) {}

PayloadFile& PayloadFile::operator=(PayloadFile&& other) noexcept {
  if (this != &other) {
    if (m_fd >= 0) {
      ::close(m_fd);
    }
    m_passport = std::move(other.m_passport);
    m_fd = std::exchange(other.m_fd, -1);
    m_ino = other.m_ino;
    m_mtime_ns = other.m_mtime_ns;
    m_ctime_ns = other.m_ctime_ns;
  }
  return *this;
}

PayloadFile::~PayloadFile() {
  if (m_fd >= 0) {
    ::close(m_fd);
  }
}

Result<void> PayloadFile::copy_to(int out_fd, std::string_view out_name) const {
  const std::uint64_t size = m_passport.payload_size;
  std::uint64_t done = 0;
  bool use_sendfile = true;
  std::unique_ptr<char[]> buffer;
  while (done < size) {
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(size - done, 1U << 30));
    if (use_sendfile) {
      off_t offset = static_cast<off_t>(done);
      const ssize_t n = ::sendfile(out_fd, m_fd, &offset, want);
      if (n > 0) {
        done += static_cast<std::uint64_t>(n);
        continue;
      }
      if (n == 0) {
        return make_error(ErrorCode::corrupt, "the payload of " + m_passport.key.hex() + " shrank while it was copied");
      }
      if (errno == EINTR || errno == EAGAIN) {
        continue;
      }
      if (errno != EINVAL && errno != ENOSYS) {
        return make_errno_error(errno, "cannot write " + std::string(out_name));
      }
      use_sendfile = false;  // this pair of files cannot use sendfile: copy through a buffer
    }
    if (!buffer) {
      buffer = std::make_unique_for_overwrite<char[]>(k_chunk);
    }
    const auto len = static_cast<std::size_t>(std::min<std::uint64_t>(k_chunk, size - done));
    const ssize_t r = ::pread(m_fd, buffer.get(), len, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r < 0) {
      return make_errno_error(errno, "cannot read the payload of " + m_passport.key.hex());
    }
    if (r == 0) {
      return make_error(ErrorCode::corrupt, "the payload of " + m_passport.key.hex() + " shrank while it was copied");
    }
    if (int e = io::write_all(out_fd, std::string_view(buffer.get(), static_cast<std::size_t>(r))); e != 0) {
      return make_errno_error(e, "cannot write " + std::string(out_name));
    }
    done += static_cast<std::uint64_t>(r);
  }
  struct stat st {};
  const bool stat_ok = ::fstat(m_fd, &st) == 0;  // one status for both checks: an unlink between two changes the ctime
  if (stat_ok && st.st_nlink == 0 && static_cast<std::uint64_t>(st.st_ino) == m_ino) {
    // Unlinked while it was copied: kcache's own clear, prune, eviction or a
    // newer put of the key (they never write into a published file). The
    // entry is gone: a miss, not damage.
    return make_error(ErrorCode::not_found, "the entry " + m_passport.key.hex() +
                                                " was removed from the cache while it was copied (`kcache clear`, "
                                                "`prune` or an eviction in another process): a miss");
  }
  if (!stat_ok || static_cast<std::uint64_t>(st.st_ino) != m_ino ||
      static_cast<std::uint64_t>(st.st_size) != size || mtime_ns(st) != m_mtime_ns || ctime_ns(st) != m_ctime_ns) {
    return make_error(ErrorCode::corrupt, "the payload of " + m_passport.key.hex() +
                                              " was modified while it was copied; run `kcache verify --repair`");
  }
  return {};
}

Result<void> PayloadFile::read_at(std::uint64_t offset, char* out, std::size_t n) const {
  if (offset > m_passport.payload_size || n > m_passport.payload_size - offset) {
    return make_error(ErrorCode::invalid_argument, "read past the end of the payload of " + m_passport.key.hex());
  }
  if (const int e = read_fully(m_fd, out, n, offset); e != 0) {
    return e == EPIPE ? make_error(ErrorCode::corrupt, "the payload of " + m_passport.key.hex() + " shrank while it was read")
                      : make_errno_error(e, "cannot read the payload of " + m_passport.key.hex());
  }
  return {};
}

}  // namespace kcache
