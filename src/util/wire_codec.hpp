// util/wire_codec.hpp: little-endian, length-prefixed encoding helpers and
// blocking fd I/O shared by the binary formats: the artifact stream
// (artifact_io.hpp), the worker protocol (docs/worker-protocol.md), the remote
// object (store/remote/remote_codec.hpp) and the interposed JIT record
// (interpose/jit_result.hpp).
//
// Reader is strict and bounded: every read checks the remaining length first,
// and a failed read latches `ok() == false` so a caller can decode a whole
// message and check once at the end.
//
// Thread-safety: values; do not share one between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kcache/error.hpp"

namespace kcache::wire {

class Writer {
 public:
  void u8(std::uint8_t v) { m_out.push_back(static_cast<char>(v)); }
  void u16(std::uint16_t v) { put_le(v, 2); }
  void u32(std::uint32_t v) { put_le(v, 4); }
  void u64(std::uint64_t v) { put_le(v, 8); }
  // A length-prefixed byte string: u64le(len) bytes.
  void bytes(std::string_view b) {
    u64(b.size());
    m_out.append(b);
  }
  void raw(std::string_view b) { m_out.append(b); }
  std::string& out() noexcept { return m_out; }
  std::string take() noexcept { return std::move(m_out); }

 private:
  void put_le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) {
      m_out.push_back(static_cast<char>((v >> (8 * i)) & 0xffU));
    }
  }
  std::string m_out;
};

class Reader {
 public:
  explicit Reader(std::string_view in) noexcept : m_in(in) {}

  bool u8(std::uint8_t& v) { return get_le(v, 1); }
  bool u16(std::uint16_t& v) { return get_le(v, 2); }
  bool u32(std::uint32_t& v) { return get_le(v, 4); }
  bool u64(std::uint64_t& v) { return get_le(v, 8); }
  // Reads u64le(len) bytes with len <= `max`.
  bool bytes(std::string& out, std::uint64_t max) {
    std::uint64_t len = 0;
    if (!u64(len) || len > max || len > m_in.size() - m_pos) {
      m_ok = false;
      return false;
    }
    out.assign(m_in.substr(m_pos, len));
    m_pos += len;
    return true;
  }
  bool raw(std::string_view& out, std::size_t len) {
    if (!m_ok || len > m_in.size() - m_pos) {
      m_ok = false;
      return false;
    }
    out = m_in.substr(m_pos, len);
    m_pos += len;
    return true;
  }
  bool ok() const noexcept { return m_ok; }
  std::size_t remaining() const noexcept { return m_in.size() - m_pos; }
  bool at_end() const noexcept { return m_ok && m_pos == m_in.size(); }

 private:
  template <class T>
  bool get_le(T& v, std::size_t n) {
    if (!m_ok || n > m_in.size() - m_pos) {
      m_ok = false;
      return false;
    }
    std::uint64_t acc = 0;
    for (std::size_t i = 0; i < n; ++i) {
      acc |= std::uint64_t{static_cast<unsigned char>(m_in[m_pos + i])} << (8 * i);
    }
    v = static_cast<T>(acc);
    m_pos += n;
    return true;
  }
  std::string_view m_in;
  std::size_t m_pos = 0;
  bool m_ok = true;
};

// Reads a little-endian integer from the first `n` bytes of `p`.
std::uint64_t load_le(const char* p, std::size_t n) noexcept;

// Writes all of `bytes` to the blocking descriptor `fd`, retrying on EINTR and
// short writes. Returns an io error (EPIPE included) on failure.
Result<void> write_all(int fd, std::string_view bytes);
// write_all's loop, returning 0 or the errno of the write that failed. Not
// through the fault seam (pipes, standard output, files outside the stores;
// the stores write through util::io::write_all).
int write_all_errno(int fd, std::string_view bytes) noexcept;

// Reads up to `size` bytes into `out`, retrying on EINTR and short reads, and
// stops early only at end of file. Returns the number of bytes read.
Result<std::size_t> read_full(int fd, char* out, std::size_t size);

}  // namespace kcache::wire
