// The artifact stream format: grammar in include/kcache/artifact_io.hpp and
// docs/artifact-format.md. This file is its only writer and reader.
#include "kcache/artifact_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include <xxhash.h>

#include "util/fd.hpp"
#include "util/sha256.hpp"
#include "util/wire_codec.hpp"
#include "util/unique_name.hpp"

namespace kcache {

namespace {

constexpr std::string_view k_magic{"KCART\r\n\x1a", 8};
// Payload bytes are read in chunks of this size so that a lying length costs
// at most one chunk of memory beyond the bytes that really arrived.
constexpr std::size_t k_read_chunk = std::size_t{16} << 20;

auto corrupt(const std::string& why) {
  return make_error(ErrorCode::corrupt, "bad artifact stream: " + why);
}

using Header = ArtifactStreamHeader;

Result<Header> parse_header(std::string_view h, std::uint64_t max_payload) {
  if (h.substr(0, k_magic.size()) != k_magic) {
    return corrupt("wrong magic (not a kcache artifact)");
  }
  const auto version = static_cast<std::uint32_t>(wire::load_le(h.data() + 8, 4));
  if (version != k_artifact_stream_version) {
    return corrupt("version " + std::to_string(version) + " is not supported (expected " +
                   std::to_string(k_artifact_stream_version) + ")");
  }
  Header out;
  out.passport_len = static_cast<std::uint32_t>(wire::load_le(h.data() + 12, 4));
  out.payload_len = wire::load_le(h.data() + 16, 8);
  if (out.passport_len == 0 || out.passport_len > k_passport_max_bytes) {
    return corrupt("passport length " + std::to_string(out.passport_len) + " is out of bounds");
  }
  if (out.payload_len > max_payload) {
    return corrupt("payload length " + std::to_string(out.payload_len) + " exceeds the cap of " +
                   std::to_string(max_payload));
  }
  return out;
}

Result<Artifact> finish(std::string_view passport_json, std::string payload) {
  auto passport = Passport::from_json(passport_json);
  if (!passport) {
    return corrupt(passport.error().message);
  }
  Artifact a;
  a.passport = std::move(*passport);
  a.payload = std::move(payload);
  if (auto ok = a.verify(); !ok) {
    return corrupt(ok.error().message);
  }
  return a;
}

std::uint64_t trailer_of(std::string_view header, std::string_view passport,
                         std::string_view payload) {
  // XXH3-64 over the concatenation, streamed so the payload is not copied.
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  XXH3_64bits_update(state.get(), header.data(), header.size());
  XXH3_64bits_update(state.get(), passport.data(), passport.size());
  XXH3_64bits_update(state.get(), payload.data(), payload.size());
  return XXH3_64bits_digest(state.get());
}

}  // namespace

std::string encode_artifact_header(std::uint32_t passport_len, std::uint64_t payload_len) {
  wire::Writer w;
  w.raw(k_magic);
  w.u32(k_artifact_stream_version);
  w.u32(passport_len);
  w.u64(payload_len);
  return w.take();
}

Result<ArtifactStreamHeader> decode_artifact_header(std::string_view header, std::uint64_t max_payload_bytes) {
  if (header.size() != k_artifact_stream_header_bytes) {
    return corrupt("truncated header");
  }
  return parse_header(header, max_payload_bytes);
}

std::string encode_artifact(const Artifact& artifact) {
  const std::string passport = artifact.passport.to_json();
  wire::Writer w;
  w.out().reserve(k_artifact_stream_header_bytes + passport.size() + artifact.payload.size() +
                  k_artifact_stream_trailer_bytes);
  w.raw(k_magic);
  w.u32(k_artifact_stream_version);
  w.u32(static_cast<std::uint32_t>(passport.size()));
  w.u64(artifact.payload.size());
  w.raw(passport);
  w.raw(artifact.payload);
  w.u64(util::xxh3_64(w.out()));
  return w.take();
}

Result<Artifact> decode_artifact(std::string_view bytes, std::uint64_t max_payload_bytes) {
  if (bytes.size() < k_artifact_stream_header_bytes) {
    return corrupt(bytes.empty() ? "empty" : "truncated header");
  }
  auto header = parse_header(bytes.substr(0, k_artifact_stream_header_bytes), max_payload_bytes);
  if (!header) {
    return tl::unexpected(header.error());
  }
  const std::uint64_t body = std::uint64_t{header->passport_len} + header->payload_len;
  const std::uint64_t total = k_artifact_stream_header_bytes + body + k_artifact_stream_trailer_bytes;
  if (bytes.size() < total) {
    return corrupt("truncated: " + std::to_string(bytes.size()) + " of " + std::to_string(total) +
                   " bytes");
  }
  if (bytes.size() > total) {
    return corrupt(std::to_string(bytes.size() - total) + " unexpected bytes after the trailer");
  }
  const std::size_t covered = total - k_artifact_stream_trailer_bytes;
  if (util::xxh3_64(bytes.substr(0, covered)) != wire::load_le(bytes.data() + covered, 8)) {
    return corrupt("trailer checksum does not match");
  }
  const std::string_view passport = bytes.substr(k_artifact_stream_header_bytes, header->passport_len);
  return finish(passport,
                std::string(bytes.substr(k_artifact_stream_header_bytes + header->passport_len,
                                         header->payload_len)));
}

Result<void> write_artifact(int fd, const Artifact& artifact) {
  return wire::write_all(fd, encode_artifact(artifact));
}

Result<Artifact> read_artifact(int fd, std::uint64_t max_payload_bytes) {
  char head[k_artifact_stream_header_bytes];
  auto got = wire::read_full(fd, head, sizeof head);
  if (!got) {
    return tl::unexpected(got.error());
  }
  if (*got < sizeof head) {
    return corrupt(*got == 0 ? "empty" : "truncated header");
  }
  auto header = parse_header(std::string_view(head, sizeof head), max_payload_bytes);
  if (!header) {
    return tl::unexpected(header.error());
  }
  std::string passport(header->passport_len, '\0');
  got = wire::read_full(fd, passport.data(), passport.size());
  if (!got) {
    return tl::unexpected(got.error());
  }
  if (*got < passport.size()) {
    return corrupt("truncated passport");
  }
  std::string payload;
  while (payload.size() < header->payload_len) {
    const std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(k_read_chunk, header->payload_len - payload.size()));
    const std::size_t old = payload.size();
    payload.resize(old + want);
    got = wire::read_full(fd, payload.data() + old, want);
    if (!got) {
      return tl::unexpected(got.error());
    }
    if (*got < want) {
      return corrupt("truncated payload: " + std::to_string(old + *got) + " of " +
                     std::to_string(header->payload_len) + " bytes");
    }
  }
  char trailer[k_artifact_stream_trailer_bytes];
  got = wire::read_full(fd, trailer, sizeof trailer);
  if (!got) {
    return tl::unexpected(got.error());
  }
  if (*got < sizeof trailer) {
    return corrupt("truncated trailer");
  }
  if (trailer_of(std::string_view(head, sizeof head), passport, payload) !=
      wire::load_le(trailer, 8)) {
    return corrupt("trailer checksum does not match");
  }
  return finish(passport, std::move(payload));
}

Result<void> write_artifact_file(const std::filesystem::path& path, const Artifact& artifact) {
  std::filesystem::path dir = path.parent_path();
  if (dir.empty()) {
    dir = ".";
  }
  const std::filesystem::path tmp = dir / (".kcart-" + util::temp_suffix() + ".tmp");
  util::Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) {
    return make_errno_error(errno, "create " + tmp.string());
  }
  auto fail = [&](int err, const std::string& what) {
    ::unlink(tmp.c_str());
    return make_errno_error(err, what);
  };
  if (auto w = write_artifact(fd.get(), artifact); !w) {
    ::unlink(tmp.c_str());
    return w;
  }
  if (::fsync(fd.get()) != 0) {
    return fail(errno, "fsync " + tmp.string());
  }
  if (::close(fd.release()) != 0) {
    return fail(errno, "close " + tmp.string());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return fail(errno, "rename to " + path.string());
  }
  return {};
}

Result<Artifact> read_artifact_file(const std::filesystem::path& path,
                                    std::uint64_t max_payload_bytes) {
  util::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) {
    return make_errno_error(errno, "open " + path.string());
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return make_errno_error(errno, "stat " + path.string());
  }
  if (!S_ISREG(st.st_mode)) {
    return make_error(ErrorCode::corrupt, path.string() + " is not a regular file");
  }
  // A regular file never blocks; clear O_NONBLOCK (it only guarded against a FIFO).
  ::fcntl(fd.get(), F_SETFL, 0);
  auto a = read_artifact(fd.get(), max_payload_bytes);
  if (!a) {
    return a;
  }
  char extra = 0;
  auto more = wire::read_full(fd.get(), &extra, 1);
  if (more && *more != 0) {
    return corrupt("unexpected bytes after the trailer in " + path.string());
  }
  return a;
}

}  // namespace kcache
