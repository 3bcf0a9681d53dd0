// Host fingerprint: parsing the --host syntax and probing this machine. This
// file is the only place in kcache that asks the machine what it is.
#include "kcache/host_fingerprint.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

namespace kcache {

namespace {

struct DlCloser {
  void operator()(void* handle) const noexcept {
    if (handle != nullptr) {
      ::dlclose(handle);
    }
  }
};
using DlHandle = std::unique_ptr<void, DlCloser>;

DlHandle open_first(const std::vector<std::string>& names, int extra_flags = 0) {
  for (const auto& name : names) {
    if (void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | extra_flags)) {
      return DlHandle(h);
    }
  }
  return DlHandle();
}

template <class Fn>
Fn symbol(const DlHandle& lib, const char* name) {
  // dlsym returns a data pointer; POSIX guarantees the conversion works.
  return reinterpret_cast<Fn>(::dlsym(lib.get(), name));
}

bool valid_value(std::string_view v) {
  if (v == "na") {
    return true;
  }
  if (v.empty() || v.size() > 32) {
    return false;
  }
  std::size_t i = 0;
  while (i < v.size() && ((v[i] >= '0' && v[i] <= '9') || v[i] == '.')) {
    ++i;
  }
  if (i == 0) {
    return false;
  }
  return i == v.size() || (i + 1 == v.size() && v[i] >= 'a' && v[i] <= 'z');
}

std::string read_small_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return {};
  }
  std::string text(4096, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

// Driver version and SM of device 0 through NVML (desktop and server GPUs).
void probe_nvml(HostFingerprint& host) {
  DlHandle lib = open_first({"libnvidia-ml.so.1", "libnvidia-ml.so"});
  if (!lib) {
    return;
  }
  using InitFn = int (*)();
  using DriverFn = int (*)(char*, unsigned);
  using HandleFn = int (*)(unsigned, void**);
  using CapFn = int (*)(void*, int*, int*);
  auto init = symbol<InitFn>(lib, "nvmlInit_v2");
  auto shutdown = symbol<InitFn>(lib, "nvmlShutdown");
  auto driver = symbol<DriverFn>(lib, "nvmlSystemGetDriverVersion");
  auto handle = symbol<HandleFn>(lib, "nvmlDeviceGetHandleByIndex_v2");
  auto cap = symbol<CapFn>(lib, "nvmlDeviceGetCudaComputeCapability");
  if (init == nullptr || init() != 0) {
    return;
  }
  char buf[96] = {};
  if (driver != nullptr && driver(buf, sizeof buf) == 0 && valid_value(buf)) {
    host.driver = buf;
  }
  void* dev = nullptr;
  int major = 0;
  int minor = 0;
  if (handle != nullptr && cap != nullptr && handle(0, &dev) == 0 && cap(dev, &major, &minor) == 0 && major > 0) {
    host.sm = std::to_string(major) + std::to_string(minor);
  }
  if (shutdown != nullptr) {
    shutdown();
  }
}

// SM of device 0 and the driver's CUDA version through the driver API (Jetson has no NVML).
void probe_libcuda(HostFingerprint& host) {
  DlHandle lib = open_first({"libcuda.so.1", "libcuda.so"});
  if (!lib) {
    return;
  }
  using InitFn = int (*)(unsigned);
  using VersionFn = int (*)(int*);
  using CountFn = int (*)(int*);
  using DeviceFn = int (*)(int*, int);
  using AttrFn = int (*)(int*, int, int);
  auto init = symbol<InitFn>(lib, "cuInit");
  auto version = symbol<VersionFn>(lib, "cuDriverGetVersion");
  auto count = symbol<CountFn>(lib, "cuDeviceGetCount");
  auto get = symbol<DeviceFn>(lib, "cuDeviceGet");
  auto attr = symbol<AttrFn>(lib, "cuDeviceGetAttribute");
  if (init == nullptr || init(0) != 0) {
    return;
  }
  int v = 0;
  if (host.driver == "na" && version != nullptr && version(&v) == 0 && v > 0) {
    host.driver = std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
  }
  int n = 0;
  int dev = 0;
  int major = 0;
  int minor = 0;
  constexpr int k_attr_major = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
  constexpr int k_attr_minor = 76;
  if (host.sm == "na" && count != nullptr && get != nullptr && attr != nullptr && count(&n) == 0 && n > 0 &&
      get(&dev, 0) == 0 && attr(&major, k_attr_major, dev) == 0 && attr(&minor, k_attr_minor, dev) == 0 &&
      major > 0) {
    host.sm = std::to_string(major) + std::to_string(minor);
  }
}

// Toolkit version: ask the loaded NVRTC, else read version.json under the CUDA home.
void probe_toolkit(HostFingerprint& host, const std::filesystem::path& cuda_home) {
  DlHandle lib = open_first({(cuda_home / "lib64" / "libnvrtc.so").string(), (cuda_home / "lib" / "libnvrtc.so").string(),
                             "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"},
                           // NVRTC stays mapped: the JIT path loads it again anyway, and
                           // unloading it would drop the memory its static initialisers took.
                           RTLD_NODELETE);
  if (lib) {
    using VersionFn = int (*)(int*, int*);
    if (auto fn = symbol<VersionFn>(lib, "nvrtcVersion")) {
      int major = 0;
      int minor = 0;
      if (fn(&major, &minor) == 0 && major > 0) {
        host.cuda = std::to_string(major) + "." + std::to_string(minor);
        return;
      }
    }
  }
  const std::string text = read_small_file(cuda_home / "version.json");
  if (text.empty()) {
    return;
  }
  const auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_object() && doc.contains("cuda") && doc["cuda"].is_object() && doc["cuda"].contains("version") &&
      doc["cuda"]["version"].is_string()) {
    const std::string v = doc["cuda"]["version"].get<std::string>();
    const std::size_t first = v.find('.');
    const std::size_t second = first == std::string::npos ? first : v.find('.', first + 1);
    const std::string mm = v.substr(0, second);
    if (valid_value(mm)) {
      host.cuda = mm;
    }
  }
}

void probe_tensorrt(HostFingerprint& host) {
  DlHandle lib = open_first({"libnvinfer.so.10", "libnvinfer.so.8", "libnvinfer.so"});
  if (!lib) {
    return;
  }
  using VersionFn = int (*)();
  auto fn = symbol<VersionFn>(lib, "getInferLibVersion");
  if (fn == nullptr) {
    return;
  }
  const int v = fn();
  if (v >= 10000) {  // TensorRT 10+: MMmmpp
    host.trt = std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
  } else if (v > 0) {  // TensorRT 8: Mmpp
    host.trt = std::to_string(v / 1000) + "." + std::to_string((v / 100) % 10) + "." + std::to_string(v % 100);
  }
}

}  // namespace

std::string HostFingerprint::to_string() const {
  return "sm=" + sm + ",driver=" + driver + ",cuda=" + cuda + ",trt=" + trt + ",jp=" + jetpack;
}

Result<HostFingerprint> HostFingerprint::parse(std::string_view spec) {
  HostFingerprint host;
  std::size_t start = 0;
  while (start <= spec.size()) {
    std::size_t end = spec.find(',', start);
    if (end == std::string_view::npos) {
      end = spec.size();
    }
    const std::string_view pair = spec.substr(start, end - start);
    const std::size_t eq = pair.find('=');
    const std::string_view field = pair.substr(0, eq);
    std::string value(eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1));
    if (eq == std::string_view::npos || !valid_value(value)) {
      return make_error(ErrorCode::invalid_argument,
                        "bad host pair '" + std::string(pair) +
                            "'; write field=value with fields sm, driver, cuda, trt, jp and values like 87, 6.2 or na "
                            "(e.g. --host sm=87,jp=6.2,trt=10.3)");
    }
    if (field == "sm") {
      value.erase(std::remove(value.begin(), value.end(), '.'), value.end());
      host.sm = value;
    } else if (field == "driver") {
      host.driver = value;
    } else if (field == "cuda") {
      host.cuda = value;
    } else if (field == "trt") {
      host.trt = value;
    } else if (field == "jp") {
      host.jetpack = value;
    } else {
      return make_error(ErrorCode::invalid_argument,
                        "unknown host field '" + std::string(field) + "'; use sm, driver, cuda, trt or jp");
    }
    start = end + 1;
  }
  return host;
}

std::string jetpack_from_tegra_release(std::string_view text) {
  // "# R36 (release), REVISION: 4.3, GCID: ..." -> L4T 36.4.3.
  const std::size_t r = text.find("# R");
  const std::size_t rev = text.find("REVISION:");
  if (r == std::string_view::npos || rev == std::string_view::npos) {
    return "na";
  }
  const int major = std::atoi(std::string(text.substr(r + 3, 4)).c_str());
  std::istringstream revs(std::string(text.substr(rev + 9, 16)));
  int minor = 0;
  char dot = 0;
  int patch = 0;
  revs >> minor >> dot >> patch;
  struct Row {
    int major, minor, patch;
    const char* jetpack;
  };
  // L4T release -> JetPack, newest first; a release maps to the first row it reaches.
  static constexpr Row k_table[] = {
      {38, 2, 0, "7.1"}, {38, 0, 0, "7.0"}, {36, 4, 3, "6.2"}, {36, 4, 0, "6.1"}, {36, 3, 0, "6.0"},
      {36, 2, 0, "6.0"}, {35, 6, 0, "5.1.4"}, {35, 5, 0, "5.1.3"}, {35, 4, 0, "5.1.2"}, {35, 3, 0, "5.1.1"},
      {35, 2, 0, "5.1"}, {35, 1, 0, "5.0.2"}, {32, 7, 0, "4.6.1"}, {32, 6, 0, "4.6"}, {32, 5, 0, "4.5"},
  };
  for (const Row& row : k_table) {
    if (major == row.major && (minor > row.minor || (minor == row.minor && patch >= row.patch))) {
      return row.jetpack;
    }
  }
  return "na";
}

std::filesystem::path resolve_cuda_home(const std::filesystem::path& cuda_home) {
  if (!cuda_home.empty()) {
    return cuda_home;
  }
  for (const char* var : {"KCACHE_CUDA_HOME", "CUDA_HOME"}) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') {
      return v;
    }
  }
  return "/usr/local/cuda";
}

HostFingerprint probe_host(const HostProbeOptions& options) {
  HostFingerprint host;
  probe_nvml(host);
  probe_libcuda(host);
  probe_toolkit(host, resolve_cuda_home(options.cuda_home));
  probe_tensorrt(host);
  const auto tegra = options.tegra_release.empty() ? std::filesystem::path("/etc/nv_tegra_release") : options.tegra_release;
  const std::string text = read_small_file(tegra);
  if (!text.empty()) {
    host.jetpack = jetpack_from_tegra_release(text);
  }
  return host;
}

}  // namespace kcache
