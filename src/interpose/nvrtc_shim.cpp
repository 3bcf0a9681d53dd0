// interpose/nvrtc_shim.cpp: the NVRTC C API of the stand-in library.
//
// Every function of nvrtc.h (CUDA 12/13) is exported under its own name.
// nvrtcCompileProgram is served from kcache; every other function forwards to
// the real library (real_library.hpp), except that, after a compile served
// from the cache, the getters answer from the recorded result
// (nvrtc_result.hpp): PTX, CUBIN, LTO-IR, OptiX-IR, the log and lowered names,
// with the real library's return codes.
//
// A compile: the program's source, name, in-memory headers (and include
// names), options and name expressions make a CompileRequest; derive_key gives
// kcache's complete key (disk headers found by the scanner, toolkit and
// library version, base_dir rules), to which the real library's version and
// build-id are added. A hit replays the recorded result without calling the
// real compile. A miss compiles with the real library on the program's own
// handle (so the program sees exactly what the real library gave), records
// what the getters return and stores it, unless the compile failed other than
// with NVRTC_ERROR_COMPILATION (a rejected program is stored and replayed as
// the failure it was: docs/run.md, "Failed compiles") or a disk header
// changed while it ran. Anything kcache cannot do (no key, a store
// error, an entry that does not decode) calls the real compile, with one
// warning per process.
//
// Thread-safety: as NVRTC's (distinct programs on distinct threads); the
// program table is locked.
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "interpose/handle_table.hpp"
#include "interpose/interposed_compile.hpp"
#include "interpose/jit_result.hpp"
#include "interpose/real_library.hpp"
#include "interpose/session.hpp"

using nvrtcResult = int;
using nvrtcProgram = void*;

#define KCACHE_EXPORT extern "C" __attribute__((visibility("default")))

KCACHE_EXPORT const char* nvrtcGetErrorString(nvrtcResult result);
KCACHE_EXPORT nvrtcResult nvrtcVersion(int* major, int* minor);
KCACHE_EXPORT nvrtcResult nvrtcGetNumSupportedArchs(int* num_archs);
KCACHE_EXPORT nvrtcResult nvrtcGetSupportedArchs(int* archs);
KCACHE_EXPORT nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int num_headers,
                                             const char* const* headers, const char* const* include_names);
KCACHE_EXPORT nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog);
KCACHE_EXPORT nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int num_options, const char* const* options);
KCACHE_EXPORT nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, std::size_t* size);
KCACHE_EXPORT nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char* out);
KCACHE_EXPORT nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, std::size_t* size);
KCACHE_EXPORT nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* out);
KCACHE_EXPORT nvrtcResult nvrtcGetLTOIRSize(nvrtcProgram prog, std::size_t* size);
KCACHE_EXPORT nvrtcResult nvrtcGetLTOIR(nvrtcProgram prog, char* out);
KCACHE_EXPORT nvrtcResult nvrtcGetOptiXIRSize(nvrtcProgram prog, std::size_t* size);
KCACHE_EXPORT nvrtcResult nvrtcGetOptiXIR(nvrtcProgram prog, char* out);
KCACHE_EXPORT nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, std::size_t* size);
KCACHE_EXPORT nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* out);
KCACHE_EXPORT nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char* name_expression);
KCACHE_EXPORT nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char* name_expression, const char** lowered);
KCACHE_EXPORT nvrtcResult nvrtcGetPCHHeapSize(std::size_t* size);
KCACHE_EXPORT nvrtcResult nvrtcSetPCHHeapSize(std::size_t size);
KCACHE_EXPORT nvrtcResult nvrtcGetPCHCreateStatus(nvrtcProgram prog);
KCACHE_EXPORT nvrtcResult nvrtcGetPCHHeapSizeRequired(nvrtcProgram prog, std::size_t* size);
KCACHE_EXPORT nvrtcResult nvrtcSetFlowCallback(nvrtcProgram prog, int (*callback)(void*, void*), void* payload);

namespace kcache::interpose {
namespace {

constexpr nvrtcResult k_success = 0;
constexpr nvrtcResult k_invalid_input = 3;
constexpr nvrtcResult k_internal_error = 11;
constexpr nvrtcResult k_no_name_expressions_after_compilation = 8;
constexpr nvrtcResult k_no_lowered_names_before_compilation = 9;
constexpr nvrtcResult k_name_expression_not_valid = 10;
// The kind of an interposed NVRTC entry: its payload is a JitResult.
constexpr const char* k_entry_kind = "nvrtc-result";

// The real NVRTC function behind the exported `fn` (real_of).
#define KCACHE_REAL(fn) KCACHE_REAL_OF(Jit::nvrtc, fn)

// What the stand-in knows of one program.
struct ProgramState {
  std::mutex mutex;
  std::string name;
  std::string source;
  std::vector<NamedBytes> headers;
  std::vector<std::string> name_expressions;
  bool keyable = true;  // false: a header without content
  std::shared_ptr<const JitResult> served;  // set: the last compile was answered from the cache
};

HandleTable<ProgramState>& programs() { return HandleTable<ProgramState>::instance(); }

std::shared_ptr<ProgramState> find_program(nvrtcProgram prog) { return programs().find(prog); }

std::shared_ptr<const JitResult> served(nvrtcProgram prog) { return programs().served(prog); }

using SizeFn = nvrtcResult (*)(nvrtcProgram, std::size_t*);
using GetFn = nvrtcResult (*)(nvrtcProgram, char*);

// Everything the program can read back after the real compile of `prog`.
JitResult record_result(nvrtcProgram prog, nvrtcResult compile_rc, const std::vector<std::string>& expressions) {
  JitResult r;
  r.compile_rc = compile_rc;
  const auto out = [&](NvrtcOutputKind k, SizeFn s, GetFn g) { r.outputs[static_cast<int>(k)] = record_output(prog, s, g); };
  out(NvrtcOutputKind::ptx, &nvrtcGetPTXSize, &nvrtcGetPTX);
  out(NvrtcOutputKind::cubin, &nvrtcGetCUBINSize, &nvrtcGetCUBIN);
  out(NvrtcOutputKind::ltoir, &nvrtcGetLTOIRSize, &nvrtcGetLTOIR);
  out(NvrtcOutputKind::optixir, &nvrtcGetOptiXIRSize, &nvrtcGetOptiXIR);
  r.log = record_output(prog, &nvrtcGetProgramLogSize, &nvrtcGetProgramLog);
  for (const auto& e : expressions) {
    if (r.lowered(e) != nullptr) {
      continue;
    }
    JitLoweredName n;
    n.expression = e;
    const char* lowered = nullptr;
    n.rc = nvrtcGetLoweredName(prog, e.c_str(), &lowered);
    if (n.rc == k_success && lowered != nullptr) {
      n.lowered = lowered;
    }
    r.names.push_back(std::move(n));
  }
  return r;
}

// The real compile of `request`'s program under the program name `name`, on
// a program of its own (made, compiled with `options`, read and destroyed
// with the real library); std::nullopt when it cannot be made.
std::optional<JitResult> probe_compile(const CompileRequest& request, const std::string& name, int num_options,
                                       const char* const* options) {
  const auto real_create = KCACHE_REAL(nvrtcCreateProgram);
  const auto real_compile = KCACHE_REAL(nvrtcCompileProgram);
  const auto real_add = KCACHE_REAL(nvrtcAddNameExpression);
  const auto real_destroy = KCACHE_REAL(nvrtcDestroyProgram);
  if (real_create == nullptr || real_compile == nullptr || real_add == nullptr || real_destroy == nullptr) {
    return std::nullopt;
  }
  std::vector<const char*> bytes;
  std::vector<const char*> names;
  for (const auto& h : request.headers) {
    bytes.push_back(h.bytes.c_str());
    names.push_back(h.name.c_str());
  }
  nvrtcProgram prog = nullptr;
  if (real_create(&prog, request.source.c_str(), name.c_str(), static_cast<int>(bytes.size()), bytes.data(),
                  names.data()) != k_success) {
    return std::nullopt;
  }
  // Not in the program table: the getters below answer from the real library.
  for (const auto& e : request.name_expressions) {
    if (real_add(prog, e.c_str()) != k_success) {
      real_destroy(&prog);
      return std::nullopt;
    }
  }
  JitResult r = record_result(prog, real_compile(prog, num_options, options), request.name_expressions);
  real_destroy(&prog);
  return r;
}

// The real library's run-time version, as it goes into keys.
std::string real_version() {
  static const std::string version = major_minor_version(KCACHE_REAL(nvrtcVersion));
  return version;
}

nvrtcResult compile(nvrtcProgram prog, int num_options, const char* const* options) {
  const auto real_nvrtcCompileProgram = KCACHE_REAL(nvrtcCompileProgram);
  if (real_nvrtcCompileProgram == nullptr) {
    return k_internal_error;
  }
  auto state = find_program(prog);
  if (!state) {
    return real_nvrtcCompileProgram(prog, num_options, options);  // made before the stand-in was there
  }
  InterposedCall call = start_call(Jit::nvrtc, k_entry_kind, real_version(), "nvrtc",
                                  [&] { return real_nvrtcCompileProgram(prog, num_options, options); });
  take_program(call, *state, [&] {
    call.request.name = state->name;
    call.request.source = state->source;
    call.request.headers = state->headers;
    call.request.name_expressions = state->name_expressions;
  });
  call.request.target_kind = "ptx";
  call.keyable = call.keyable && copy_options(call.request.options, num_options, options);
  call.compile = [&] {
    return record_result(prog, real_nvrtcCompileProgram(prog, num_options, options), call.request.name_expressions);
  };
  call.probe = [&](const std::string& name) { return probe_compile(call.request, name, num_options, options); };
  return serve_into(call, *state);
}

}  // namespace
}  // namespace kcache::interpose

using namespace kcache::interpose;  // NOLINT: the exported C functions below

const char* nvrtcGetErrorString(nvrtcResult result) {
  return call_real(KCACHE_REAL(nvrtcGetErrorString), "NVRTC_ERROR unknown", result);
}

nvrtcResult nvrtcVersion(int* major, int* minor) {
  return call_real(KCACHE_REAL(nvrtcVersion), k_internal_error, major, minor);
}

nvrtcResult nvrtcGetNumSupportedArchs(int* num_archs) {
  return call_real(KCACHE_REAL(nvrtcGetNumSupportedArchs), k_internal_error, num_archs);
}

nvrtcResult nvrtcGetSupportedArchs(int* archs) {
  return call_real(KCACHE_REAL(nvrtcGetSupportedArchs), k_internal_error, archs);
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int num_headers,
                               const char* const* headers, const char* const* include_names) {
  const nvrtcResult rc =
      call_real(KCACHE_REAL(nvrtcCreateProgram), k_internal_error, prog, src, name, num_headers, headers, include_names);
  if (rc != k_success || prog == nullptr || src == nullptr) {
    return rc;
  }
  try {
    auto state = std::make_shared<ProgramState>();
    state->name = name != nullptr ? name : "default_program";
    state->source = src;
    for (int i = 0; i < num_headers; ++i) {
      if (headers == nullptr || include_names == nullptr || headers[i] == nullptr || include_names[i] == nullptr) {
        state->keyable = false;
        break;
      }
      state->headers.push_back(kcache::NamedBytes{include_names[i], "header", headers[i]});
    }
    programs().insert(*prog, std::move(state));
  } catch (...) {
    // Out of memory: the program simply compiles without the cache.
  }
  return rc;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
  const auto real_destroy = KCACHE_REAL(nvrtcDestroyProgram);
  if (real_destroy == nullptr) {
    return k_internal_error;
  }
  programs().forget(prog);
  return real_destroy(prog);
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int num_options, const char* const* options) {
  try {
    return compile(prog, num_options, options);
  } catch (...) {
    Session::warn_once(Jit::nvrtc, "internal error");
    return call_real(KCACHE_REAL(nvrtcCompileProgram), k_internal_error, prog, num_options, options);
  }
}

// The getters: answered from the recorded result after a hit, else by the real library.
#define KCACHE_GETTERS(Name, which)                                                                           \
  nvrtcResult nvrtcGet##Name##Size(nvrtcProgram prog, std::size_t* size) {                                    \
    return programs().replay_or_call(prog, which, size, KCACHE_REAL(nvrtcGet##Name##Size), k_internal_error); \
  }                                                                                                           \
  nvrtcResult nvrtcGet##Name(nvrtcProgram prog, char* out) {                                                  \
    return programs().replay_or_call(prog, which, out, KCACHE_REAL(nvrtcGet##Name), k_internal_error);        \
  }

KCACHE_GETTERS(PTX, static_cast<int>(NvrtcOutputKind::ptx))
KCACHE_GETTERS(CUBIN, static_cast<int>(NvrtcOutputKind::cubin))
KCACHE_GETTERS(LTOIR, static_cast<int>(NvrtcOutputKind::ltoir))
KCACHE_GETTERS(OptiXIR, static_cast<int>(NvrtcOutputKind::optixir))
KCACHE_GETTERS(ProgramLog, k_jit_log)

nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char* name_expression) {
  const auto real_add = KCACHE_REAL(nvrtcAddNameExpression);
  if (real_add == nullptr) {
    return k_internal_error;
  }
  auto state = find_program(prog);
  if (state && name_expression != nullptr) {
    std::lock_guard lock(state->mutex);
    if (state->served) {
      return k_no_name_expressions_after_compilation;  // what the real library says after a compile
    }
  }
  const nvrtcResult rc = real_add(prog, name_expression);
  if (rc == k_success && state) {
    std::lock_guard lock(state->mutex);
    state->name_expressions.emplace_back(name_expression);
  }
  return rc;
}

nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char* name_expression, const char** lowered) {
  if (auto r = served(prog)) {
    if (name_expression == nullptr || lowered == nullptr) {
      return k_invalid_input;
    }
    const JitLoweredName* n = r->lowered(name_expression);
    if (n == nullptr) {
      // After a failed compile the real NVRTC has no lowered name at all:
      // NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION for any expression (measured, 13.0).
      return r->compile_rc != k_success ? k_no_lowered_names_before_compilation : k_name_expression_not_valid;
    }
    if (n->rc == k_success) {
      *lowered = n->lowered.c_str();  // owned by the recorded result, which the program state keeps
    }
    return n->rc;
  }
  return call_real(KCACHE_REAL(nvrtcGetLoweredName), k_internal_error, prog, name_expression, lowered);
}

nvrtcResult nvrtcGetPCHHeapSize(std::size_t* size) {
  return call_real(KCACHE_REAL(nvrtcGetPCHHeapSize), k_internal_error, size);
}

nvrtcResult nvrtcSetPCHHeapSize(std::size_t size) {
  return call_real(KCACHE_REAL(nvrtcSetPCHHeapSize), k_internal_error, size);
}

nvrtcResult nvrtcGetPCHCreateStatus(nvrtcProgram prog) {
  return call_real(KCACHE_REAL(nvrtcGetPCHCreateStatus), k_internal_error, prog);
}

nvrtcResult nvrtcGetPCHHeapSizeRequired(nvrtcProgram prog, std::size_t* size) {
  return call_real(KCACHE_REAL(nvrtcGetPCHHeapSizeRequired), k_internal_error, prog, size);
}

nvrtcResult nvrtcSetFlowCallback(nvrtcProgram prog, int (*callback)(void*, void*), void* payload) {
  return call_real(KCACHE_REAL(nvrtcSetFlowCallback), k_internal_error, prog, callback, payload);
}
