// worker/worker_protocol.hpp: the frames parent and worker exchange
// (docs/worker-protocol.md, version 2). Private to the worker subsystem.
//
//   frame    := magic u16le(version) u16le(type) u64le(body_len) body
//   magic    := "KCWP"
//   version  := 2
//   type     := 1 hello | 2 compile | 3 result | 4 error | 5 shutdown
//   hello    := u32le(protocol) u32le(pid) str(kcache version)          worker -> parent, first
//   compile  := u64le(id) str(working_dir) request                       parent -> worker
//   result   := u64le(id) u8(cacheable) artifact                         worker -> parent
//   error    := u64le(id) u32le(ErrorCode) str(message) str(log)         worker -> parent
//   shutdown := (empty)                                                  parent -> worker
//   request  := str(backend) str(name) str(source) str(target_kind) strs(options)
//               named(headers) strs(name_expressions) named(inputs) str(extra_digest)
//               str(source_path)
//   str      := u64le(n) n bytes            strs  := u32le(count) str*
//   named    := u32le(count) (str(name) str(kind) str(bytes))*
//   artifact := the artifact stream (docs/artifact-format.md)
//
// Bounds: body_len <= k_worker_max_frame_bytes; list counts <= 65536.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "kcache/cache.hpp"
#include "kcache/compile_request.hpp"
#include "kcache/error.hpp"

namespace kcache::worker {

inline constexpr std::uint16_t k_protocol_version = 2;
inline constexpr std::size_t k_frame_header_bytes = 16;
inline constexpr std::uint64_t k_worker_max_frame_bytes = std::uint64_t{4} << 30;
inline constexpr std::uint32_t k_max_list_entries = 65536;

enum class FrameType : std::uint16_t { hello = 1, compile = 2, result = 3, error = 4, shutdown = 5 };

struct Frame {
  FrameType type = FrameType::hello;
  std::string body;
};

std::string encode_frame(FrameType type, std::string_view body);

// Parses a 16-byte frame header. `corrupt` on wrong magic, version, type or a
// length over the cap.
struct FrameHeader {
  FrameType type;
  std::uint64_t body_len;
};
Result<FrameHeader> parse_frame_header(std::string_view header);

std::string encode_request(const CompileRequest& request);
Result<CompileRequest> decode_request(std::string_view bytes);

struct Hello {
  std::uint32_t protocol = k_protocol_version;
  std::uint32_t pid = 0;
  std::string version;
};
std::string encode_hello(const Hello& hello);
Result<Hello> decode_hello(std::string_view body);

// One compile request and the directory to run it in: the parent's working
// directory when it submitted the request (as NVRTC sees it: $PWD or
// getcwd()), so that relative paths resolve, and the output names the
// directory, as they would in the parent. Empty: the worker's own.
struct CompileFrame {
  std::uint64_t id = 0;
  std::string working_dir;
  CompileRequest request;
};
std::string encode_compile(std::uint64_t id, std::string_view working_dir, const CompileRequest& request);
Result<CompileFrame> decode_compile(std::string_view body);

std::string encode_result(std::uint64_t id, const CompileOutput& output);
std::string encode_error(std::uint64_t id, const Error& error);
// Decodes a result or error body into the output or the error it carries;
// `corrupt` (as the outer error) when the body itself is malformed.
Result<Result<CompileOutput>> decode_reply(FrameType type, std::string_view body, std::uint64_t expected_id);

// Blocking frame I/O for the worker side (fds are blocking there).
Result<void> write_frame(int fd, FrameType type, std::string_view body);
// Reads one frame; returns not_found on a clean end of file before a frame.
Result<Frame> read_frame(int fd);

}  // namespace kcache::worker
