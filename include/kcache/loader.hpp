// kcache/loader.hpp: turns a verified artifact into a live CUDA module.
//
// The only part of kcache that needs a GPU. The driver (libcuda.so.1) is
// loaded with dlopen on first use, so kcache builds and runs without it.
// load() checks the passport and the payload first (check_loadable in
// arch_compat.hpp: format, kind, size and SHA-256, cubin ELF header / PTX
// directives, arch compatibility with the device, PTX ISA vs driver) and only
// then calls the driver (cuModuleLoadDataEx). Kernels are found by name or by
// name expression through the passport's symbol map, so a kernel compiled in
// another process ("add<int>") is found after a cache hit (docs/loading.md).
//
// Thread-safety: a Loader may be used from several threads (each call makes
// the device's primary context current on the calling thread). Modules and
// buffers must be destroyed before their Loader.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "kcache/arch_compat.hpp"
#include "kcache/artifact.hpp"
#include "kcache/error.hpp"

namespace kcache {

struct LoaderOptions {
  int device = 0;       // device ordinal
  std::string libcuda;  // driver library; empty: $KCACHE_LIBCUDA, else libcuda.so.1
};

class Loader;

// A kernel of a loaded module.
class Kernel {
 public:
  const std::string& lowered_name() const noexcept { return m_name; }
  void* handle() const noexcept { return m_handle; }

 private:
  friend class Module;
  Kernel(void* handle, std::string name) : m_handle(handle), m_name(std::move(name)) {}
  void* m_handle = nullptr;  // CUfunction, owned by the module
  std::string m_name;
};

// A loaded module; unloaded on destruction. Move-only.
class Module {
 public:
  Module() = default;
  ~Module();
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Finds a kernel by name expression (looked up in the symbol map: "add<int>"
  // -> "_Z3addIiEvPT_") or by its lowered/extern "C" name. not_found naming
  // the kernel and the known name expressions when there is none.
  Result<Kernel> kernel(std::string_view name_or_expression) const;

  // The artifact's symbol map (name expression -> lowered name).
  const std::map<std::string, std::string>& symbols() const noexcept { return m_symbols; }

 private:
  friend class Loader;
  const void* m_driver = nullptr;  // load::CudaDriver, process lifetime
  void* m_context = nullptr;       // CUcontext (primary, retained by the Loader)
  void* m_module = nullptr;        // CUmodule
  std::map<std::string, std::string> m_symbols;
  void reset() noexcept;
};

// Device memory; freed on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  Result<void> upload(const void* data, std::size_t bytes);
  Result<void> download(void* data, std::size_t bytes) const;
  std::size_t size() const noexcept { return m_size; }
  // The device address, to pass as a kernel argument (take its address).
  unsigned long long& address() noexcept { return m_ptr; }

 private:
  friend class Loader;
  const void* m_driver = nullptr;
  void* m_context = nullptr;
  unsigned long long m_ptr = 0;
  std::size_t m_size = 0;
  void reset() noexcept;
};

struct LaunchConfig {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1, block_y = 1, block_z = 1;
  unsigned shared_bytes = 0;
};

class Loader {
 public:
  // Loads the driver, initialises it and retains the primary context of
  // `options.device`. Failure: toolkit_missing when libcuda cannot be loaded
  // (no driver), unsupported when the driver finds no usable GPU (or is a
  // stub), invalid_argument for an ordinal out of range.
  static Result<std::unique_ptr<Loader>> open(const LoaderOptions& options = {});
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  const DeviceInfo& device() const noexcept;

  // Checks `artifact` (check_loadable) and loads it. Failure: corrupt or
  // unsupported from the checks (the driver is not called), else the
  // driver's error with its JIT log (`Error::log`) for PTX.
  Result<Module> load(const Artifact& artifact);

  // How many times load() called the driver (checks that failed don't count).
  std::uint64_t driver_loads() const noexcept;

  Result<DeviceBuffer> allocate(std::size_t bytes);
  // Launches `kernel` with `args` (an array of pointers to each argument) and
  // waits for it to finish.
  Result<void> launch_and_wait(const Kernel& kernel, const LaunchConfig& config, void** args);

 private:
  struct Impl;
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache
