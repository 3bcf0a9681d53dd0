// compile/backends.hpp: running NVRTC, nvJitLink and libNVVM on a request (private).
#pragma once

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

// Each runs the library (loading it on first use) with the canonical options.
// compile_failed carries the compiler's log in Error::log.
Result<BackendOutput> run_nvrtc(const CompileRequest& request, const std::vector<std::string>& options);
Result<BackendOutput> run_nvjitlink(const CompileRequest& request, const std::vector<std::string>& options);
Result<BackendOutput> run_nvvm(const CompileRequest& request, const std::vector<std::string>& options);

}  // namespace kcache::jit
