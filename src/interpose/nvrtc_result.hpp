// interpose/nvrtc_result.hpp: everything a program can read back from one
// NVRTC compile, recorded from the real library and replayed on a hit.
//
// An interposed NVRTC compile is stored as one entry of kind "nvrtc-result"
// whose payload is this record (format version 1, docs/run.md, "Entries"):
//
//   record  := "KCNVRTC1" u32 compile_rc output[4] output(log) u32 n name[n]
//   output  := u32 size_rc u32 get_rc u64 len bytes[len]     PTX, CUBIN, LTO-IR, OptiX-IR, log
//   name    := u64 len expression u32 rc u64 len lowered       nvrtcGetLoweredName's answer
//
// Integers are little-endian. `size_rc` and `get_rc` are what nvrtcGet*Size and
// nvrtcGet* returned; `bytes` are exactly what nvrtcGet* wrote (nvrtcGet*Size
// is `len`), so a hit gives back the real compile's bytes, codes and log.
//
// Thread-safety: a value.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kcache::interpose {

struct NvrtcOutput {
  std::int32_t size_rc = 0;
  std::int32_t get_rc = 0;
  std::string bytes;
  friend bool operator==(const NvrtcOutput&, const NvrtcOutput&) = default;
};

struct NvrtcLoweredName {
  std::string expression;
  std::int32_t rc = 0;
  std::string lowered;
  friend bool operator==(const NvrtcLoweredName&, const NvrtcLoweredName&) = default;
};

// Indices into NvrtcResult::outputs.
enum class NvrtcOutputKind { ptx = 0, cubin = 1, ltoir = 2, optixir = 3 };

struct NvrtcResult {
  std::int32_t compile_rc = 0;
  std::array<NvrtcOutput, 4> outputs;
  NvrtcOutput log;
  std::vector<NvrtcLoweredName> names;

  const NvrtcOutput& output(NvrtcOutputKind kind) const { return outputs[static_cast<int>(kind)]; }
  // The answer for `expression`, or nullptr when it was not recorded.
  const NvrtcLoweredName* lowered(std::string_view expression) const;

  friend bool operator==(const NvrtcResult&, const NvrtcResult&) = default;
};

// Encodes `result` in the format above. Never fails.
std::string encode(const NvrtcResult& result);

// Decodes a payload; std::nullopt when it is not exactly one well-formed record.
std::optional<NvrtcResult> decode_nvrtc_result(std::string_view bytes);

}  // namespace kcache::interpose
