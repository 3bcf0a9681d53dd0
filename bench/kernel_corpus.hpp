// bench/kernel_corpus.hpp: a generated corpus of distinct CUDA kernels for the
// worker-pool benchmarks. Kernel i is a templated reduction-and-scale kernel
// whose constants depend on i, so every request has its own key and NVRTC does
// real work for each (about 100-200 ms on the reference machine).
#pragma once

#include <string>
#include <vector>

#include "kcache/compile_request.hpp"

namespace kcache::bench {

inline CompileRequest corpus_request(int i, const std::string& arch = "sm_80") {
  const std::string n = std::to_string(i);
  std::string src =
      "template <int N> struct Step { __device__ static float run(float x) { return Step<N - 1>::run(x * 1.0001f + N * " +
      n + ".5f); } };\n"
      "template <> struct Step<0> { __device__ static float run(float x) { return x; } };\n"
      "template <typename T, int B>\n"
      "__device__ T block_sum(T v, T* smem) {\n"
      "  smem[threadIdx.x] = v; __syncthreads();\n"
      "  for (int s = B / 2; s > 0; s >>= 1) { if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s]; __syncthreads(); }\n"
      "  return smem[0];\n"
      "}\n"
      "extern \"C\" __global__ void corpus_" + n + "(float* out, const float* in, int count) {\n"
      "  __shared__ float smem[256];\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  float v = i < count ? in[i] : 0.f;\n";
  for (int k = 0; k < 5; ++k) {
    src += "  v = Step<" + std::to_string(60 + (i * 7 + k * 13) % 40) + ">::run(v);\n";
  }
  src += "  float s = block_sum<float, 256>(v, smem);\n"
         "  if (threadIdx.x == 0) out[blockIdx.x] = s * " + n + ".25f;\n}\n";
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = "corpus_" + n + ".cu";
  r.source = std::move(src);
  r.target_kind = "cubin";
  r.options = {"-arch=" + arch};
  return r;
}

inline std::vector<CompileRequest> corpus(int count, int salt = 0) {
  std::vector<CompileRequest> out;
  for (int i = 0; i < count; ++i) {
    out.push_back(corpus_request(i + salt * 1000));
  }
  return out;
}

}  // namespace kcache::bench
