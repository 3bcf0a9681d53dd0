// compile/toolkit_api.hpp: the entry points kcache resolves from each CUDA
// compiler library (private). Types are declared here, not taken from CUDA
// headers, so kcache builds without CUDA; they match the C ABI of NVRTC 12/13,
// nvJitLink 12/13 and libNVVM 2.x.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kcache/error.hpp"

namespace kcache::jit {

using NvrtcProgramHandle = void*;
using NvJitLinkHandle = void*;
using NvvmProgramHandle = void*;

struct NvrtcApi {
  int (*version)(int*, int*) = nullptr;
  const char* (*get_error_string)(int) = nullptr;
  int (*create_program)(NvrtcProgramHandle*, const char*, const char*, int, const char* const*,
                        const char* const*) = nullptr;
  int (*destroy_program)(NvrtcProgramHandle*) = nullptr;
  int (*compile_program)(NvrtcProgramHandle, int, const char* const*) = nullptr;
  int (*get_ptx_size)(NvrtcProgramHandle, std::size_t*) = nullptr;
  int (*get_ptx)(NvrtcProgramHandle, char*) = nullptr;
  int (*get_cubin_size)(NvrtcProgramHandle, std::size_t*) = nullptr;
  int (*get_cubin)(NvrtcProgramHandle, char*) = nullptr;
  int (*get_ltoir_size)(NvrtcProgramHandle, std::size_t*) = nullptr;
  int (*get_ltoir)(NvrtcProgramHandle, char*) = nullptr;
  int (*get_log_size)(NvrtcProgramHandle, std::size_t*) = nullptr;
  int (*get_log)(NvrtcProgramHandle, char*) = nullptr;
  int (*add_name_expression)(NvrtcProgramHandle, const char*) = nullptr;
  int (*get_lowered_name)(NvrtcProgramHandle, const char*, const char**) = nullptr;
};

// nvJitLink input kinds (nvJitLinkInputType).
enum class NvJitLinkInput : int { cubin = 1, ptx = 2, ltoir = 3, fatbin = 4, object = 5, library = 6 };

struct NvJitLinkApi {
  int (*version)(unsigned*, unsigned*) = nullptr;
  int (*create)(NvJitLinkHandle*, std::uint32_t, const char**) = nullptr;
  int (*destroy)(NvJitLinkHandle*) = nullptr;
  int (*add_data)(NvJitLinkHandle, int, const void*, std::size_t, const char*) = nullptr;
  int (*complete)(NvJitLinkHandle) = nullptr;
  int (*get_cubin_size)(NvJitLinkHandle, std::size_t*) = nullptr;
  int (*get_cubin)(NvJitLinkHandle, void*) = nullptr;
  int (*get_ptx_size)(NvJitLinkHandle, std::size_t*) = nullptr;
  int (*get_ptx)(NvJitLinkHandle, char*) = nullptr;
  int (*get_error_log_size)(NvJitLinkHandle, std::size_t*) = nullptr;
  int (*get_error_log)(NvJitLinkHandle, char*) = nullptr;
  int (*get_info_log_size)(NvJitLinkHandle, std::size_t*) = nullptr;
  int (*get_info_log)(NvJitLinkHandle, char*) = nullptr;
};

struct NvvmApi {
  int (*version)(int*, int*) = nullptr;
  int (*ir_version)(int*, int*, int*, int*) = nullptr;
  const char* (*get_error_string)(int) = nullptr;
  int (*create_program)(NvvmProgramHandle*) = nullptr;
  int (*destroy_program)(NvvmProgramHandle*) = nullptr;
  int (*add_module)(NvvmProgramHandle, const char*, std::size_t, const char*) = nullptr;
  int (*compile_program)(NvvmProgramHandle, int, const char**) = nullptr;
  int (*get_result_size)(NvvmProgramHandle, std::size_t*) = nullptr;
  int (*get_result)(NvvmProgramHandle, char*) = nullptr;
  int (*get_log_size)(NvvmProgramHandle, std::size_t*) = nullptr;
  int (*get_log)(NvvmProgramHandle, char*) = nullptr;
};

// Load the library on first use (thread-safe, once per process) and return its
// table. toolkit_missing when it cannot be found, loaded or an entry point is absent.
Result<const NvrtcApi*> nvrtc_api();
Result<const NvJitLinkApi*> nvjitlink_api();
Result<const NvvmApi*> nvvm_api();

}  // namespace kcache::jit
