// store/file/file_store_write.cpp: FileStore puts (put, fill, put_stream):
// staging in v1/tmp and publishing under the shard lock.
#include "kcache/file_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "store/file/entry_cost.hpp"
#include "store/file/file_store_impl.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache {

using store::Counter;
namespace io = util::io;

namespace {

// The payload mtime that records `cost_us` (store/file/entry_cost.hpp): now, in
// whole seconds, with the cost in the nanoseconds; the atime is left alone.
std::array<struct timespec, 2> cost_stamp(std::uint64_t cost_us) {
  return {{{0, UTIME_OMIT}, {static_cast<time_t>(now_unix_ms() / 1000), store::encode_cost_nanos(cost_us)}}};
}

}  // namespace

// ---------------------------------------------------------------- put

Result<PutOutcome> FileStore::put(const Artifact& artifact) {
  if (auto v = artifact.verify(); !v) {
    return make_error(ErrorCode::invalid_argument, "refusing to store an artifact that does not verify: " +
                                                       v.error().message);
  }
  return m_impl->put_checked(artifact, m_impl->options.fsync);
}

Result<PutOutcome> FileStore::fill(const Artifact& artifact) {
  if (auto v = artifact.verify_shape(); !v) {
    return make_error(ErrorCode::invalid_argument, "refusing to store a malformed artifact: " + v.error().message);
  }
  return m_impl->put_checked(artifact, FsyncPolicy::none);
}

Result<PutOutcome> FileStore::Impl::put_checked(const Artifact& artifact, FsyncPolicy fsync) {
  if (auto skipped = check_writable(); !skipped) {
    return tl::unexpected(skipped.error());
  }
  const Key& key = artifact.passport.key;
  const unsigned shard = key.bytes()[0];
  int err = 0;
  util::Fd shard_fd = open_shard(shard, CreateShard::yes, err);
  if (!shard_fd) {
    return tl::unexpected(shard_open_failed(shard, err));
  }
  struct stat existing {};
  const std::string pass_name = key.hex() + std::string(store::k_passport_suffix);
  if (io::fstatat(shard_fd.get(), pass_name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0) {
    return PutOutcome::already_present;
  }
  if (!tmp_fd) {
    return tl::unexpected(write_failed(EACCES, "no usable staging directory v1/tmp"));
  }
  const std::string json = artifact.passport.to_json();
  if (auto room = check_pins_leave_room(artifact.payload.size() + json.size(), &key); !room) {
    return tl::unexpected(room.error());
  }
  // Room under the cap first, so that the staged bytes are counted in it.
  const Impl::RoomGuard room(*counters, make_room(artifact.payload.size() + json.size()));
  const std::string tmp_payload = new_temp_name();
  // After the bytes, the rebuild cost goes where an eviction scan sees it
  // without reading the passport: the nanoseconds of the payload's mtime
  // (store/file/entry_cost.hpp). Best effort: without it the entry counts as cheap
  // to rebuild. (A staged payload records it at its commit.)
  const auto times = cost_stamp(artifact.passport.compile_duration_us);
  const auto write_payload = [&](int fd) {
    const int e = io::write_all(fd, artifact.payload);
    if (e == 0) {
      io::futimens(fd, times.data());
    }
    return e;
  };
  if (int e = stage(tmp_payload, write_payload, fsync); e != 0) {
    return tl::unexpected(write_failed(e, "cannot stage the payload in v1/tmp"));
  }
  return publish_staged(shard, shard_fd.get(), artifact.passport, json, tmp_payload, fsync);
}

Result<StreamedPut> FileStore::put_stream(int fd, const PassportForPayload& make_passport) {
  // Room under the cap for what a regular file says it holds (a pipe's size is
  // not known ahead: its entry is settled by eviction after it is published).
  struct stat in_st {};
  const bool sized = io::fstat(fd, &in_st) == 0 && S_ISREG(in_st.st_mode);
  constexpr std::uint64_t k_passport_estimate = 4096;
  auto staged = stage_payload(sized ? static_cast<std::uint64_t>(in_st.st_size) + k_passport_estimate : 0,
                              StagedAs::put);
  if (!staged) {
    return tl::unexpected(staged.error());
  }
  // One pass over the input: each chunk is hashed and written to the staged file.
  constexpr std::size_t k_chunk = 1 << 20;
  const auto buffer = std::make_unique_for_overwrite<char[]>(k_chunk);
  for (;;) {
    const ssize_t n = io::read(fd, buffer.get(), k_chunk);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return make_errno_error(errno, "cannot read the input to store");
    }
    if (n == 0) {
      break;
    }
    if (auto w = staged->write(std::string_view(buffer.get(), static_cast<std::size_t>(n))); !w) {
      return tl::unexpected(w.error());
    }
  }
  const std::uint64_t size = staged->size();
  auto passport = make_passport(size, staged->finish_digest());
  if (!passport) {
    return tl::unexpected(passport.error());
  }
  auto outcome = staged->commit(*passport);
  if (!outcome) {
    return tl::unexpected(outcome.error());
  }
  return StreamedPut{*outcome, std::move(*passport)};
}

// ---------------------------------------------------------------- staged payloads

struct StagedPayload::State {
  FileStore::Impl* store = nullptr;
  util::Fd fd;
  std::string tmp_name;  // in v1/tmp; empty once published or removed
  util::Fd committed;    // the staged file (read-write) after a successful commit
  util::Sha256 sha;
  std::optional<std::array<std::uint8_t, 32>> digest;
  std::uint64_t size = 0;
  FsyncPolicy fsync = FsyncPolicy::none;
  std::optional<FileStore::Impl::RoomGuard> room;
  bool failed = false;

  void discard() {
    fd = util::Fd();
    if (!tmp_name.empty()) {
      io::unlinkat(store->tmp_fd.get(), tmp_name.c_str(), 0);
      tmp_name.clear();
    }
  }
  ~State() { discard(); }
};

StagedPayload::StagedPayload() = default;
StagedPayload::StagedPayload(StagedPayload&& other) noexcept = default;
StagedPayload& StagedPayload::operator=(StagedPayload&& other) noexcept = default;
StagedPayload::~StagedPayload() = default;

std::uint64_t StagedPayload::size() const noexcept { return m_state ? m_state->size : 0; }

Result<void> StagedPayload::write(std::string_view bytes) {
  State& st = *m_state;
  if (st.failed || st.digest) {
    return make_error(ErrorCode::io, "the staged payload was abandoned after a failed write");
  }
  if (int e = io::write_all(st.fd.get(), bytes); e != 0) {
    st.failed = true;
    st.discard();
    return tl::unexpected(st.store->write_failed(e, "cannot stage the payload in v1/tmp"));
  }
  st.sha.update(bytes);
  st.size += bytes.size();
  return {};
}

const std::array<std::uint8_t, 32>& StagedPayload::finish_digest() {
  State& st = *m_state;
  if (!st.digest) {
    st.digest = st.sha.finish();
  }
  return *st.digest;
}

Result<PutOutcome> StagedPayload::commit(const Passport& passport) {
  State& st = *m_state;
  if (st.failed || st.tmp_name.empty()) {
    return make_error(ErrorCode::io, "the staged payload was abandoned after a failed write");
  }
  const auto& digest = finish_digest();
  if (passport.payload_size != st.size || passport.payload_sha256 != util::to_hex(digest.data(), digest.size()) ||
      passport.format != k_passport_format_version || !is_valid_kind(passport.kind)) {
    st.discard();
    return make_error(ErrorCode::invalid_argument,
                      "refusing to store a payload whose passport does not name its size and SHA-256");
  }
  FileStore::Impl& m = *st.store;
  const mode_t fmode = store::file_mode(m.options.sharing);
  int e = io::fchmod(st.fd.get(), fmode) != 0 ? errno : 0;
  // The rebuild cost the passport names (a remote entry's, or `kcache put --build-ms`),
  // where an eviction scan sees it, as put() records it. Best effort, as there.
  if (e == 0) {
    io::futimens(st.fd.get(), cost_stamp(passport.compile_duration_us).data());
  }
  if (e == 0 && st.fsync != FsyncPolicy::none && io::fsync(st.fd.get()) != 0) {
    e = errno;
  }
  if (e != 0) {
    st.discard();
    return tl::unexpected(m.write_failed(e, "cannot stage the payload in v1/tmp"));
  }
  util::Fd staged_fd = std::move(st.fd);
  const unsigned shard = passport.key.bytes()[0];
  int err = 0;
  util::Fd shard_fd = m.open_shard(shard, CreateShard::yes, err);
  if (!shard_fd) {
    st.discard();
    return tl::unexpected(m.shard_open_failed(shard, err));
  }
  // publish_staged removes the staged file on every path.
  const std::string tmp = std::exchange(st.tmp_name, std::string());
  auto outcome = m.publish_staged(shard, shard_fd.get(), passport, passport.to_json(), tmp, st.fsync);
  if (outcome) {
    st.committed = std::move(staged_fd);
  }
  return outcome;
}

Result<Payload> StagedPayload::committed_payload() {
  if (!m_state || !m_state->committed) {
    return make_error(ErrorCode::io, "no payload was committed");
  }
  State& st = *m_state;
  auto payload = st.store->load_checked_payload(st.committed.get(), st.size);
  if (!payload) {
    return make_errno_error(payload.error(), "cannot read back the committed payload");
  }
  return std::move(*payload);
}

Result<StagedPayload> FileStore::stage_payload(std::uint64_t expected_bytes, StagedAs as) {
  Impl& m = *m_impl;
  if (auto skipped = m.check_writable(); !skipped) {
    return tl::unexpected(skipped.error());
  }
  if (!m.tmp_fd) {
    return tl::unexpected(m.write_failed(EACCES, "no usable staging directory v1/tmp"));
  }
  if (expected_bytes > 0) {
    if (auto pins = m.check_pins_leave_room(expected_bytes, nullptr); !pins) {
      return tl::unexpected(pins.error());
    }
  }
  StagedPayload staged;
  staged.m_state = std::make_unique<StagedPayload::State>();
  StagedPayload::State& st = *staged.m_state;
  st.store = &m;
  st.fsync = as == StagedAs::put ? m.options.fsync : FsyncPolicy::none;
  st.room.emplace(*m.counters, expected_bytes > 0 ? m.make_room(expected_bytes) : -1);
  st.tmp_name = m.new_temp_name();
  // Read-write: committed_payload() reads the bytes back from this file.
  st.fd = util::Fd(io::openat(m.tmp_fd.get(), st.tmp_name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW,
                              store::file_mode(m.options.sharing)));
  if (!st.fd) {
    const int e = errno;
    st.tmp_name.clear();
    return tl::unexpected(m.write_failed(e, "cannot stage the payload in v1/tmp"));
  }
  return staged;
}

// ---------------------------------------------------------------- put: staging and publishing

Result<void> FileStore::Impl::check_writable() {
  if (degraded.load() && now_unix_ms() < retry_writes_at_ms.load()) {
    counters->add(Counter::puts_skipped);
    return make_error(ErrorCode::read_only, "the cache at " + options.root.string() +
                                                " is degraded (a write failed earlier); write skipped");
  }
  return {};
}

Error FileStore::Impl::shard_open_failed(unsigned shard, int err) {
  if (err == ELOOP || err == ENOTDIR) {
    counters->add(Counter::errors);
    return Error{ErrorCode::corrupt,
                 "shard " + store::shard_name(shard) + " is not a directory (a symlink?); run `kcache verify --repair`",
                 {}};
  }
  return write_failed(err, "cannot create shard directory " + store::shard_name(shard));
}

int FileStore::Impl::stage(const std::string& name, const std::function<int(int fd)>& write, FsyncPolicy fsync) {
  const mode_t fmode = store::file_mode(options.sharing);
  util::Fd fd(io::openat(tmp_fd.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, fmode));
  if (!fd) {
    return errno;
  }
  int e = write(fd.get());
  if (e == 0 && io::fchmod(fd.get(), fmode) != 0) {
    e = errno;
  }
  if (e == 0 && fsync != FsyncPolicy::none && io::fsync(fd.get()) != 0) {
    e = errno;
  }
  if (e != 0) {
    io::unlinkat(tmp_fd.get(), name.c_str(), 0);
  }
  return e;
}

Result<PutOutcome> FileStore::Impl::publish_staged(unsigned shard, int shard_fd, const Passport& passport,
                                                   const std::string& json, const std::string& tmp_payload,
                                                   FsyncPolicy fsync) {
  const std::string key_hex = passport.key.hex();
  const std::string pass_name = key_hex + std::string(store::k_passport_suffix);
  const std::string tmp_pass = new_temp_name();
  bool payload_staged = true;
  bool pass_staged = false;
  auto cleanup = [&] {
    if (payload_staged) {
      io::unlinkat(tmp_fd.get(), tmp_payload.c_str(), 0);
    }
    if (pass_staged) {
      io::unlinkat(tmp_fd.get(), tmp_pass.c_str(), 0);
    }
  };
  // The passport's mtime is the entry's last use; its last digits count the
  // put as its first use (store/file/entry_cost.hpp). Best effort, like the cost.
  const auto write_passport = [&](int fd) {
    const int e = io::write_all(fd, json);
    if (e == 0) {
      const std::int64_t now_ns = now_unix_ns();
      const struct timespec times[2] = {
          {0, UTIME_OMIT},
          {static_cast<time_t>(now_ns / 1'000'000'000), store::encode_uses_nanos(now_ns % 1'000'000'000, 1)}};
      io::futimens(fd, times);
    }
    return e;
  };
  if (int e = stage(tmp_pass, write_passport, fsync); e != 0) {
    cleanup();
    return tl::unexpected(write_failed(e, "cannot stage the passport in v1/tmp"));
  }
  pass_staged = true;
  struct stat existing {};
  {
    ShardLock lock(shard_fd, LOCK_EX);
    if (!lock.held()) {
      cleanup();
      return tl::unexpected(write_failed(lock.error(), "cannot lock shard " + store::shard_name(shard)));
    }
    if (io::fstatat(shard_fd, pass_name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0) {
      cleanup();
      return PutOutcome::already_present;
    }
    if (io::renameat(tmp_fd.get(), tmp_payload.c_str(), shard_fd, key_hex.c_str()) != 0) {
      const int e = errno;
      cleanup();
      return tl::unexpected(write_failed(e, "cannot publish the payload"));
    }
    payload_staged = false;
    if (io::renameat(tmp_fd.get(), tmp_pass.c_str(), shard_fd, pass_name.c_str()) != 0) {
      const int e = errno;
      io::unlinkat(shard_fd, key_hex.c_str(), 0);  // our orphan: we hold the lock
      cleanup();
      return tl::unexpected(write_failed(e, "cannot publish the passport"));
    }
    pass_staged = false;
    if (fsync == FsyncPolicy::file_and_directory && io::fsync(shard_fd) != 0) {
      // Published but not known durable: take it back rather than report an
      // entry that may vanish on a crash.
      const int e = errno;
      io::unlinkat(shard_fd, pass_name.c_str(), 0);
      io::unlinkat(shard_fd, key_hex.c_str(), 0);
      return tl::unexpected(write_failed(e, "cannot fsync shard directory " + store::shard_name(shard)));
    }
    counters->shard_add(shard, static_cast<std::int64_t>(passport.payload_size + json.size()), 1);
  }
  memo_forget(passport.key);
  degraded.store(false);
  counters->add(Counter::puts);
  counters->add(Counter::bytes_written, passport.payload_size + json.size());
  if (checks) {
    checks->fit(counters->total_entries());  // grows (rarely: each growth doubles it) with the entries
  }
  maybe_evict();
  return PutOutcome::stored;
}

}  // namespace kcache
