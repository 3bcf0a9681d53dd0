// interpose/nvjitlink_shim.cpp: the nvJitLink C API of the stand-in library.
//
// nvJitLink.h calls versioned entry points (__nvJitLinkCreate_13_0 ...) from
// inline wrappers; older programs and language bindings call the plain names.
// The stand-in exports both: the plain names and the versioned ones of
// nvJitLink 12.0-12.9 and 13.0-13.2, each forwarding to the same name in the
// real library. nvJitLinkComplete is served from kcache: the key holds every
// input's kind and bytes (AddData; AddFile reads the file), the options and
// the real library's version and build-id (docs/keys.md, "nvJitLink"); after
// a hit the linked CUBIN/PTX and both logs are the recorded ones
// (jit_result.hpp: outputs cubin, ptx, info log; log: error log).
//
// Thread-safety: as nvJitLink's (distinct handles on distinct threads).
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "interpose/handle_table.hpp"
#include "interpose/interposed_compile.hpp"
#include "interpose/jit_result.hpp"
#include "interpose/real_library.hpp"
#include "interpose/session.hpp"

using nvJitLinkResult = int;
using nvJitLinkHandle = void*;

#define KCACHE_EXPORT extern "C" __attribute__((visibility("default")))

namespace kcache::interpose {
namespace {

constexpr nvJitLinkResult k_success = 0;
constexpr nvJitLinkResult k_internal = 6;  // NVJITLINK_ERROR_INTERNAL
constexpr const char* k_entry_kind = "nvjitlink-result";
enum Output { cubin = 0, ptx = 1, info_log = 2 };

using CreateFn = nvJitLinkResult (*)(nvJitLinkHandle*, std::uint32_t, const char**);
using DestroyFn = nvJitLinkResult (*)(nvJitLinkHandle*);
using AddDataFn = nvJitLinkResult (*)(nvJitLinkHandle, int, const void*, std::size_t, const char*);
using AddFileFn = nvJitLinkResult (*)(nvJitLinkHandle, int, const char*);
using CompleteFn = nvJitLinkResult (*)(nvJitLinkHandle);
using SizeFn = nvJitLinkResult (*)(nvJitLinkHandle, std::size_t*);
using GetFn = nvJitLinkResult (*)(nvJitLinkHandle, void*);
using GetTextFn = nvJitLinkResult (*)(nvJitLinkHandle, char*);

struct LinkState {
  std::mutex mutex;
  std::vector<std::string> options;
  std::vector<NamedBytes> inputs;
  bool keyable = true;
  std::shared_ptr<const JitResult> served;
  bool completed = false;  // nvJitLinkComplete returned (served or real)
  // After a Complete that kcache served, the program's real handle never
  // linked: calls made after it go to this real handle (same options and
  // inputs, completed), so that their codes and logs are the real library's
  // (after_served).
  nvJitLinkHandle after = nullptr;
};

HandleTable<LinkState>& links() { return HandleTable<LinkState>::instance(); }

// kcache's name for an nvJitLinkInputType, or empty for one it does not key.
const char* kind_name(int type) {
  switch (type) {
    case 1:
      return "cubin";
    case 2:
      return "ptx";
    case 3:
      return "ltoir";
    case 4:
      return "fatbin";
    case 5:
      return "object";
    case 6:
      return "library";
    default:
      return "";
  }
}

bool read_file(const char* path, std::string& out) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      ::close(fd);
      return n == 0;
    }
    out.append(buffer, static_cast<std::size_t>(n));
  }
}

std::string real_version() {
  static const std::string version = major_minor_version(
      real_function<nvJitLinkResult (*)(unsigned*, unsigned*)>(Jit::nvjitlink, "nvJitLinkVersion"));
  return version;
}

// The text of a handle's error log (without its NUL), through the real getters.
std::string error_log_of(nvJitLinkHandle h);

// The nvJitLinkInputType of one of kind_name()'s names (0 for another).
int input_type(std::string_view kind) {
  for (int type = 1; type <= 6; ++type) {
    if (kind == kind_name(type)) {
      return type;
    }
  }
  return 0;
}

// A real handle in the state the program's would be in had it linked: made
// with `s`'s options, given its inputs and completed (a real link, made once,
// on the first call after a served Complete: a program that calls nothing
// after Complete never pays for it). Null when the real library cannot make
// one. REQUIRES: s.mutex held.
nvJitLinkHandle completed_stand_in(LinkState& s) {
  if (s.after != nullptr) {
    return s.after;
  }
  const auto create_fn = real_function<CreateFn>(Jit::nvjitlink, "nvJitLinkCreate");
  const auto add_fn = real_function<AddDataFn>(Jit::nvjitlink, "nvJitLinkAddData");
  const auto complete_fn = real_function<CompleteFn>(Jit::nvjitlink, "nvJitLinkComplete");
  if (create_fn == nullptr || add_fn == nullptr || complete_fn == nullptr) {
    return nullptr;
  }
  std::vector<const char*> argv;
  for (const auto& o : s.options) {
    argv.push_back(o.c_str());
  }
  nvJitLinkHandle h = nullptr;
  if (create_fn(&h, static_cast<std::uint32_t>(argv.size()), argv.data()) != k_success || h == nullptr) {
    return nullptr;
  }
  for (const auto& in : s.inputs) {  // a served link was keyable: every input was recorded
    (void)add_fn(h, input_type(in.kind), in.bytes.data(), in.bytes.size(), in.name.c_str());
  }
  (void)complete_fn(h);  // whatever it says, the handle has completed, as the program's would have
  s.after = h;
  return h;
}

// A call made on a handle after kcache served its Complete: what the real
// library answers on a completed handle (measured against libnvJitLink 13.0:
// a second Complete and AddData / AddFile return NVJITLINK_ERROR_INTERNAL,
// AddData and AddFile after checking their arguments as before, and append
// "ERROR 1: empty elfw when adding cubin<name>" to the error log), with the
// lines it adds to its error log appended to the served one.
template <class Call>
nvJitLinkResult after_served(LinkState& s, const Call& call) {
  std::lock_guard lock(s.mutex);
  const nvJitLinkHandle stand_in = completed_stand_in(s);
  if (stand_in == nullptr) {
    return k_internal;
  }
  const std::string before = error_log_of(stand_in);
  const nvJitLinkResult rc = call(stand_in);
  const std::string now = error_log_of(stand_in);
  if (s.served && now.size() > before.size() && now.compare(0, before.size(), before) == 0) {
    auto changed = std::make_shared<JitResult>(*s.served);
    std::string log = changed->log.bytes;
    while (!log.empty() && log.back() == '\0') {
      log.pop_back();
    }
    log += now.substr(before.size());
    log += '\0';  // the size the real getters give counts the NUL
    changed->log = JitOutput{0, 0, std::move(log)};
    s.served = std::move(changed);
  }
  return rc;
}

// The state of `h` when kcache served its Complete (the calls after it go to after_served()), else null.
std::shared_ptr<LinkState> served_and_completed(nvJitLinkHandle h) {
  auto s = links().find(h);
  if (!s) {
    return nullptr;
  }
  std::lock_guard lock(s->mutex);
  return s->completed && s->served ? s : nullptr;
}

nvJitLinkResult create(CreateFn fn, nvJitLinkHandle* handle, std::uint32_t n, const char** options) {
  if (fn == nullptr) {
    return k_internal;
  }
  const nvJitLinkResult rc = fn(handle, n, options);
  if (rc != k_success || handle == nullptr) {
    return rc;
  }
  try {
    auto s = std::make_shared<LinkState>();
    s->keyable = copy_options(s->options, n, options);
    links().insert(*handle, std::move(s));
  } catch (...) {
  }
  return rc;
}

nvJitLinkResult destroy(DestroyFn fn, nvJitLinkHandle* handle) {
  if (fn == nullptr) {
    return k_internal;
  }
  if (handle != nullptr) {
    if (auto s = links().find(*handle)) {
      std::lock_guard lock(s->mutex);
      if (s->after != nullptr) {
        (void)fn(&s->after);
      }
    }
  }
  links().forget(handle);
  return fn(handle);
}

nvJitLinkResult add_data(AddDataFn fn, nvJitLinkHandle h, int type, const void* data, std::size_t size,
                         const char* name) {
  if (fn == nullptr) {
    return k_internal;
  }
  if (auto done = served_and_completed(h)) {
    return after_served(*done, [&](nvJitLinkHandle real) { return fn(real, type, data, size, name); });
  }
  const nvJitLinkResult rc = fn(h, type, data, size, name);
  if (auto s = links().find(h)) {
    std::lock_guard lock(s->mutex);
    if (rc != k_success || data == nullptr || *kind_name(type) == '\0') {
      s->keyable = false;
    } else {
      s->inputs.push_back(NamedBytes{name != nullptr ? name : "", kind_name(type),
                                     std::string(static_cast<const char*>(data), size)});
    }
  }
  return rc;
}

nvJitLinkResult add_file(AddFileFn fn, nvJitLinkHandle h, int type, const char* file) {
  if (fn == nullptr) {
    return k_internal;
  }
  if (auto done = served_and_completed(h)) {
    return after_served(*done, [&](nvJitLinkHandle real) { return fn(real, type, file); });
  }
  const nvJitLinkResult rc = fn(h, type, file);
  if (auto s = links().find(h)) {
    std::string bytes;
    const bool read = rc == k_success && file != nullptr && *kind_name(type) != '\0' && read_file(file, bytes);
    std::lock_guard lock(s->mutex);
    if (!read) {
      s->keyable = false;
    } else {
      s->inputs.push_back(NamedBytes{file, kind_name(type), std::move(bytes)});
    }
  }
  return rc;
}

struct Getters {
  SizeFn cubin_size = nullptr;
  GetFn cubin_get = nullptr;
  SizeFn ptx_size = nullptr;
  GetTextFn ptx_get = nullptr;
  SizeFn info_size = nullptr;
  GetTextFn info_get = nullptr;
  SizeFn error_size = nullptr;
  GetTextFn error_get = nullptr;
  bool complete() const {
    return cubin_size != nullptr && cubin_get != nullptr && ptx_size != nullptr && ptx_get != nullptr &&
           info_size != nullptr && info_get != nullptr && error_size != nullptr && error_get != nullptr;
  }
};

// The real getters a link is recorded with.
const Getters& getters() {
  static const Getters g = [] {
    const auto size = [](const char* name) { return real_function<SizeFn>(Jit::nvjitlink, name); };
    const auto text = [](const char* name) { return real_function<GetTextFn>(Jit::nvjitlink, name); };
    return Getters{size("nvJitLinkGetLinkedCubinSize"), real_function<GetFn>(Jit::nvjitlink, "nvJitLinkGetLinkedCubin"),
                   size("nvJitLinkGetLinkedPtxSize"),   text("nvJitLinkGetLinkedPtx"),
                   size("nvJitLinkGetInfoLogSize"),     text("nvJitLinkGetInfoLog"),
                   size("nvJitLinkGetErrorLogSize"),    text("nvJitLinkGetErrorLog")};
  }();
  return g;
}

std::string error_log_of(nvJitLinkHandle h) {
  const Getters& g = getters();
  std::size_t n = 0;
  if (g.error_size == nullptr || g.error_get == nullptr || g.error_size(h, &n) != k_success || n == 0) {
    return {};
  }
  std::string log(n + 1, '\0');
  if (g.error_get(h, log.data()) != k_success) {
    return {};
  }
  log.resize(::strnlen(log.data(), n));
  return log;
}

// REQUIRES: getters().complete().
JitResult record(nvJitLinkHandle h, nvJitLinkResult rc) {
  const Getters& g = getters();
  JitResult r;
  r.compile_rc = rc;
  r.outputs[cubin] = record_output(h, g.cubin_size, g.cubin_get);
  r.outputs[ptx] = record_output(h, g.ptx_size, g.ptx_get);
  r.outputs[info_log] = record_output(h, g.info_size, g.info_get);
  r.log = record_output(h, g.error_size, g.error_get);
  return r;
}

nvJitLinkResult complete(CompleteFn fn, nvJitLinkHandle h) {
  if (fn == nullptr) {
    return k_internal;
  }
  auto s = links().find(h);
  if (!s) {
    return fn(h);
  }
  if (served_and_completed(h)) {
    return after_served(*s, [&](nvJitLinkHandle real) { return fn(real); });
  }
  {
    // A handle the real library completed (a miss): it answers a second
    // Complete itself (NVJITLINK_ERROR_INTERNAL), never the cache.
    std::lock_guard lock(s->mutex);
    if (s->completed) {
      s->keyable = false;
    }
  }
  InterposedCall call = start_call(Jit::nvjitlink, k_entry_kind, real_version(), "nvjitlink", [&] { return fn(h); });
  take_program(call, *s, [&] {
    call.keyable = call.keyable && getters().complete();
    call.request.name = "link";
    call.request.options = s->options;
    call.request.inputs = s->inputs;
  });
  call.request.target_kind = "cubin";
  for (const auto& o : call.request.options) {
    if (o == "-ptx") {
      call.request.target_kind = "ptx";
    }
  }
  call.compile = [&] { return record(h, fn(h)); };
  const nvJitLinkResult rc = serve_into(call, *s);
  std::lock_guard lock(s->mutex);
  s->completed = true;
  return rc;
}

}  // namespace
}  // namespace kcache::interpose

// The exported functions, each under its plain name and its versioned names,
// each forwarding to the same name in the real library.
#define KCACHE_REAL(fn) KCACHE_REAL_OF(kcache::interpose::Jit::nvjitlink, fn)
#define KCACHE_NVJITLINK_ENTRY_POINTS(pre, suffix)                                                                 \
  KCACHE_EXPORT nvJitLinkResult pre##nvJitLinkCreate##suffix(nvJitLinkHandle* h, std::uint32_t n, const char** o) { \
    return kcache::interpose::create(KCACHE_REAL(pre##nvJitLinkCreate##suffix), h, n, o);                          \
  }                                                                                                                \
  KCACHE_EXPORT nvJitLinkResult pre##nvJitLinkDestroy##suffix(nvJitLinkHandle* h) {                                \
    return kcache::interpose::destroy(KCACHE_REAL(pre##nvJitLinkDestroy##suffix), h);                              \
  }                                                                                                                \
  KCACHE_EXPORT nvJitLinkResult pre##nvJitLinkAddData##suffix(nvJitLinkHandle h, int t, const void* d, std::size_t s, \
                                                              const char* n) {                                     \
    return kcache::interpose::add_data(KCACHE_REAL(pre##nvJitLinkAddData##suffix), h, t, d, s, n);                 \
  }                                                                                                                \
  KCACHE_EXPORT nvJitLinkResult pre##nvJitLinkAddFile##suffix(nvJitLinkHandle h, int t, const char* f) {           \
    return kcache::interpose::add_file(KCACHE_REAL(pre##nvJitLinkAddFile##suffix), h, t, f);                       \
  }                                                                                                                \
  KCACHE_EXPORT nvJitLinkResult pre##nvJitLinkComplete##suffix(nvJitLinkHandle h) {                                \
    return kcache::interpose::complete(KCACHE_REAL(pre##nvJitLinkComplete##suffix), h);                            \
  }                                                                                                                \
  KCACHE_NVJITLINK_GETTERS(pre, suffix, GetLinkedCubin, kcache::interpose::cubin, void)                            \
  KCACHE_NVJITLINK_GETTERS(pre, suffix, GetLinkedPtx, kcache::interpose::ptx, char)                                \
  KCACHE_NVJITLINK_GETTERS(pre, suffix, GetInfoLog, kcache::interpose::info_log, char)                             \
  KCACHE_NVJITLINK_GETTERS(pre, suffix, GetErrorLog, kcache::interpose::k_jit_log, char)

// The getters: answered from the recorded result after a hit, else by the real library.
#define KCACHE_NVJITLINK_GETTERS(pre, suffix, Name, which, Out)                                             \
  KCACHE_EXPORT nvJitLinkResult pre##nvJitLink##Name##Size##suffix(nvJitLinkHandle h, std::size_t* s) {     \
    return kcache::interpose::links().replay_or_call(h, which, s, KCACHE_REAL(pre##nvJitLink##Name##Size##suffix), \
                                                     kcache::interpose::k_internal);                        \
  }                                                                                                         \
  KCACHE_EXPORT nvJitLinkResult pre##nvJitLink##Name##suffix(nvJitLinkHandle h, Out* out) {                 \
    return kcache::interpose::links().replay_or_call(h, which, out, KCACHE_REAL(pre##nvJitLink##Name##suffix), \
                                                     kcache::interpose::k_internal);                        \
  }

KCACHE_NVJITLINK_ENTRY_POINTS(, )
#define KCACHE_NVJITLINK_VERSIONED(v) KCACHE_NVJITLINK_ENTRY_POINTS(__, _##v)
KCACHE_NVJITLINK_VERSIONED(12_0)
KCACHE_NVJITLINK_VERSIONED(12_1)
KCACHE_NVJITLINK_VERSIONED(12_2)
KCACHE_NVJITLINK_VERSIONED(12_3)
KCACHE_NVJITLINK_VERSIONED(12_4)
KCACHE_NVJITLINK_VERSIONED(12_5)
KCACHE_NVJITLINK_VERSIONED(12_6)
KCACHE_NVJITLINK_VERSIONED(12_7)
KCACHE_NVJITLINK_VERSIONED(12_8)
KCACHE_NVJITLINK_VERSIONED(12_9)
KCACHE_NVJITLINK_VERSIONED(13_0)
KCACHE_NVJITLINK_VERSIONED(13_1)
KCACHE_NVJITLINK_VERSIONED(13_2)

KCACHE_EXPORT nvJitLinkResult nvJitLinkVersion(unsigned* major, unsigned* minor) {
  return kcache::interpose::call_real(KCACHE_REAL(nvJitLinkVersion), kcache::interpose::k_internal, major, minor);
}
