#include "load/cuda_driver.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

namespace kcache::load {

namespace {

template <class Fn>
bool resolve(void* lib, const char* name, Fn& out) {
  void* sym = ::dlsym(lib, name);
  out = reinterpret_cast<Fn>(sym);
  return sym != nullptr;
}

Result<std::unique_ptr<CudaDriver>> open_driver(const std::string& path) {
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    return make_error(ErrorCode::toolkit_missing,
                      "the CUDA driver (" + path + ") could not be loaded: " + (why != nullptr ? why : "unknown") +
                          "; loading needs an NVIDIA driver and GPU (compiling does not)");
  }
  auto d = std::make_unique<CudaDriver>();
  std::string missing;
  auto need = [&](const char* name, auto& fn) {
    if (!resolve(lib, name, fn)) {
      missing += std::string(missing.empty() ? "" : ", ") + name;
    }
  };
  need("cuInit", d->cuInit);
  need("cuDriverGetVersion", d->cuDriverGetVersion);
  need("cuDeviceGetCount", d->cuDeviceGetCount);
  need("cuDeviceGet", d->cuDeviceGet);
  need("cuDeviceGetAttribute", d->cuDeviceGetAttribute);
  need("cuDeviceGetName", d->cuDeviceGetName);
  need("cuDevicePrimaryCtxRetain", d->cuDevicePrimaryCtxRetain);
  need("cuDevicePrimaryCtxRelease_v2", d->cuDevicePrimaryCtxRelease);
  need("cuCtxSetCurrent", d->cuCtxSetCurrent);
  need("cuCtxSynchronize", d->cuCtxSynchronize);
  need("cuModuleLoadDataEx", d->cuModuleLoadDataEx);
  need("cuModuleUnload", d->cuModuleUnload);
  need("cuModuleGetFunction", d->cuModuleGetFunction);
  need("cuLaunchKernel", d->cuLaunchKernel);
  need("cuMemAlloc_v2", d->cuMemAlloc);
  need("cuMemFree_v2", d->cuMemFree);
  need("cuMemcpyHtoD_v2", d->cuMemcpyHtoD);
  need("cuMemcpyDtoH_v2", d->cuMemcpyDtoH);
  need("cuGetErrorName", d->cuGetErrorName);
  if (!missing.empty()) {
    return make_error(ErrorCode::toolkit_missing, "the CUDA driver " + path + " lacks " + missing + "; it is too old");
  }
  // The handle is kept for the life of the process: modules hold pointers into it.
  return d;
}

}  // namespace

Result<const CudaDriver*> CudaDriver::get(const std::string& path) {
  std::string p = path;
  if (p.empty()) {
    const char* env = std::getenv("KCACHE_LIBCUDA");
    p = env != nullptr && *env != '\0' ? env : "libcuda.so.1";
  }
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<CudaDriver>> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = loaded.find(p); it != loaded.end()) {
    return it->second.get();
  }
  auto d = open_driver(p);
  if (!d) {
    return tl::unexpected(d.error());
  }
  const CudaDriver* out = d->get();
  loaded.emplace(p, std::move(*d));
  return out;
}

std::string CudaDriver::error_name(CUresult r) const {
  const char* name = nullptr;
  if (cuGetErrorName != nullptr && cuGetErrorName(r, &name) == k_cuda_success && name != nullptr) {
    return std::string(name) + " (" + std::to_string(r) + ")";
  }
  return "CUDA error " + std::to_string(r);
}

tl::unexpected<Error> CudaDriver::fail(ErrorCode code, const std::string& what, CUresult r) const {
  return make_error(code, what + ": " + error_name(r));
}

}  // namespace kcache::load
