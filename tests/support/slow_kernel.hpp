// tests/support/slow_kernel.hpp: a CUDA C++ kernel that takes NVRTC a few
// hundred milliseconds (40 deep template instances), for tests and benchmarks
// that need a compile long enough to race against (header-only).
#pragma once

#include <string>

namespace kcache::test {

// The source of kernel `extern "C" __global__ void <name>(float*)`; a new
// `name` gives a new source, so a new (cold) key.
inline std::string slow_kernel_source(const std::string& name) {
  std::string src = "template <int N> __device__ float f(float x) { return f<N - 1>(x * 1.0001f + N); }\n"
                    "template <> __device__ float f<0>(float x) { return x; }\n"
                    "extern \"C\" __global__ void " + name + "(float* p) {\n  float v = p[threadIdx.x];\n";
  for (int i = 0; i < 40; ++i) {
    src += "  v += f<" + std::to_string(100 + i) + ">(v);\n";
  }
  src += "  p[threadIdx.x] = v;\n}\n";
  return src;
}

}  // namespace kcache::test
