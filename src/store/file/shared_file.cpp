#include "store/file/shared_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <string>

#include "util/fd.hpp"
#include "util/posix_io.hpp"
#include "util/unique_name.hpp"

namespace kcache::store {

namespace {

bool header_ok(const void* mapped, const SharedFileFormat& format) {
  const auto* bytes = static_cast<const unsigned char*>(mapped);
  std::uint32_t version = 0;
  std::uint32_t count = 0;
  std::memcpy(&version, bytes + 8, 4);
  std::memcpy(&count, bytes + 12, 4);
  return std::memcmp(bytes, format.magic.data(), 8) == 0 && version == format.version && count == format.count;
}

// Sets `image` to `format`'s zero-filled image with its header.
void fill_image(const SharedFileFormat& format, std::string& image) {
  image.resize(format.size, '\0');
  std::memcpy(image.data(), format.magic.data(), 8);
  std::memcpy(image.data() + 8, &format.version, 4);
  std::memcpy(image.data() + 12, &format.count, 4);
}

std::string temp_name_for(const SharedFileFormat& format) {
  return std::string(".") + format.name + "-" + util::temp_suffix() + ".tmp";
}

// Creates the temporary file `tmp` holding `image` (with `format`'s header),
// fully allocated, and returns it open read-write; empty (and `tmp` removed)
// on failure.
util::Fd write_temp(int dir_fd, const std::string& tmp, const SharedFileFormat& format, mode_t mode,
                    std::string& image) {
  util::Fd fd(util::io::openat(dir_fd, tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, mode));
  if (!fd) {
    return fd;
  }
  fill_image(format, image);
  // No fsync: write() has allocated every block (so a store through the
  // mapping never meets a hole), and what a crash can leave — a file that is
  // empty, short or zero-filled — fails the size or header check and is
  // rebuilt like any damaged file. The words are updated through the mapping
  // and never synced either. An fsync here cost 1-8 ms in every new cache
  // directory (docs/performance.md, "Process start").
  if (util::io::fchmod(fd.get(), mode) != 0 || util::io::write_all(fd.get(), image) != 0) {
    util::io::unlinkat(dir_fd, tmp.c_str(), 0);
    return {};
  }
  return fd;
}

// Writes a fresh, fully allocated file and links it in place. With `replace`,
// a damaged file is replaced; otherwise an existing file (another process's)
// wins.
bool create_file(int dir_fd, const SharedFileFormat& format, mode_t mode, bool replace) {
  const std::string tmp = temp_name_for(format);
  std::string image;
  bool ok = static_cast<bool>(write_temp(dir_fd, tmp, format, mode, image));
  if (ok) {
    ok = replace ? util::io::renameat(dir_fd, tmp.c_str(), dir_fd, format.name) == 0
                 : (util::io::linkat(dir_fd, tmp.c_str(), dir_fd, format.name, 0) == 0 || errno == EEXIST);
  }
  util::io::unlinkat(dir_fd, tmp.c_str(), 0);
  return ok;
}

// Makes `format.name` (absent a moment ago): the staged file is written in
// full, mapped from the descriptor it was written through and linked in
// place; the mapping is returned, so the linked file is neither reopened nor
// stat-ed (3 system calls fewer than create_file + map_file in every new
// cache directory). Null when it could not be made or another process linked
// its file first (errno EEXIST: map that one). An unnamed file (O_TMPFILE)
// linked once written would save the staged name's unlink too, but costs
// more on ext4 (the orphan list: +56 us median per file on the 2-core build
// machine, docs/performance.md "A new cache directory").
void* create_mapped(int dir_fd, const SharedFileFormat& format, mode_t mode) {
  const std::string tmp = temp_name_for(format);
  std::string image;
  const util::Fd fd = write_temp(dir_fd, tmp, format, mode, image);
  if (!fd) {
    return nullptr;
  }
  void* p = ::mmap(nullptr, format.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  int err = EIO;
  if (p != MAP_FAILED && util::io::linkat(dir_fd, tmp.c_str(), dir_fd, format.name, 0) != 0) {
    err = errno;
    ::munmap(p, format.size);
    p = MAP_FAILED;
  }
  util::io::unlinkat(dir_fd, tmp.c_str(), 0);
  if (p == MAP_FAILED) {
    errno = err;
    return nullptr;
  }
  return p;
}

// Maps `format.name`; null when it cannot be used, with `missing` set when
// it does not exist.
void* map_file(int dir_fd, const SharedFileFormat& format, bool* missing = nullptr) {
  util::Fd fd(util::io::openat(dir_fd, format.name, O_RDWR | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) {
    if (missing != nullptr) {
      *missing = errno == ENOENT;
    }
    return nullptr;
  }
  struct stat st {};
  if (util::io::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::size_t>(st.st_size) != format.size) {
    return nullptr;
  }
  void* p = ::mmap(nullptr, format.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    return nullptr;
  }
  if (!header_ok(p, format)) {
    ::munmap(p, format.size);
    return nullptr;
  }
  return p;
}

}  // namespace

MappedSharedFile map_shared_file(int dir_fd, const SharedFileFormat& format, mode_t mode) {
  MappedSharedFile out;
  bool missing = false;
  out.data = map_file(dir_fd, format, &missing);
  if (out.data == nullptr && missing) {
    // A new directory's file (a cold compile into a new cache directory
    // makes the counters: docs/performance.md, "Cold CLI compile").
    out.data = create_mapped(dir_fd, format, mode);
    if (out.data != nullptr) {
      out.fresh = true;
      return out;
    }
    if (errno == EEXIST) {  // another process's file won
      out.data = map_file(dir_fd, format);
      if (out.data != nullptr) {
        return out;
      }
      missing = false;  // the winner's file is unusable: replace it
    }
  }
  if (out.data == nullptr) {
    struct stat st {};
    const bool exists = !missing && util::io::fstatat(dir_fd, format.name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (create_file(dir_fd, format, mode, exists)) {
      out.data = map_file(dir_fd, format);
      out.fresh = out.data != nullptr;
    }
  }
  return out;
}

void* map_stats_file(const std::filesystem::path& cache_dir, const SharedFileFormat& format, mode_t mode) {
  if (cache_dir.empty()) {
    return nullptr;
  }
  const int dir = ::open((cache_dir / "v1" / "stats").c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) {
    return nullptr;
  }
  void* data = map_shared_file(dir, format, mode).data;
  ::close(dir);
  return data;
}

MappedSharedFile replace_shared_file(int dir_fd, const SharedFileFormat& format, mode_t mode, std::string image,
                                     std::size_t replaced_flag_offset) {
  MappedSharedFile out;
  const std::string tmp = temp_name_for(format);
  if (!write_temp(dir_fd, tmp, format, mode, image)) {
    return out;
  }
  if (::renameat2(dir_fd, tmp.c_str(), dir_fd, format.name, RENAME_EXCHANGE) == 0) {
    // `tmp` now names the file that was in place: flag it for its users.
    util::Fd old(util::io::openat(dir_fd, tmp.c_str(), O_WRONLY | O_NOFOLLOW | O_NONBLOCK));
    struct stat st {};
    const std::uint64_t one = 1;
    if (old && util::io::fstat(old.get(), &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<std::size_t>(st.st_size) >= replaced_flag_offset + sizeof one) {
      [[maybe_unused]] const auto n = ::pwrite(old.get(), &one, sizeof one, static_cast<off_t>(replaced_flag_offset));
    }
    util::io::unlinkat(dir_fd, tmp.c_str(), 0);
  } else if (util::io::renameat(dir_fd, tmp.c_str(), dir_fd, format.name) != 0) {
    util::io::unlinkat(dir_fd, tmp.c_str(), 0);
    return out;
  }
  out.data = map_file(dir_fd, format);
  out.fresh = out.data != nullptr;
  return out;
}

std::vector<std::string> sweep_staged_shared_files(int dir_fd, std::int64_t min_age_s) {
  std::vector<std::string> staged;
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  util::io::for_each_dir_entry(dir_fd, [&](std::string_view name, unsigned char) {
    if (name.size() < 6 || name.front() != '.' || !name.ends_with(".tmp") || name.find('-') == std::string_view::npos) {
      return;
    }
    const std::string n(name);
    struct stat st {};
    // A second link is the published file itself (its maker was killed
    // between link and unlink, or is just unlinking it: its unlink then
    // fails harmlessly), whose mtime the mapping's stores keep young.
    if (util::io::fstatat(dir_fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        (st.st_nlink > 1 || now.tv_sec - st.st_mtim.tv_sec >= min_age_s) &&
        util::io::unlinkat(dir_fd, n.c_str(), 0) == 0) {
      staged.push_back(n);
    }
  });
  return staged;
}

void unmap_shared_file(void* data, const SharedFileFormat& format) noexcept {
  if (data != nullptr) {
    ::munmap(data, format.size);
  }
}

}  // namespace kcache::store
