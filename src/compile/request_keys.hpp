// compile/request_keys.hpp: the key of each request kind (private).
//
// derive() checks a request's target, canonicalises its options, asks the
// loaded library its identity and keys the request for its backend (the
// fields are docs/keys.md's):
//   - NVRTC: the library and toolkit headers, the program name (its directory
//     only where it can reach the output), the working directory where NVRTC
//     writes it, the source, options, in-memory and disk headers (what the
//     request depends on: deps/dependencies.hpp), name expressions and the
//     extra digest; paths relative to base_dir where that is sound
//     (deps/base_dir.hpp);
//   - nvJitLink: the library, target, name, options and each input's bytes;
//   - libNVVM: the library and IR versions, target, name, source, options and
//     each module's bytes.
// compile/compiler.cpp remembers derivations, looks their keys up and runs
// the backends.
//
// Thread-safety: derive() is thread-safe.
#pragma once

#include "deps/derivation.hpp"
#include "kcache/compile_request.hpp"
#include "kcache/error.hpp"

namespace kcache::jit {

// When a derivation's disk identities are checked: before it is returned, or
// by the caller later (compile(): once, after the lookup on a hit and after
// the compile on a miss, instead of before and after).
enum class Checks { now, deferred };

// The derivation of `r` for its backend (`nvrtc`, `nvjitlink` or `nvvm`).
// Fails with invalid_argument for a bad target, option or backend, and as the
// toolkit does when the library cannot be loaded or the headers fingerprint
// cannot be made.
Result<Derivation> derive(const CompileRequest& r, Checks checks);

// What a compile without a cache needs and nothing more: the backend's checked
// options (the list derive() keys and a cached compile hands the backend), the
// arch, the library and its version, and a key that names only the backend
// and the library's identity (the caller makes it unique). No header is
// scanned or re-checked, no input hashed, no memo read. Fails as derive()
// does for a bad target, option or backend, or a library that cannot load.
Result<Derivation> derive_unkeyed(const CompileRequest& r);

}  // namespace kcache::jit
