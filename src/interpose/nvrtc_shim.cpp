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
// what the getters return and stores it, unless the compile failed or a disk
// header changed while it ran. Anything kcache cannot do (no key, a store
// error, an entry that does not decode) calls the real compile, with one
// warning per process.
//
// Thread-safety: as NVRTC's (distinct programs on distinct threads); the
// program table is locked.
#include <pthread.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "interpose/nvrtc_result.hpp"
#include "interpose/real_library.hpp"
#include "interpose/session.hpp"
#include "kcache/compiler.hpp"
#include "kcache/toolkit.hpp"
#include "util/hex.hpp"

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
constexpr nvrtcResult k_name_expression_not_valid = 10;
// The kind of an interposed NVRTC entry: its payload is an NvrtcResult.
constexpr const char* k_entry_kind = "nvrtc-result";

// The real function `name`, resolved once per call site.
#define KCACHE_REAL(fn)                                                                                   \
  static const auto real_##fn = reinterpret_cast<decltype(&::fn)>(real_symbol(Jit::nvrtc, #fn)); /* NOLINT */ \
  if (real_##fn == nullptr) {                                                                             \
    return k_internal_error;                                                                              \
  }

// What the stand-in knows of one program.
struct ProgramState {
  std::mutex mutex;
  std::string name;
  std::string source;
  std::vector<NamedBytes> headers;
  std::vector<std::string> name_expressions;
  bool keyable = true;  // false: a header without content
  bool compiled = false;
  std::shared_ptr<const NvrtcResult> served;  // set: the last compile was answered from the cache
};

std::shared_mutex g_programs_mutex;
std::unordered_map<nvrtcProgram, std::shared_ptr<ProgramState>> g_programs;

// The program table stays usable in a child forked while another thread held its lock.
[[maybe_unused]] const bool g_fork_safe = [] {
  ::pthread_atfork([] { g_programs_mutex.lock(); }, [] { g_programs_mutex.unlock(); },
                   [] { g_programs_mutex.unlock(); });
  return true;
}();

std::shared_ptr<ProgramState> find_program(nvrtcProgram prog) {
  std::shared_lock lock(g_programs_mutex);
  const auto it = g_programs.find(prog);
  return it == g_programs.end() ? nullptr : it->second;
}

// The recorded result when `prog`'s last compile was served from the cache.
std::shared_ptr<const NvrtcResult> served(nvrtcProgram prog) {
  auto state = find_program(prog);
  if (!state) {
    return nullptr;
  }
  std::lock_guard lock(state->mutex);
  return state->served;
}

using SizeFn = nvrtcResult (*)(nvrtcProgram, std::size_t*);
using GetFn = nvrtcResult (*)(nvrtcProgram, char*);

// Records what a pair of getters gives for `prog`.
NvrtcOutput record_output(nvrtcProgram prog, SizeFn size_fn, GetFn get_fn) {
  NvrtcOutput o;
  std::size_t n = 0;
  o.size_rc = size_fn(prog, &n);
  if (o.size_rc != k_success) {
    o.get_rc = o.size_rc;
    return o;
  }
  // Room for at least a few bytes: an empty output is fetched with a real buffer too.
  std::string buffer(n + 16, '\0');
  o.get_rc = get_fn(prog, buffer.data());
  if (o.get_rc == k_success) {
    buffer.resize(n);
    o.bytes = std::move(buffer);
  }
  return o;
}

nvrtcResult replay_size(const NvrtcOutput& o, std::size_t* size) {
  if (o.size_rc == k_success) {
    *size = o.bytes.size();
  }
  return o.size_rc;
}

nvrtcResult replay_get(const NvrtcOutput& o, char* out) {
  if (o.get_rc == k_success && !o.bytes.empty()) {
    std::memcpy(out, o.bytes.data(), o.bytes.size());
  }
  return o.get_rc;
}

// Everything the program can read back after the real compile of `prog`.
NvrtcResult record_result(nvrtcProgram prog, nvrtcResult compile_rc, const std::vector<std::string>& expressions) {
  NvrtcResult r;
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
    NvrtcLoweredName n;
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

// The real library's run-time version, as it goes into keys.
std::string real_version() {
  static const std::string version = [] {
    using Fn = nvrtcResult (*)(int*, int*);
    const auto fn = reinterpret_cast<Fn>(real_symbol(Jit::nvrtc, "nvrtcVersion"));  // POSIX: data to function pointer
    int major = 0, minor = 0;
    if (fn == nullptr || fn(&major, &minor) != k_success) {
      return std::string();
    }
    return std::to_string(major) + "." + std::to_string(minor);
  }();
  return version;
}

// kcache's key for `request` (derive_key's fields) plus the real library's
// identity, with the entry kind as the target kind.
Result<KeyBuilder> interposed_key(const CompileRequest& request, const std::string& version,
                                  const std::string& build_id) {
  auto base = derive_key(request);
  if (!base) {
    return tl::unexpected(base.error());
  }
  KeyBuilder kb(base->record().domain);
  for (const auto& f : base->record().fields) {
    if (f.digested) {
      const auto raw = util::from_hex(f.value);
      if (!raw || raw->size() != 32) {
        return make_error(ErrorCode::internal, "key field " + f.name + " holds no SHA-256");
      }
      std::array<std::uint8_t, 32> d{};
      std::memcpy(d.data(), raw->data(), d.size());
      kb.add_digest(f.name, d);
    } else {
      kb.add(f.name, f.name == "target_kind" ? std::string_view(k_entry_kind) : std::string_view(f.value));
    }
  }
  kb.add("interposed.format", "1");
  kb.add("interposed.version", version);
  kb.add("interposed.build_id", build_id);
  return kb;
}

// The arch the options name (for the passport's target), or empty.
std::string arch_of(const KeyRecord& record) {
  for (const auto& f : record.fields) {
    if (f.name == "option" && f.value.rfind("--gpu-architecture=", 0) == 0) {
      return f.value.substr(19);
    }
  }
  return {};
}

std::map<std::string, std::string> symbols_of(const NvrtcResult& r) {
  std::map<std::string, std::string> m;
  for (const auto& n : r.names) {
    if (n.rc == k_success) {
      m.emplace(n.expression, n.lowered);
    }
  }
  return m;
}

nvrtcResult compile(nvrtcProgram prog, int num_options, const char* const* options) {
  KCACHE_REAL(nvrtcCompileProgram)
  const auto real_compile = [&] { return real_nvrtcCompileProgram(prog, num_options, options); };
  auto state = find_program(prog);
  if (!state) {
    return real_compile();  // made before the stand-in was there, or not by NVRTC
  }
  CompileRequest request;
  {
    std::lock_guard lock(state->mutex);
    state->served.reset();
    state->compiled = true;
    if (!state->keyable || num_options < 0 || (num_options > 0 && options == nullptr)) {
      Session::log_event(Jit::nvrtc, InterposedEvent::uncached, {});
      return real_compile();
    }
    request.backend = "nvrtc";
    request.name = state->name;
    request.source = state->source;
    request.headers = state->headers;
    request.name_expressions = state->name_expressions;
  }
  request.target_kind = "ptx";
  for (int i = 0; i < num_options; ++i) {
    if (options[i] == nullptr) {
      Session::log_event(Jit::nvrtc, InterposedEvent::uncached, {});
      return real_compile();
    }
    request.options.emplace_back(options[i]);
  }
  Session::Use use;
  Session* session = use.session();
  if (session == nullptr) {
    Session::log_event(Jit::nvrtc, InterposedEvent::uncached, {});
    return real_compile();
  }
  const RealIdentity identity = real_identity(Jit::nvrtc);
  const std::string version = real_version();
  auto key = interposed_key(request, version, identity.build_id);
  if (!key) {
    // Not cacheable by design (a side-effect option, an unbounded computed
    // include) is no failure; anything else is warned about once.
    if (key.error().code != ErrorCode::unsupported) {
      Session::warn_once(Jit::nvrtc, "cannot key a compile of " + request.name + ": " + key.error().describe());
      session->record(Jit::nvrtc, InterposedEvent::fallback, {});
    } else {
      session->record(Jit::nvrtc, InterposedEvent::uncached, {});
    }
    return real_compile();
  }
  const std::string key_hex = key->key().hex();
  bool compiled_here = false;
  nvrtcResult compile_rc = k_internal_error;
  const auto produce = [&]() -> Result<CompileOutput> {
    compiled_here = true;
    compile_rc = real_compile();
    NvrtcResult recorded = record_result(prog, compile_rc, request.name_expressions);
    CompileOutput out;
    // A failed compile is passed through and never stored; so is one whose
    // disk headers changed while it ran (its key no longer names its inputs).
    out.cacheable = compile_rc == k_success;
    if (out.cacheable) {
      auto again = interposed_key(request, version, identity.build_id);
      out.cacheable = again && again->key() == key->key();
    }
    const std::string log = recorded.log.bytes.substr(0, recorded.log.bytes.find('\0'));
    auto symbols = symbols_of(recorded);
    out.artifact = Artifact::make(*key, k_entry_kind, Payload(encode(recorded)), Producer{"nvrtc", version},
                                  Target{arch_of(key->record()), ""});
    out.artifact.passport.log = log.substr(0, k_passport_max_log_bytes);
    out.artifact.passport.symbols = std::move(symbols);
    out.artifact.passport.labels["interposed"] = "nvrtc";
    return out;
  };
  CacheOutcome outcome{};
  auto artifact = session->cache().get_or_compile(key->key(), produce, &outcome);
  if (compiled_here) {
    const bool stored = outcome == CacheOutcome::compiled;
    session->record(Jit::nvrtc, stored ? InterposedEvent::compile : InterposedEvent::uncached, key_hex);
    return compile_rc;
  }
  std::optional<NvrtcResult> result;
  if (artifact && artifact->passport.kind == k_entry_kind) {
    result = decode_nvrtc_result(artifact->payload.view());
  }
  if (!result || result->compile_rc != k_success) {
    Session::warn_once(Jit::nvrtc, artifact ? "entry " + key_hex + " does not hold an NVRTC result"
                                            : "cache lookup failed: " + artifact.error().describe());
    session->record(Jit::nvrtc, InterposedEvent::fallback, key_hex);
    return real_compile();
  }
  {
    std::lock_guard lock(state->mutex);
    state->served = std::make_shared<const NvrtcResult>(std::move(*result));
  }
  session->record(Jit::nvrtc, InterposedEvent::hit, key_hex);
  return k_success;
}

}  // namespace
}  // namespace kcache::interpose

using namespace kcache::interpose;  // NOLINT: the exported C functions below

const char* nvrtcGetErrorString(nvrtcResult result) {
  static const auto real = reinterpret_cast<decltype(&::nvrtcGetErrorString)>(  // POSIX: data to function pointer
      real_symbol(Jit::nvrtc, "nvrtcGetErrorString"));
  return real != nullptr ? real(result) : "NVRTC_ERROR unknown";
}

nvrtcResult nvrtcVersion(int* major, int* minor) {
  KCACHE_REAL(nvrtcVersion)
  return real_nvrtcVersion(major, minor);
}

nvrtcResult nvrtcGetNumSupportedArchs(int* num_archs) {
  KCACHE_REAL(nvrtcGetNumSupportedArchs)
  return real_nvrtcGetNumSupportedArchs(num_archs);
}

nvrtcResult nvrtcGetSupportedArchs(int* archs) {
  KCACHE_REAL(nvrtcGetSupportedArchs)
  return real_nvrtcGetSupportedArchs(archs);
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int num_headers,
                               const char* const* headers, const char* const* include_names) {
  KCACHE_REAL(nvrtcCreateProgram)
  const nvrtcResult rc = real_nvrtcCreateProgram(prog, src, name, num_headers, headers, include_names);
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
    std::unique_lock lock(g_programs_mutex);
    g_programs[*prog] = std::move(state);
  } catch (...) {
    // Out of memory: the program simply compiles without the cache.
  }
  return rc;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
  KCACHE_REAL(nvrtcDestroyProgram)
  if (prog != nullptr && *prog != nullptr) {
    std::unique_lock lock(g_programs_mutex);
    g_programs.erase(*prog);
  }
  return real_nvrtcDestroyProgram(prog);
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int num_options, const char* const* options) {
  try {
    return compile(prog, num_options, options);
  } catch (...) {
    Session::warn_once(Jit::nvrtc, "internal error");
    KCACHE_REAL(nvrtcCompileProgram)
    return real_nvrtcCompileProgram(prog, num_options, options);
  }
}

// The getters: answered from the recorded result after a hit, else by the real library.
#define KCACHE_GETTERS(Name, kind)                                                  \
  nvrtcResult nvrtcGet##Name##Size(nvrtcProgram prog, std::size_t* size) {          \
    if (auto r = served(prog); r && size != nullptr) {                              \
      return replay_size(r->output(NvrtcOutputKind::kind), size);                   \
    }                                                                               \
    KCACHE_REAL(nvrtcGet##Name##Size)                                               \
    return real_nvrtcGet##Name##Size(prog, size);                                   \
  }                                                                                 \
  nvrtcResult nvrtcGet##Name(nvrtcProgram prog, char* out) {                        \
    if (auto r = served(prog); r && out != nullptr) {                               \
      return replay_get(r->output(NvrtcOutputKind::kind), out);                     \
    }                                                                               \
    KCACHE_REAL(nvrtcGet##Name)                                                     \
    return real_nvrtcGet##Name(prog, out);                                          \
  }

KCACHE_GETTERS(PTX, ptx)
KCACHE_GETTERS(CUBIN, cubin)
KCACHE_GETTERS(LTOIR, ltoir)
KCACHE_GETTERS(OptiXIR, optixir)

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, std::size_t* size) {
  if (auto r = served(prog); r && size != nullptr) {
    return replay_size(r->log, size);
  }
  KCACHE_REAL(nvrtcGetProgramLogSize)
  return real_nvrtcGetProgramLogSize(prog, size);
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* out) {
  if (auto r = served(prog); r && out != nullptr) {
    return replay_get(r->log, out);
  }
  KCACHE_REAL(nvrtcGetProgramLog)
  return real_nvrtcGetProgramLog(prog, out);
}

nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char* name_expression) {
  KCACHE_REAL(nvrtcAddNameExpression)
  auto state = find_program(prog);
  if (state && name_expression != nullptr) {
    std::lock_guard lock(state->mutex);
    if (state->served) {
      return k_no_name_expressions_after_compilation;  // what the real library says after a compile
    }
  }
  const nvrtcResult rc = real_nvrtcAddNameExpression(prog, name_expression);
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
    const NvrtcLoweredName* n = r->lowered(name_expression);
    if (n == nullptr) {
      return k_name_expression_not_valid;
    }
    if (n->rc == k_success) {
      *lowered = n->lowered.c_str();  // owned by the recorded result, which the program state keeps
    }
    return n->rc;
  }
  KCACHE_REAL(nvrtcGetLoweredName)
  return real_nvrtcGetLoweredName(prog, name_expression, lowered);
}

nvrtcResult nvrtcGetPCHHeapSize(std::size_t* size) {
  KCACHE_REAL(nvrtcGetPCHHeapSize)
  return real_nvrtcGetPCHHeapSize(size);
}

nvrtcResult nvrtcSetPCHHeapSize(std::size_t size) {
  KCACHE_REAL(nvrtcSetPCHHeapSize)
  return real_nvrtcSetPCHHeapSize(size);
}

nvrtcResult nvrtcGetPCHCreateStatus(nvrtcProgram prog) {
  KCACHE_REAL(nvrtcGetPCHCreateStatus)
  return real_nvrtcGetPCHCreateStatus(prog);
}

nvrtcResult nvrtcGetPCHHeapSizeRequired(nvrtcProgram prog, std::size_t* size) {
  KCACHE_REAL(nvrtcGetPCHHeapSizeRequired)
  return real_nvrtcGetPCHHeapSizeRequired(prog, size);
}

nvrtcResult nvrtcSetFlowCallback(nvrtcProgram prog, int (*callback)(void*, void*), void* payload) {
  KCACHE_REAL(nvrtcSetFlowCallback)
  return real_nvrtcSetFlowCallback(prog, callback, payload);
}
