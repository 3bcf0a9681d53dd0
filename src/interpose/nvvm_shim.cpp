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

template <class Fn>
Fn real(const char* name) {
  return reinterpret_cast<Fn>(real_symbol(Jit::nvvm, name));  // POSIX: data to function pointer
}

#define KCACHE_REAL_NVVM(fn)                                \
  static const auto real_##fn = real<decltype(&::fn)>(#fn); \
  if (real_##fn == nullptr) {                               \
    return k_invalid_program;                               \
  }

struct ModuleState {
  std::mutex mutex;
  std::vector<NamedBytes> modules;
  bool keyable = true;
  std::shared_ptr<const JitResult> served;
};

HandleTable<ModuleState>& programs() { return HandleTable<ModuleState>::instance(); }

std::string real_version() {
  static const std::string version = [] {
    const auto v = real<decltype(&::nvvmVersion)>("nvvmVersion");
    const auto ir = real<decltype(&::nvvmIRVersion)>("nvvmIRVersion");
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

void remember_module(nvvmProgram prog, nvvmResult rc, const char* buffer, std::size_t size, const char* name,
                     bool lazy) {
  auto state = programs().find(prog);
  if (!state) {
    return;
  }
  std::lock_guard lock(state->mutex);
  if (rc != k_success || buffer == nullptr) {
    state->keyable = false;
    return;
  }
  state->modules.push_back(NamedBytes{std::string(lazy ? "lazy:" : "") + (name != nullptr ? name : ""),
                                      lazy ? "lazy" : "module", std::string(buffer, size)});
}

nvvmResult compile(nvvmProgram prog, int num_options, const char** options) {
  KCACHE_REAL_NVVM(nvvmCompileProgram)
  static const auto size_fn = real<decltype(&::nvvmGetCompiledResultSize)>("nvvmGetCompiledResultSize");
  static const auto get_fn = real<decltype(&::nvvmGetCompiledResult)>("nvvmGetCompiledResult");
  static const auto log_size_fn = real<decltype(&::nvvmGetProgramLogSize)>("nvvmGetProgramLogSize");
  static const auto log_fn = real<decltype(&::nvvmGetProgramLog)>("nvvmGetProgramLog");
  auto state = programs().find(prog);
  if (!state) {
    return real_nvvmCompileProgram(prog, num_options, options);
  }
  InterposedCall call;
  call.jit = Jit::nvvm;
  call.entry_kind = k_entry_kind;
  call.version = real_version();
  call.real = [&] { return real_nvvmCompileProgram(prog, num_options, options); };
  {
    std::lock_guard lock(state->mutex);
    state->served.reset();
    call.keyable = state->keyable && size_fn != nullptr && get_fn != nullptr && log_size_fn != nullptr &&
                   log_fn != nullptr && num_options >= 0 && (num_options == 0 || options != nullptr);
    call.request.backend = "nvvm";
    call.request.name = "nvvm";
    call.request.inputs = state->modules;
  }
  call.request.target_kind = "ptx";
  for (int i = 0; call.keyable && i < num_options; ++i) {
    if (options[i] == nullptr) {
      call.keyable = false;
    } else {
      call.request.options.emplace_back(options[i]);
      if (call.request.options.back() == "-gen-lto") {
        call.request.target_kind = "ltoir";
      }
    }
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
  static const auto fn = real<decltype(&::nvvmGetErrorString)>("nvvmGetErrorString");
  return fn != nullptr ? fn(result) : "NVVM_ERROR unknown";
}

nvvmResult nvvmVersion(int* major, int* minor) {
  KCACHE_REAL_NVVM(nvvmVersion)
  return real_nvvmVersion(major, minor);
}

nvvmResult nvvmIRVersion(int* major_ir, int* minor_ir, int* major_dbg, int* minor_dbg) {
  KCACHE_REAL_NVVM(nvvmIRVersion)
  return real_nvvmIRVersion(major_ir, minor_ir, major_dbg, minor_dbg);
}

nvvmResult nvvmCreateProgram(nvvmProgram* prog) {
  KCACHE_REAL_NVVM(nvvmCreateProgram)
  const nvvmResult rc = real_nvvmCreateProgram(prog);
  if (rc == k_success && prog != nullptr) {
    try {
      programs().insert(*prog, std::make_shared<ModuleState>());
    } catch (...) {
    }
  }
  return rc;
}

nvvmResult nvvmDestroyProgram(nvvmProgram* prog) {
  KCACHE_REAL_NVVM(nvvmDestroyProgram)
  programs().forget(prog);
  return real_nvvmDestroyProgram(prog);
}

nvvmResult nvvmAddModuleToProgram(nvvmProgram prog, const char* buffer, std::size_t size, const char* name) {
  KCACHE_REAL_NVVM(nvvmAddModuleToProgram)
  const nvvmResult rc = real_nvvmAddModuleToProgram(prog, buffer, size, name);
  remember_module(prog, rc, buffer, size, name, false);
  return rc;
}

nvvmResult nvvmLazyAddModuleToProgram(nvvmProgram prog, const char* buffer, std::size_t size, const char* name) {
  KCACHE_REAL_NVVM(nvvmLazyAddModuleToProgram)
  const nvvmResult rc = real_nvvmLazyAddModuleToProgram(prog, buffer, size, name);
  remember_module(prog, rc, buffer, size, name, true);
  return rc;
}

nvvmResult nvvmCompileProgram(nvvmProgram prog, int num_options, const char** options) {
  try {
    return compile(prog, num_options, options);
  } catch (...) {
    KCACHE_REAL_NVVM(nvvmCompileProgram)
    return real_nvvmCompileProgram(prog, num_options, options);
  }
}

nvvmResult nvvmVerifyProgram(nvvmProgram prog, int num_options, const char** options) {
  KCACHE_REAL_NVVM(nvvmVerifyProgram)
  return real_nvvmVerifyProgram(prog, num_options, options);
}

nvvmResult nvvmGetCompiledResultSize(nvvmProgram prog, std::size_t* size) {
  if (auto r = programs().served(prog); r && size != nullptr) {
    return replay_size(r->outputs[0], size);
  }
  KCACHE_REAL_NVVM(nvvmGetCompiledResultSize)
  return real_nvvmGetCompiledResultSize(prog, size);
}

nvvmResult nvvmGetCompiledResult(nvvmProgram prog, char* buffer) {
  if (auto r = programs().served(prog); r && buffer != nullptr) {
    return replay_get(r->outputs[0], buffer);
  }
  KCACHE_REAL_NVVM(nvvmGetCompiledResult)
  return real_nvvmGetCompiledResult(prog, buffer);
}

nvvmResult nvvmGetProgramLogSize(nvvmProgram prog, std::size_t* size) {
  if (auto r = programs().served(prog); r && size != nullptr) {
    return replay_size(r->log, size);
  }
  KCACHE_REAL_NVVM(nvvmGetProgramLogSize)
  return real_nvvmGetProgramLogSize(prog, size);
}

nvvmResult nvvmGetProgramLog(nvvmProgram prog, char* buffer) {
  if (auto r = programs().served(prog); r && buffer != nullptr) {
    return replay_get(r->log, buffer);
  }
  KCACHE_REAL_NVVM(nvvmGetProgramLog)
  return real_nvvmGetProgramLog(prog, buffer);
}
