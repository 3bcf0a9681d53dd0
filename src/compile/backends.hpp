// compile/backends.hpp: running NVRTC, nvJitLink and libNVVM on a request (private).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kcache/compile_request.hpp"
#include "kcache/error.hpp"

namespace kcache::jit {

// What a backend produced.
struct BackendOutput {
  std::string payload;
  std::string log;
  std::map<std::string, std::string> symbols;  // name expression -> lowered name
};

// The largest source or header text kcache hands to NVRTC (bytes). NVRTC takes
// its inputs as C strings; it compiled a 2 GiB + 4 KiB source, in 8 minutes
// and with twice that in memory, so kcache draws its line at 2 GiB (docs/jit.md,
// "Limits"). A larger text is refused with invalid_argument, as is a text
// holding a NUL byte (NVRTC would read it only up to the NUL).
inline constexpr std::uint64_t k_nvrtc_max_text_bytes = std::uint64_t{1} << 31;

// Each runs the library (loading it on first use) with the canonical options.
// compile_failed carries the compiler's log in Error::log. `rejected`, when
// given, is set to whether the error is the compiler's verdict on the inputs
// (nvrtcCompileProgram returned NVRTC_ERROR_COMPILATION): the same inputs get
// the same error and log again, so it may be kept as a negative entry
// (docs/keys.md, "Failed compiles"). Every other error (out of memory, an
// internal error, no toolkit, no output) sets it false.
Result<BackendOutput> run_nvrtc(const CompileRequest& request, const std::vector<std::string>& options,
                                bool* rejected = nullptr);
Result<BackendOutput> run_nvjitlink(const CompileRequest& request, const std::vector<std::string>& options);
Result<BackendOutput> run_nvvm(const CompileRequest& request, const std::vector<std::string>& options);

// run_nvrtc() as the dependency layer's probe compile (deps/predefined_macros.hpp,
// ProbeCompile): NVRTC's log on success, run_nvrtc()'s error otherwise.
Result<std::string> run_nvrtc_probe(const CompileRequest& request, const std::vector<std::string>& options);

}  // namespace kcache::jit
