// interpose/jit_result.hpp: everything a program can read back from one
// compile or link of a JIT library, recorded from the real library and
// replayed on a hit.
//
// An interposed compile is stored as one entry whose payload is this record
// (format version 1, docs/run.md, "Entries"):
//
//   record  := "KCJITR01" u32 rc output[4] output(log) u32 n name[n]
//   output  := u32 size_rc u32 get_rc u64 len bytes[len]
//   name    := u64 len expression u32 rc u64 len lowered
//
// Integers are little-endian. `rc` is what the compile call returned.
// `size_rc` and `get_rc` are what a getter pair (Get*Size, Get*) returned and
// `bytes` exactly what the getter wrote. The outputs, per library:
//
//   nvrtc      outputs: PTX, CUBIN, LTO-IR, OptiX-IR; log: program log; names: lowered names
//   nvjitlink  outputs: linked CUBIN, linked PTX, info log, -; log: error log
//   nvvm       outputs: compiled result, -, -, -; log: program log
//
// Thread-safety: a value.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kcache::interpose {

struct JitOutput {
  std::int32_t size_rc = 0;
  std::int32_t get_rc = 0;
  std::string bytes;
  friend bool operator==(const JitOutput&, const JitOutput&) = default;
};

struct JitLoweredName {
  std::string expression;
  std::int32_t rc = 0;
  std::string lowered;
  friend bool operator==(const JitLoweredName&, const JitLoweredName&) = default;
};

// Indices into JitResult::outputs for NVRTC.
enum class NvrtcOutputKind { ptx = 0, cubin = 1, ltoir = 2, optixir = 3 };
// JitResult::recorded's index of the log.
inline constexpr int k_jit_log = -1;

struct JitResult {
  std::int32_t compile_rc = 0;  // what the compile (or link) call returned
  std::array<JitOutput, 4> outputs;
  JitOutput log;
  std::vector<JitLoweredName> names;

  const JitOutput& output(NvrtcOutputKind kind) const { return outputs[static_cast<int>(kind)]; }
  // outputs[which], or the log for k_jit_log. REQUIRES: -1 <= which < 4.
  const JitOutput& recorded(int which) const {
    return which == k_jit_log ? log : outputs[static_cast<std::size_t>(which)];
  }
  // The answer for `expression`, or nullptr when it was not recorded.
  const JitLoweredName* lowered(std::string_view expression) const;

  friend bool operator==(const JitResult&, const JitResult&) = default;
};

// Records what a getter pair gives for `handle`: `size_fn(handle, &n)` then,
// when it succeeded, `get_fn(handle, buffer)` (a buffer with room to spare,
// also for an empty output).
template <class Handle, class SizeFn, class GetFn>
JitOutput record_output(Handle handle, SizeFn size_fn, GetFn get_fn) {
  JitOutput o;
  std::size_t n = 0;
  o.size_rc = size_fn(handle, &n);
  if (o.size_rc != 0) {
    o.get_rc = o.size_rc;
    return o;
  }
  std::string buffer(n + 16, '\0');
  o.get_rc = get_fn(handle, buffer.data());
  if (o.get_rc == 0) {
    buffer.resize(n);
    o.bytes = std::move(buffer);
  }
  return o;
}

// What the recorded getters return: the code, and the size or the bytes
// when it was success. REQUIRES: `size` and `out` are not null.
inline int replay_size(const JitOutput& o, std::size_t* size) {
  if (o.size_rc == 0) {
    *size = o.bytes.size();
  }
  return o.size_rc;
}
inline int replay_get(const JitOutput& o, void* out) {
  if (o.get_rc == 0 && !o.bytes.empty()) {
    std::memcpy(out, o.bytes.data(), o.bytes.size());
  }
  return o.get_rc;
}

// Encodes `result` in the format above. Never fails.
std::string encode(const JitResult& result);

// Decodes a payload; std::nullopt when it is not exactly one well-formed record.
std::optional<JitResult> decode_jit_result(std::string_view bytes);

}  // namespace kcache::interpose
