// Loader, Module and DeviceBuffer over the dlopen'ed driver (load/cuda_driver.hpp).
#include "kcache/loader.hpp"

#include <atomic>

#include "load/cuda_driver.hpp"

namespace kcache {

using load::CudaDriver;
using load::k_cuda_success;

namespace {

const CudaDriver* drv(const void* p) { return static_cast<const CudaDriver*>(p); }
load::CUcontext ctx(void* p) { return static_cast<load::CUcontext>(p); }

}  // namespace

struct Loader::Impl {
  const CudaDriver* driver = nullptr;
  load::CUdevice device = 0;
  load::CUcontext context = nullptr;
  DeviceInfo info;
  std::atomic<std::uint64_t> driver_loads{0};
};

Loader::Loader(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}

Loader::~Loader() {
  if (m_impl && m_impl->context != nullptr) {
    m_impl->driver->cuDevicePrimaryCtxRelease(m_impl->device);
  }
}

Result<std::unique_ptr<Loader>> Loader::open(const LoaderOptions& options) {
  auto d = CudaDriver::get(options.libcuda);
  if (!d) {
    return tl::unexpected(d.error());
  }
  const CudaDriver& cu = **d;
  if (const auto r = cu.cuInit(0); r != k_cuda_success) {
    if (r == load::k_cuda_error_stub_library) {
      return make_error(ErrorCode::unsupported,
                        "the CUDA driver library found is a stub (no NVIDIA driver installed); loading needs a GPU");
    }
    return cu.fail(r == load::k_cuda_error_no_device ? ErrorCode::unsupported : ErrorCode::io,
                   "cuInit: no usable CUDA device", r);
  }
  int count = 0;
  if (const auto r = cu.cuDeviceGetCount(&count); r != k_cuda_success || count == 0) {
    return make_error(ErrorCode::unsupported, "no CUDA device found");
  }
  if (options.device < 0 || options.device >= count) {
    return make_error(ErrorCode::invalid_argument, "device " + std::to_string(options.device) +
                                                       " does not exist (" + std::to_string(count) + " found)");
  }
  auto impl = std::make_unique<Impl>();
  impl->driver = &cu;
  if (const auto r = cu.cuDeviceGet(&impl->device, options.device); r != k_cuda_success) {
    return cu.fail(ErrorCode::io, "cuDeviceGet", r);
  }
  DeviceInfo& info = impl->info;
  info.ordinal = options.device;
  cu.cuDeviceGetAttribute(&info.cc_major, load::k_attr_cc_major, impl->device);
  cu.cuDeviceGetAttribute(&info.cc_minor, load::k_attr_cc_minor, impl->device);
  cu.cuDriverGetVersion(&info.driver_version);
  char name[256] = {};
  if (cu.cuDeviceGetName(name, sizeof name - 1, impl->device) == k_cuda_success) {
    info.name = name;
  }
  if (const auto r = cu.cuDevicePrimaryCtxRetain(&impl->context, impl->device); r != k_cuda_success) {
    return cu.fail(ErrorCode::io, "cuDevicePrimaryCtxRetain", r);
  }
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

const DeviceInfo& Loader::device() const noexcept { return m_impl->info; }

std::uint64_t Loader::driver_loads() const noexcept { return m_impl->driver_loads; }

Result<Module> Loader::load(const Artifact& artifact) {
  if (auto ok = check_loadable(artifact, m_impl->info); !ok) {
    return tl::unexpected(ok.error());
  }
  const CudaDriver& cu = *m_impl->driver;
  cu.cuCtxSetCurrent(m_impl->context);
  // The driver reads PTX as a NUL-terminated string; the payload string has one.
  std::string log(16384, '\0');
  int opts[] = {load::k_jit_error_log_buffer, load::k_jit_error_log_buffer_size};
  void* vals[] = {log.data(), reinterpret_cast<void*>(static_cast<std::uintptr_t>(log.size()))};
  load::CUmodule mod = nullptr;
  m_impl->driver_loads++;
  const auto r = cu.cuModuleLoadDataEx(&mod, artifact.payload.c_str(), 2, opts, vals);
  if (r != k_cuda_success) {
    log.resize(log.find('\0'));
    auto e = cu.fail(ErrorCode::unsupported, "the driver refused the " + artifact.passport.kind + " for " +
                                                 (artifact.passport.target.arch.empty() ? "?" : artifact.passport.target.arch),
                     r);
    e.value().log = log;
    return e;
  }
  Module m;
  m.m_driver = &cu;
  m.m_context = m_impl->context;
  m.m_module = mod;
  m.m_symbols = artifact.passport.symbols;
  return m;
}

Result<DeviceBuffer> Loader::allocate(std::size_t bytes) {
  const CudaDriver& cu = *m_impl->driver;
  cu.cuCtxSetCurrent(m_impl->context);
  DeviceBuffer b;
  if (const auto r = cu.cuMemAlloc(&b.m_ptr, bytes); r != k_cuda_success) {
    return cu.fail(ErrorCode::no_space, "cuMemAlloc of " + std::to_string(bytes) + " bytes", r);
  }
  b.m_driver = &cu;
  b.m_context = m_impl->context;
  b.m_size = bytes;
  return b;
}

Result<void> Loader::launch_and_wait(const Kernel& kernel, const LaunchConfig& c, void** args) {
  const CudaDriver& cu = *m_impl->driver;
  cu.cuCtxSetCurrent(m_impl->context);
  if (const auto r = cu.cuLaunchKernel(static_cast<load::CUfunction>(kernel.handle()), c.grid_x, c.grid_y, c.grid_z,
                                       c.block_x, c.block_y, c.block_z, c.shared_bytes, nullptr, args, nullptr);
      r != k_cuda_success) {
    return cu.fail(ErrorCode::io, "cuLaunchKernel " + kernel.lowered_name(), r);
  }
  if (const auto r = cu.cuCtxSynchronize(); r != k_cuda_success) {
    return cu.fail(ErrorCode::io, "kernel " + kernel.lowered_name(), r);
  }
  return {};
}

// Module

Module::~Module() { reset(); }

Module::Module(Module&& o) noexcept
    : m_driver(o.m_driver), m_context(o.m_context), m_module(o.m_module), m_symbols(std::move(o.m_symbols)) {
  o.m_module = nullptr;
}

Module& Module::operator=(Module&& o) noexcept {
  if (this != &o) {
    reset();
    m_driver = o.m_driver;
    m_context = o.m_context;
    m_module = o.m_module;
    m_symbols = std::move(o.m_symbols);
    o.m_module = nullptr;
  }
  return *this;
}

void Module::reset() noexcept {
  if (m_module != nullptr) {
    drv(m_driver)->cuCtxSetCurrent(ctx(m_context));
    drv(m_driver)->cuModuleUnload(static_cast<load::CUmodule>(m_module));
    m_module = nullptr;
  }
}

Result<Kernel> Module::kernel(std::string_view name_or_expression) const {
  if (m_module == nullptr) {
    return make_error(ErrorCode::invalid_argument, "module is not loaded");
  }
  std::string name(name_or_expression);
  if (auto it = m_symbols.find(name); it != m_symbols.end()) {
    name = it->second;
  }
  const CudaDriver& cu = *drv(m_driver);
  cu.cuCtxSetCurrent(ctx(m_context));
  load::CUfunction f = nullptr;
  if (const auto r = cu.cuModuleGetFunction(&f, static_cast<load::CUmodule>(m_module), name.c_str());
      r != k_cuda_success) {
    std::string known;
    for (const auto& [expr, lowered] : m_symbols) {
      known += (known.empty() ? "" : ", ") + expr;
    }
    return make_error(ErrorCode::not_found, "no kernel '" + std::string(name_or_expression) + "' in the module (" +
                                                cu.error_name(r) + "); name expressions known: " +
                                                (known.empty() ? "none" : known));
  }
  return Kernel(f, name);
}

// DeviceBuffer

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : m_driver(o.m_driver), m_context(o.m_context), m_ptr(o.m_ptr), m_size(o.m_size) {
  o.m_ptr = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    m_driver = o.m_driver;
    m_context = o.m_context;
    m_ptr = o.m_ptr;
    m_size = o.m_size;
    o.m_ptr = 0;
  }
  return *this;
}

void DeviceBuffer::reset() noexcept {
  if (m_ptr != 0) {
    drv(m_driver)->cuCtxSetCurrent(ctx(m_context));
    drv(m_driver)->cuMemFree(m_ptr);
    m_ptr = 0;
  }
}

Result<void> DeviceBuffer::upload(const void* data, std::size_t bytes) {
  if (bytes > m_size) {
    return make_error(ErrorCode::invalid_argument, "upload larger than the buffer");
  }
  drv(m_driver)->cuCtxSetCurrent(ctx(m_context));
  if (const auto r = drv(m_driver)->cuMemcpyHtoD(m_ptr, data, bytes); r != k_cuda_success) {
    return drv(m_driver)->fail(ErrorCode::io, "cuMemcpyHtoD", r);
  }
  return {};
}

Result<void> DeviceBuffer::download(void* data, std::size_t bytes) const {
  if (bytes > m_size) {
    return make_error(ErrorCode::invalid_argument, "download larger than the buffer");
  }
  drv(m_driver)->cuCtxSetCurrent(ctx(m_context));
  if (const auto r = drv(m_driver)->cuMemcpyDtoH(data, m_ptr, bytes); r != k_cuda_success) {
    return drv(m_driver)->fail(ErrorCode::io, "cuMemcpyDtoH", r);
  }
  return {};
}

}  // namespace kcache
