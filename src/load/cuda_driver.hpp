// load/cuda_driver.hpp: the CUDA driver API entry points kcache uses,
// resolved with dlopen/dlsym from libcuda.so.1 (private).
//
// kcache builds without CUDA headers: the few types are declared here with
// the driver's ABI (handles are pointers, CUdevice is int, CUdeviceptr is
// 64-bit, CUresult is int).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kcache/error.hpp"

namespace kcache::load {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUdeviceptr = unsigned long long;

inline constexpr CUresult k_cuda_success = 0;
inline constexpr CUresult k_cuda_error_stub_library = 34;
inline constexpr CUresult k_cuda_error_no_device = 100;
inline constexpr int k_attr_cc_major = 75;
inline constexpr int k_attr_cc_minor = 76;
inline constexpr int k_jit_error_log_buffer = 5;
inline constexpr int k_jit_error_log_buffer_size = 6;

struct CudaDriver {
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned, int*, void**) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, std::size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, std::size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, std::size_t) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;

  // Loads the driver library once per process and path (never unloaded).
  // `path` empty: $KCACHE_LIBCUDA, else "libcuda.so.1" through the loader
  // path. toolkit_missing with the dlerror text when it cannot be loaded or
  // lacks an entry point.
  static Result<const CudaDriver*> get(const std::string& path = {});

  // "CUDA_ERROR_NO_DEVICE (100)".
  std::string error_name(CUresult r) const;
  // An error for a failed call: "<what>: <name>".
  tl::unexpected<Error> fail(ErrorCode code, const std::string& what, CUresult r) const;
};

}  // namespace kcache::load
