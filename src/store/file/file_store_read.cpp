// store/file/file_store_read.cpp: FileStore reads (get, get_into, get_view,
// open_payload) and the passport memo that lets a hit skip the parse.
#include "kcache/file_store.hpp"

#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "store/file/entry_cost.hpp"
#include "store/file/file_store_impl.hpp"
#include "util/posix_io.hpp"

namespace kcache {

using store::Counter;
namespace io = util::io;

// ---------------------------------------------------------------- passport memo

std::shared_ptr<const Passport> FileStore::Impl::memo_find(const Key& key, const struct stat& st) {
  std::lock_guard<std::mutex> lock(memo_mutex);
  const auto it = memo.find(key);
  if (it == memo.end()) {
    return nullptr;
  }
  const PassportMemo& m = it->second;
  const bool same = m.dev == st.st_dev && m.ino == st.st_ino && m.size == st.st_size &&
                    m.mtime_ns == mtime_ns(st) &&
                    m.ctime_ns == static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  if (!same) {
    return nullptr;
  }
  return it->second.passport;
}

void FileStore::Impl::memo_store(const Key& key, const struct stat& st, std::shared_ptr<const Passport> passport) {
  if (st.st_size > k_memo_max_passport_bytes) {
    return;
  }
  PassportMemo entry;
  entry.dev = st.st_dev;
  entry.ino = st.st_ino;
  entry.size = st.st_size;
  entry.mtime_ns = mtime_ns(st);
  entry.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  entry.passport = std::move(passport);
  std::lock_guard<std::mutex> lock(memo_mutex);
  if (memo.size() >= k_memo_max_entries && !memo.contains(key)) {
    memo.clear();
  }
  memo[key] = std::move(entry);
}

void FileStore::Impl::memo_forget(const Key& key) {
  std::lock_guard<std::mutex> lock(memo_mutex);
  memo.erase(key);
}

// ---------------------------------------------------------------- get

Result<std::optional<Artifact>> FileStore::get(const Key& key) {
  return read_entry(key, nullptr);
}

Result<std::optional<Artifact>> FileStore::get_into(const Key& key, const PayloadAllocator& allocate) {
  return read_entry(key, nullptr, nullptr, allocate ? &allocate : nullptr);
}

Result<std::optional<PayloadFile>> FileStore::open_payload(const Key& key) {
  PayloadFile file;
  auto got = read_entry(key, &file);
  if (!got) {
    return tl::unexpected(got.error());
  }
  if (!got->has_value()) {
    return std::optional<PayloadFile>{};
  }
  file.m_passport = std::move((*got)->passport);
  return std::optional<PayloadFile>(std::move(file));
}

Result<std::optional<PayloadView>> FileStore::get_view(const Key& key) {
  PayloadView view;
  auto got = read_entry(key, nullptr, &view);
  if (!got) {
    return tl::unexpected(got.error());
  }
  if (!got->has_value()) {
    return std::optional<PayloadView>{};
  }
  view.m_passport = std::move((*got)->passport);
  return std::optional<PayloadView>(std::move(view));
}

Result<std::optional<Artifact>> FileStore::read_entry(const Key& key, PayloadFile* file, PayloadView* view,
                                                      const PayloadAllocator* allocate) {
  Impl& m = *m_impl;
  const unsigned shard = key.bytes()[0];
  const std::string key_hex = key.hex();
  const std::string pass_name = key_hex + std::string(store::k_passport_suffix);
  auto miss = [&]() -> Result<std::optional<Artifact>> {
    m.counters->add(Counter::misses);
    return std::optional<Artifact>{};
  };

  int err = 0;
  struct HeldShard {
    int fd = -1;
    int get() const noexcept { return fd; }
  } shard_fd;
  shard_fd.fd = m.held_shard(shard, err);
  if (shard_fd.fd < 0) {
    if (err == ENOENT || err == ELOOP || err == ENOTDIR) {
      return miss();
    }
    m.counters->add(Counter::errors);
    return make_errno_error(err, "cannot open shard " + store::shard_name(shard) + " of " + m.options.root.string());
  }

  // Judge one entry; on a bad entry remove it (stat-guarded) and say so. The
  // passport is stat'ed first so that a passport this process has already
  // parsed (same file identity) is not read and parsed again.
  struct stat pass_st {};
  if (io::fstatat(shard_fd.get(), pass_name.c_str(), &pass_st, AT_SYMLINK_NOFOLLOW) != 0) {
    err = errno;
    if (err == ENOENT && m.drop_held_shard_if_removed(shard, shard_fd.get())) {
      return read_entry(key, file, view, allocate);  // the shard was removed behind our back: look in its successor
    }
    if (err == ENOENT) {
      return miss();
    }
    m.counters->add(Counter::errors);
    return make_errno_error(err, "cannot stat passport " + pass_name);
  }
  auto bad_entry = [&](std::string_view why) -> Result<std::optional<Artifact>> {
    // Count, remove and report only if the passport we judged is still the one
    // there: a concurrent writer's fresh entry is never removed or blamed.
    m.memo_forget(key);
    if (m.remove_guarded(shard, shard_fd.get(), key_hex, &pass_st)) {
      m.counters->add(Counter::corrupt);
      m.report_damaged(key, why);
    }
    return miss();
  };
  // Symlinks, FIFOs, directories and hard-linked files are never entries.
  if (!S_ISREG(pass_st.st_mode) || pass_st.st_nlink != 1 ||
      static_cast<std::uint64_t>(pass_st.st_size) > k_passport_max_bytes) {
    return bad_entry("the passport is not a regular file of at most 8 MiB with one link");
  }
  std::shared_ptr<const Passport> passport = m.memo_find(key, pass_st);
  bool parsed_now = false;  // memoised only once the payload has passed its check too
  if (!passport) {
    util::Fd pass_fd(io::openat(shard_fd.get(), pass_name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
    if (!pass_fd) {
      err = errno;
      if (err == ENOENT) {
        return miss();
      }
      if (err == ELOOP || err == ENXIO || err == EISDIR) {
        return bad_entry("the passport is not a regular file");
      }
      m.counters->add(Counter::errors);
      return make_errno_error(err, "cannot open passport " + pass_name);
    }
    // The file may have been replaced between the stat and the open: judge
    // (and memoise) what was opened.
    if (io::fstat(pass_fd.get(), &pass_st) != 0) {
      m.counters->add(Counter::errors);
      return make_errno_error(errno, "cannot stat passport " + pass_name);
    }
    if (!S_ISREG(pass_st.st_mode) || pass_st.st_nlink != 1 ||
        static_cast<std::uint64_t>(pass_st.st_size) > k_passport_max_bytes) {
      return bad_entry("the passport is not a regular file of at most 8 MiB with one link");
    }
    std::string pass_text;
    if (int e = io::read_bounded(pass_fd.get(), k_passport_max_bytes, pass_text,
                                 static_cast<std::size_t>(pass_st.st_size));
        e != 0) {
      m.counters->add(Counter::errors);
      return make_errno_error(e, "cannot read passport " + pass_name);
    }
    auto parsed = Passport::from_json(pass_text);
    if (!parsed) {
      return bad_entry(parsed.error().message);
    }
    if (auto identity = check_entry_identity(key, *parsed); !identity) {
      return bad_entry(identity.error().message);
    }
    passport = std::make_shared<const Passport>(std::move(*parsed));
    parsed_now = true;
  }

  util::Fd payload_fd(io::openat(shard_fd.get(), key_hex.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
  if (!payload_fd) {
    err = errno;
    if (err == ENOENT) {
      // Either evicted between our two opens (passport gone too) or a
      // passport without payload (bad entry).
      struct stat again {};
      if (io::fstatat(shard_fd.get(), pass_name.c_str(), &again, AT_SYMLINK_NOFOLLOW) != 0) {
        return miss();
      }
      return bad_entry("the payload file is missing");
    }
    if (err == ELOOP || err == ENXIO || err == EISDIR) {
      return bad_entry("the payload is not a regular file");
    }
    m.counters->add(Counter::errors);
    return make_errno_error(err, "cannot open payload " + key_hex);
  }
  struct stat payload_st {};
  if (io::fstat(payload_fd.get(), &payload_st) != 0) {
    m.counters->add(Counter::errors);
    return make_errno_error(errno, "cannot stat payload " + key_hex);
  }
  // A memoised passport is trusted by its file's identity (device, inode,
  // size, mtime, ctime). A passport rewritten within one timestamp tick into a
  // reused inode can look identical: when the payload disagrees with a
  // memoised passport, judge again from the file before calling it damaged.
  auto judge_again = [&]() -> Result<std::optional<Artifact>> {
    m.memo_forget(key);
    return read_entry(key, file, view, allocate);
  };
  if (!S_ISREG(payload_st.st_mode) || payload_st.st_nlink != 1 ||
      static_cast<std::uint64_t>(payload_st.st_size) != passport->payload_size) {
    if (!parsed_now && S_ISREG(payload_st.st_mode)) {
      return judge_again();
    }
    return bad_entry(!S_ISREG(payload_st.st_mode) || payload_st.st_nlink != 1
                         ? std::string("the payload is not a regular file with one link")
                         : "the payload is " + std::to_string(payload_st.st_size) + " bytes, the passport says " +
                               std::to_string(passport->payload_size));
  }
  // The payload's size was checked against the passport above; its bytes are
  // read (or, for open_payload, only hashed) in chunks and checked while hot.
  Artifact artifact;
  Payload bytes;
  const auto check = view != nullptr ? m.check_payload_view(key, payload_fd.get(), payload_st, *passport, *view)
                                     : m.check_payload(key, payload_fd.get(), payload_st, *passport,
                                                       file == nullptr ? &bytes : nullptr, allocate);
  if (check.verdict == Impl::PayloadVerdict::bad) {
    if (!parsed_now) {
      return judge_again();
    }
    return bad_entry("the payload's SHA-256 does not match the passport");
  }
  if (check.verdict == Impl::PayloadVerdict::error) {
    m.counters->add(Counter::errors);
    return make_errno_error(check.err, "cannot read payload " + key_hex);
  }
  if (parsed_now) {
    m.memo_store(key, pass_st, passport);
  }

  // Refresh the last-use stamp at coarse granularity (LRU), counting the
  // refresh as a use in the stamp's last digits (store/file/entry_cost.hpp). This
  // changes the passport's mtime and ctime, so the memo is re-bound to the
  // new identity.
  const std::int64_t interval_ns = static_cast<std::int64_t>(m.options.touch_interval.count()) * 1'000'000'000;
  const std::int64_t now_ns = now_unix_ns();
  if (now_ns - mtime_ns(pass_st) >= interval_ns) {
    util::Fd touch_fd(io::openat(shard_fd.get(), pass_name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
    struct stat touched {};
    if (touch_fd && io::fstat(touch_fd.get(), &touched) == 0 && same_file(touched, pass_st)) {
      const std::uint64_t uses = store::decode_uses_nanos(pass_st.st_mtim.tv_nsec) + 1;
      const struct timespec times[2] = {
          {0, UTIME_OMIT},
          {static_cast<time_t>(now_ns / 1'000'000'000), store::encode_uses_nanos(now_ns % 1'000'000'000, uses)}};
      // Explicit times need the file's owner; in a shared cache another
      // user's passport takes the current time (the count is lost, not the use).
      const bool stamped = io::futimens(touch_fd.get(), times) == 0 || io::futimens(touch_fd.get(), nullptr) == 0;
      if (stamped && io::fstat(touch_fd.get(), &touched) == 0) {
        m.memo_store(key, touched, passport);
      }
    }
  }
  m.counters->add(Counter::hits);
  m.counters->add(Counter::bytes_read, passport->payload_size);
  m.counters->add(Counter::compile_us_saved, passport->compile_duration_us);
  artifact.passport = *passport;
  artifact.payload = std::move(bytes);  // the buffer read into (or the mapping), not copied
  if (file != nullptr) {
    file->m_ino = static_cast<std::uint64_t>(payload_st.st_ino);
    file->m_mtime_ns = mtime_ns(payload_st);
    file->m_ctime_ns = static_cast<std::int64_t>(payload_st.st_ctim.tv_sec) * 1'000'000'000 + payload_st.st_ctim.tv_nsec;
    file->m_fd = payload_fd.release();
  }
  return std::optional<Artifact>(std::move(artifact));
}

}  // namespace kcache
