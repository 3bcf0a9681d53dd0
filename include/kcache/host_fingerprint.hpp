// kcache/host_fingerprint.hpp: what a plan artifact is built for.
//
// A host fingerprint holds the GPU's SM, the driver, CUDA toolkit, TensorRT
// and JetPack versions. Every component may be absent, spelled "na". It is
// either probed (probe(), the one place in kcache that asks the machine) or
// given explicitly (parse(), the `--host` syntax):
//
//   host-spec := pair ("," pair)*
//   pair      := field "=" value
//   field     := "sm" | "driver" | "cuda" | "trt" | "jp"
//   value     := [0-9.]+ [a-z]?  |  "na"          sm: "87", "8.7", "90a"
//
// The orchestrator takes a fingerprint as input; it never probes by itself.
//
// Thread-safety: a value; probe() is thread-safe.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "kcache/error.hpp"

namespace kcache {

struct HostFingerprint {
  std::string sm = "na";       // compute capability without a dot: "87", "90a"
  std::string driver = "na";   // driver version: "580.65" (NVML) or "13.0" (CUDA driver API)
  std::string cuda = "na";     // toolkit version: "13.0"
  std::string trt = "na";      // TensorRT version: "10.3.0"
  std::string jetpack = "na";  // JetPack version: "6.2"

  // "sm=87,driver=na,cuda=13.0,trt=10.3.0,jp=6.2": the canonical text, also
  // what parse() accepts and what goes into passports as `target.host`.
  std::string to_string() const;

  // Parses the host-spec grammar above; omitted fields are "na". Returns
  // invalid_argument naming the bad pair and the accepted fields.
  static Result<HostFingerprint> parse(std::string_view spec);

  friend bool operator==(const HostFingerprint&, const HostFingerprint&) = default;
};

// Where probe() looks. Empty members mean the defaults.
struct HostProbeOptions {
  std::filesystem::path cuda_home;         // default: $KCACHE_CUDA_HOME, $CUDA_HOME, /usr/local/cuda
  std::filesystem::path tegra_release;     // default: /etc/nv_tegra_release
};

// Probes this machine: the driver and SM of device 0 via libcuda.so.1 (or
// NVML when libcuda is missing), the toolkit version via libnvrtc's
// nvrtcVersion() (or version.json under the CUDA home), TensorRT via
// libnvinfer's getInferLibVersion(), JetPack from the Tegra release file.
// Whatever cannot be found is "na"; never fails and never throws. Libraries
// are dlopen'ed and closed again; nothing is linked.
HostFingerprint probe_host(const HostProbeOptions& options = {});

// Maps the first line of /etc/nv_tegra_release ("# R36 (release), REVISION:
// 4.3, ...") to a JetPack version ("6.2"); "na" when unknown.
std::string jetpack_from_tegra_release(std::string_view text);

// The CUDA home probe_host() and the nvcc builder use: `cuda_home` when not
// empty, else $KCACHE_CUDA_HOME, else $CUDA_HOME, else /usr/local/cuda.
std::filesystem::path resolve_cuda_home(const std::filesystem::path& cuda_home = {});

}  // namespace kcache
