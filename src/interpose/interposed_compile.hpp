// interpose/interposed_compile.hpp: one compile call of a JIT library, through
// the cache (the part the NVRTC, nvJitLink and NVVM stand-ins share).
//
// serve(): derives kcache's key of `request` (derive_key: the fields of the
// `kcache compile` / `kcache link` key) with `target_kind` replaced by the
// entry kind and the real library's version and build-id added; looks it up
// through the session's single-flight Cache; on a hit returns the recorded
// result without calling the real library; on a miss calls `compile`, which
// runs the real compile on the program's own handle and records what its
// getters return, and stores the record when the compile succeeded (or NVRTC
// rejected the program: that failure is stored and replayed as such,
// docs/run.md "Failed compiles") and the inputs did not change meanwhile.
// Where the key leaves the program name's directory out by evidence, the
// record is stored only when `probe` under another directory gives the same
// result (the log with the names swapped); else it is not stored and the next
// key holds the directory. Anything kcache cannot do (no session, no
// key, a failed lookup, an entry that does not decode) ends in one call of
// `real` (the real compile alone), with one warning per process where
// something failed.
//
// Thread-safety: thread-safe (calls for distinct handles may run at once).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "interpose/jit_result.hpp"
#include "interpose/real_library.hpp"
#include "kcache/compile_request.hpp"

namespace kcache::interpose {

struct InterposedCall {
  Jit jit = Jit::nvrtc;
  std::string entry_kind;        // "nvrtc-result", "nvjitlink-result", "nvvm-result"
  std::string version;           // the real library's run-time version
  CompileRequest request;        // what the key is derived from (target_kind: any the backend accepts)
  bool keyable = true;           // false: forwarded uncached (an input kcache cannot see)
  std::function<JitResult()> compile;  // the real compile, recorded
  std::function<int()> real;           // the real compile alone
  // The real compile of the same program under another program name, on a
  // handle of its own, recorded (NVRTC only; empty: none). An evidence key
  // (compile/name_evidence.hpp) is stored only when it gives what `compile` gave.
  std::function<std::optional<JitResult>(const std::string& name)> probe;
};

struct ServedCall {
  int rc = 0;
  // Set when the result came from the cache: the getters replay it.
  std::shared_ptr<const JitResult> served;
};

ServedCall serve(const InterposedCall& call);

// The `count` C strings at `strings` (a call's options), copied. std::nullopt
// when kcache cannot key them: a negative count, a null array with a positive
// count, or a null string.
std::optional<std::vector<std::string>> copy_c_strings(std::int64_t count, const char* const* strings);

// A compile call of `jit` for a program of `backend` ("nvrtc", "nvjitlink",
// "nvvm"), recorded as entries of kind `entry_kind`, keyed with the real
// library's run-time `version`; `real` runs the real compile alone. The
// caller fills in the rest of the request, `keyable` and `compile`.
InterposedCall start_call(Jit jit, std::string entry_kind, std::string version, std::string backend,
                          std::function<int()> real);

// Copies the `count` options at `options` (a C API's `const char**`) into
// `out`. False, `out` untouched, when kcache cannot key them (copy_c_strings()):
// the call is then forwarded uncached.
bool copy_options(std::vector<std::string>& out, std::int64_t count, const char* const* options);

// Takes what `call` needs from a program's stand-in state `state` (a
// HandleTable state: mutex, keyable, served): under the state's lock, forgets
// the result last served for it (the getters answer from the real library
// again until this call is served), sets `call.keyable` from the state's, and
// runs `fill()` to copy the request's parts.
template <class State, class Fill>
void take_program(InterposedCall& call, State& state, Fill&& fill) {
  std::lock_guard lock(state.mutex);
  state.served.reset();
  call.keyable = state.keyable;
  fill();
}

// serve(), keeping a served result in `state` (a HandleTable state) for the
// getters to replay. Returns the code the compile call returns.
template <class State>
int serve_into(const InterposedCall& call, State& state) {
  ServedCall served = serve(call);
  if (served.served) {
    std::lock_guard lock(state.mutex);
    state.served = std::move(served.served);
  }
  return served.rc;
}

}  // namespace kcache::interpose
