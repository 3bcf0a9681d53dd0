// store/remote/object_stream.hpp: the remote object format (remote_codec.hpp,
// docs/remote-format.md) written and read in parts, for entries too large to
// hold whole in memory (an engine of hundreds of MB).
//
// ObjectEncoder produces the bytes of an object in order from a passport and
// a payload read in parts (from a file, or memory already held); the whole
// object is never built. ObjectDecoder takes the bytes of a downloaded object
// in order, checks each as it arrives and hands the payload's bytes on (to a
// file staged in the local store), holding at most a few chunks: the header,
// the passport (bounded by k_passport_max_bytes), a zstd window and buffer.
//
// A streamed object is checked exactly as decode_object checks a whole one,
// with one difference in order: its HMAC (at its end) is known only once every
// byte has arrived, so the zstd body is inflated (bounded to its declared
// size) before the signature is checked; nothing is parsed (the passport is
// read only after the signature matched) and nothing is published before
// every check passed. An object that fails a check while its signature is
// still unknown is reported as bad_signature when the signature then fails,
// as decode_object would.
//
// Thread-safety: one thread at a time per object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kcache/passport.hpp"
#include "store/remote/remote_backend.hpp"
#include "store/remote/remote_codec.hpp"

namespace kcache::remote {

// Fills `n` bytes of `out` with the payload's bytes at `offset`. Failure: io
// naming what could not be read.
using PayloadReadAt = std::function<Result<void>(std::uint64_t offset, char* out, std::size_t n)>;

class ObjectEncoder final : public ObjectSource {
 public:
  // An encoder for the artifact of `passport` whose `payload_size` bytes
  // `read_payload` reads. With zstd on, a payload whose first MiB compresses
  // is compressed in a first pass that only counts (the header names the
  // body's length before the body); one that does not is stored as it is,
  // as encode_object does. Failure: a read error of that pass.
  static Result<std::unique_ptr<ObjectEncoder>> make(const Passport& passport, PayloadReadAt read_payload,
                                                     const CodecOptions& options);
  ~ObjectEncoder() override;

  std::uint64_t size() const noexcept override;
  Result<std::size_t> read(char* out, std::size_t n) override;
  Result<void> rewind() override;

 private:
  struct Impl;
  explicit ObjectEncoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

class ObjectDecoder {
 public:
  // Receives the payload's bytes in order; a failure stops the decoding
  // (sink_error()).
  using PayloadWrite = std::function<Result<void>(std::string_view bytes)>;

  ObjectDecoder(const Key& expected, const CodecOptions& options, PayloadWrite write_payload);
  ~ObjectDecoder();
  ObjectDecoder(const ObjectDecoder&) = delete;
  ObjectDecoder& operator=(const ObjectDecoder&) = delete;

  // The next bytes of the object. False once decoding has stopped: the object
  // was refused (finish() says why) or its payload could not be written
  // (sink_error()). Nothing past max_entry_size is ever accepted.
  bool write(std::string_view bytes);
  // After the last byte. Success: the verified passport (every payload byte
  // went to `write_payload`). Failure: the first check that failed (a
  // truncated object is malformed).
  tl::expected<Passport, RejectedObject> finish();
  // The error of `write_payload` that stopped the decoding, if any.
  const std::optional<Error>& sink_error() const noexcept;
  // Object bytes received so far.
  std::uint64_t received() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache::remote
