// interpose/nvvm_shim.cpp: the libNVVM C API of the stand-in library.
//
// nvvmCompileProgram is served from kcache: the key holds every module's
// bytes and name, in order, with lazily added modules marked as such
// ("lazy:" before the name), the options and the real library's NVVM and IR
// versions and build-id. After a hit the compiled result and the program log
// are the recorded ones (jit_result.hpp: outputs[0] result; log: program
// log). Every other function forwards to the real library.
//
// Thread-safety: as libNVVM's (distinct programs on distinct threads).
#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "interpose/handle_table.hpp"
#include "interpose/interposed_compile.hpp"
#include "interpose/jit_result.hpp"
#include "interpose/real_library.hpp"

using nvvmResult = int;
using nvvmProgram = void*;

#define KCACHE_EXPORT extern "C" __attribute__((visibility("default")))

KCACHE_EXPORT const char* nvvmGetErrorString(nvvmResult result);
KCACHE_EXPORT nvvmResult nvvmVersion(int* major, int* minor);
KCACHE_EXPORT nvvmResult nvvmIRVersion(int* major_ir, int* minor_ir, int* major_dbg, int* minor_dbg);
KCACHE_EXPORT nvvmResult nvvmCreateProgram(nvvmProgram* prog);
KCACHE_EXPORT nvvmResult nvvmDestroyProgram(nvvmProgram* prog);
KCACHE_EXPORT nvvmResult nvvmAddModuleToProgram(nvvmProgram prog, const char* buffer, std::size_t size,
                                                const char* name);
KCACHE_EXPORT nvvmResult nvvmLazyAddModuleToProgram(nvvmProgram prog, const char* buffer, std::size_t size,
                                                    const char* name);
KCACHE_EXPORT nvvmResult nvvmCompileProgram(nvvmProgram prog, int num_options, const char** options);
KCACHE_EXPORT nvvmResult nvvmVerifyProgram(nvvmProgram prog, int num_options, const char** options);
KCACHE_EXPORT nvvmResult nvvmGetCompiledResultSize(nvvmProgram prog, std::size_t* size);
KCACHE_EXPORT nvvmResult nvvmGetCompiledResult(nvvmProgram prog, char* buffer);
KCACHE_EXPORT nvvmResult nvvmGetProgramLogSize(nvvmProgram prog, std::size_t* size);
KCACHE_EXPORT nvvmResult nvvmGetProgramLog(nvvmProgram prog, char* buffer);

namespace kcache::interpose {
namespace {

constexpr nvvmResult k_success = 0;
constexpr nvvmResult k_invalid_program = 5;  // NVVM_ERROR_INVALID_PROGRAM: what is returned when no real library is found
constexpr const char* k_entry_kind = "nvvm-result";

// The real NVVM function behind the exported `fn` (real_of).
#define KCACHE_REAL(fn) KCACHE_REAL_OF(Jit::nvvm, fn)

struct ModuleState {
  std::mutex mutex;
  std::vector<NamedBytes> modules;
  bool keyable = true;
  std::shared_ptr<const JitResult> served;
};

HandleTable<ModuleState>& programs() { return HandleTable<ModuleState>::instance(); }

std::string real_version() {
  static const std::string version = [] {
    const auto v = KCACHE_REAL(nvvmVersion);
    const auto ir = KCACHE_REAL(nvvmIRVersion);
    int major = 0, minor = 0, ir_major = 0, ir_minor = 0, dbg_major = 0, dbg_minor = 0;
    if (v == nullptr || ir == nullptr || v(&major, &minor) != k_success ||
        ir(&ir_major, &ir_minor, &dbg_major, &dbg_minor) != k_success) {
      return std::string();
    }
    return std::to_string(major) + "." + std::to_string(minor) + "/ir" + std::to_string(ir_major) + "." +
           std::to_string(ir_minor) + "/dbg" + std::to_string(dbg_major) + "." + std::to_string(dbg_minor);
  }();
  return version;
}

// An (Lazy)AddModule call: the real one, and the module kept for the key.
nvvmResult add_module(decltype(&::nvvmAddModuleToProgram) real_add, nvvmProgram prog, const char* buffer,
                      std::size_t size, const char* name, bool lazy) {
  if (real_add == nullptr) {
    return k_invalid_program;
  }
  const nvvmResult rc = real_add(prog, buffer, size, name);
  auto state = programs().find(prog);
  if (!state) {
    return rc;
  }
  std::lock_guard lock(state->mutex);
  if (rc != k_success || buffer == nullptr) {
    state->keyable = false;
    return rc;
  }
  state->modules.push_back(NamedBytes{std::string(lazy ? "lazy:" : "") + (name != nullptr ? name : ""),
                                      lazy ? "lazy" : "module", std::string(buffer, size)});
  return rc;
}

nvvmResult compile(nvvmProgram prog, int num_options, const char** options) {
  const auto real_nvvmCompileProgram = KCACHE_REAL(nvvmCompileProgram);
  if (real_nvvmCompileProgram == nullptr) {
    return k_invalid_program;
  }
  const auto size_fn = KCACHE_REAL(nvvmGetCompiledResultSize);
  const auto get_fn = KCACHE_REAL(nvvmGetCompiledResult);
  const auto log_size_fn = KCACHE_REAL(nvvmGetProgramLogSize);
  const auto log_fn = KCACHE_REAL(nvvmGetProgramLog);
  auto state = programs().find(prog);
  if (!state) {
    return real_nvvmCompileProgram(prog, num_options, options);
  }
  InterposedCall call = start_call(Jit::nvvm, k_entry_kind, real_version(), "nvvm",
                                  [&] { return real_nvvmCompileProgram(prog, num_options, options); });
  take_program(call, *state, [&] {
    call.keyable = call.keyable && size_fn != nullptr && get_fn != nullptr && log_size_fn != nullptr &&
                   log_fn != nullptr;
    call.request.name = "nvvm";
    call.request.inputs = state->modules;
  });
  call.request.target_kind = "ptx";
  call.keyable = call.keyable && copy_options(call.request.options, num_options, options);
  if (call.keyable && std::find(call.request.options.begin(), call.request.options.end(), "-gen-lto") !=
                          call.request.options.end()) {
    call.request.target_kind = "ltoir";
  }
  call.compile = [&] {
    JitResult r;
    r.compile_rc = real_nvvmCompileProgram(prog, num_options, options);
    r.outputs[0] = record_output(prog, size_fn, get_fn);
    r.log = record_output(prog, log_size_fn, log_fn);
    return r;
  };
  return serve_into(call, *state);
}

}  // namespace
}  // namespace kcache::interpose

using namespace kcache::interpose;  // NOLINT: the exported C functions below

const char* nvvmGetErrorString(nvvmResult result) {
  return call_real(KCACHE_REAL(nvvmGetErrorString), "NVVM_ERROR unknown", result);
}

nvvmResult nvvmVersion(int* major, int* minor) {
  return call_real(KCACHE_REAL(nvvmVersion), k_invalid_program, major, minor);
}

nvvmResult nvvmIRVersion(int* major_ir, int* minor_ir, int* major_dbg, int* minor_dbg) {
  return call_real(KCACHE_REAL(nvvmIRVersion), k_invalid_program, major_ir, minor_ir, major_dbg, minor_dbg);
}

nvvmResult nvvmCreateProgram(nvvmProgram* prog) {
  const nvvmResult rc = call_real(KCACHE_REAL(nvvmCreateProgram), k_invalid_program, prog);
  if (rc == k_success && prog != nullptr) {
    try {
      programs().insert(*prog, std::make_shared<ModuleState>());
    } catch (...) {
    }
  }
  return rc;
}

nvvmResult nvvmDestroyProgram(nvvmProgram* prog) {
  const auto real_destroy = KCACHE_REAL(nvvmDestroyProgram);
  if (real_destroy == nullptr) {
    return k_invalid_program;
  }
  programs().forget(prog);
  return real_destroy(prog);
}

nvvmResult nvvmAddModuleToProgram(nvvmProgram prog, const char* buffer, std::size_t size, const char* name) {
  return add_module(KCACHE_REAL(nvvmAddModuleToProgram), prog, buffer, size, name, false);
}

nvvmResult nvvmLazyAddModuleToProgram(nvvmProgram prog, const char* buffer, std::size_t size, const char* name) {
  return add_module(KCACHE_REAL(nvvmLazyAddModuleToProgram), prog, buffer, size, name, true);
}

nvvmResult nvvmCompileProgram(nvvmProgram prog, int num_options, const char** options) {
  try {
    return compile(prog, num_options, options);
  } catch (...) {
    return call_real(KCACHE_REAL(nvvmCompileProgram), k_invalid_program, prog, num_options, options);
  }
}

nvvmResult nvvmVerifyProgram(nvvmProgram prog, int num_options, const char** options) {
  return call_real(KCACHE_REAL(nvvmVerifyProgram), k_invalid_program, prog, num_options, options);
}

// The getters: answered from the recorded result after a hit, else by the real library.
nvvmResult nvvmGetCompiledResultSize(nvvmProgram prog, std::size_t* size) {
  return programs().replay_or_call(prog, 0, size, KCACHE_REAL(nvvmGetCompiledResultSize), k_invalid_program);
}

nvvmResult nvvmGetCompiledResult(nvvmProgram prog, char* buffer) {
  return programs().replay_or_call(prog, 0, buffer, KCACHE_REAL(nvvmGetCompiledResult), k_invalid_program);
}

nvvmResult nvvmGetProgramLogSize(nvvmProgram prog, std::size_t* size) {
  return programs().replay_or_call(prog, k_jit_log, size, KCACHE_REAL(nvvmGetProgramLogSize), k_invalid_program);
}

nvvmResult nvvmGetProgramLog(nvvmProgram prog, char* buffer) {
  return programs().replay_or_call(prog, k_jit_log, buffer, KCACHE_REAL(nvvmGetProgramLog), k_invalid_program);
}
