// interpose/deepbind_patch.hpp: catching JIT calls of objects loaded with
// RTLD_DEEPBIND.
//
// An object opened with RTLD_DEEPBIND (a plugin linked with -lnvrtc) looks
// its symbols up in its own dependencies before the global scope, so its
// calls to nvrtc* reach the real library even though the stand-in is
// preloaded. After such a dlopen, bind_loaded_objects() walks every loaded
// object (except the stand-in and the JIT libraries themselves) and points
// each GOT slot (JUMP_SLOT and GLOB_DAT relocations) that names a function
// the stand-in exports at the stand-in's function. A slot in a RELRO page is
// made writable for the write and read-only again.
//
// Supported on x86-64 and AArch64 (RELA relocations); elsewhere it does
// nothing (docs/run.md, "Limits").
//
// Thread-safety: serialised internally; call after the dlopen returned.
#pragma once

namespace kcache::interpose {

void bind_loaded_objects() noexcept;

}  // namespace kcache::interpose
