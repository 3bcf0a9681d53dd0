// bench/kernel_mix.hpp: the kinds of real kernels whose NVRTC build times and
// cubin sizes `bench_eviction_trace record-mix` records into
// bench/data/nvrtc_kernel_mix.json (issue 21: the eviction trace).
//
// The mix is what a JIT workload compiles: besides the bench corpus
// (trivial, medium, heavy_cub), small kernels that include a big header tree
// and so take a long time to build for a small cubin (CuPy's
// <cupy/carray.cuh> and <cupy/complex.cuh>, a CCCL block reduce or warp scan
// with one instantiation, libcu++'s <cuda/std/complex>), and generated
// straight-line kernels (bench/kernel_corpus.hpp) that build quickly for
// their size. Variant `v` of a kind differs in its source, so NVRTC does all
// of the work each time.
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kcache/compile_request.hpp"
#include "kernel_corpus.hpp"

namespace kcache::bench {

// The kinds, in the order they are recorded. The CuPy kinds need CuPy's
// headers (scripts/fetch-cupy-headers.sh; `cupy_include` is the directory
// holding cupy/carray.cuh) and are left out without them.
inline std::vector<std::string> kernel_mix_kinds(bool with_cupy) {
  std::vector<std::string> kinds = {"trivial",    "generated",         "medium",          "heavy_cub",
                                    "cccl_block_reduce", "cccl_warp_scan", "libcudacxx_complex"};
  if (with_cupy) {
    kinds.emplace_back("cupy_elementwise");
    kinds.emplace_back("cupy_complex");
  }
  return kinds;
}

// The NVRTC request for variant `v` of `kind` for sm_90, or nullopt for an
// unknown kind. `source_dir` is the repository (bench/corpus), `cuda_include`
// the toolkit's include directory.
inline std::optional<CompileRequest> kernel_mix_request(const std::string& kind, int v,
                                                        const std::filesystem::path& source_dir,
                                                        const std::filesystem::path& cuda_include,
                                                        const std::string& cupy_include) {
  const std::string n = std::to_string(v);
  CompileRequest r;
  r.backend = "nvrtc";
  r.target_kind = "cubin";
  r.name = kind + "_" + n + ".cu";
  r.options = {"-arch=sm_90", "-DKCACHE_BENCH_VARIANT=" + n};
  const std::string cccl = "-I" + (cuda_include / "cccl").string();
  const std::string cuda = "-I" + cuda_include.string();
  if (kind == "trivial" || kind == "medium" || kind == "heavy_cub") {
    std::ifstream in(source_dir / "bench" / "corpus" / (kind + ".cu"));
    std::stringstream ss;
    ss << in.rdbuf();
    r.source = ss.str() + "\n// variant " + n + "\n";
    if (kind == "heavy_cub") {
      r.options.insert(r.options.end(), {cccl, cuda});
    }
  } else if (kind == "generated") {
    r = corpus_request(v, "sm_90");
  } else if (kind == "cccl_block_reduce") {
    r.source = "#include <cub/block/block_reduce.cuh>\n"
               "extern \"C\" __global__ void block_sum_" + n + "(const int* in, int* out) {\n"
               "  using R = cub::BlockReduce<int, 128>;\n  __shared__ typename R::TempStorage t;\n"
               "  int s = R(t).Sum(in[blockIdx.x * 128 + threadIdx.x] * " + n + ");\n"
               "  if (threadIdx.x == 0) out[blockIdx.x] = s;\n}\n";
    r.options.insert(r.options.end(), {"--std=c++17", cccl, cuda});
  } else if (kind == "cccl_warp_scan") {
    r.source = "#include <cub/warp/warp_scan.cuh>\n"
               "extern \"C\" __global__ void warp_scan_" + n + "(const float* in, float* out) {\n"
               "  using S = cub::WarpScan<float>;\n  __shared__ typename S::TempStorage t[4];\n"
               "  const int i = blockIdx.x * 128 + threadIdx.x;\n  float v = in[i] + " + n + ".0f;\n"
               "  S(t[threadIdx.x / 32]).InclusiveSum(v, v);\n  out[i] = v;\n}\n";
    r.options.insert(r.options.end(), {"--std=c++17", cccl, cuda});
  } else if (kind == "libcudacxx_complex") {
    r.source = "#include <cuda/std/complex>\n"
               "extern \"C\" __global__ void cmul_" + n + "(const float* re, const float* im, float* out, int n) {\n"
               "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n"
               "  cuda::std::complex<float> z(re[i], im[i]);\n"
               "  z = cuda::std::exp(z * cuda::std::complex<float>(0.5f, " + n + ".0f));\n"
               "  out[i] = cuda::std::abs(z);\n}\n";
    r.options.insert(r.options.end(), {"--std=c++17", cccl, cuda});
  } else if (kind == "cupy_elementwise" || kind == "cupy_complex") {
    // CuPy's own options: its include directory, its bundled CCCL, the toolkit's.
    r.options.insert(r.options.end(), {"--std=c++17", "-I" + cupy_include, "-I" + cupy_include + "/cupy/_cccl/cub",
                                       "-I" + cupy_include + "/cupy/_cccl/thrust",
                                       "-I" + cupy_include + "/cupy/_cccl/libcudacxx", cuda});
    if (kind == "cupy_elementwise") {
      r.source = "#include <cupy/carray.cuh>\n"
                 "extern \"C\" __global__ void cupy_scale_" + n +
                 "(CArray<float, 1, true, true> x, CArray<float, 1, true, true> y) {\n"
                 "  CUPY_FOR(i, y.size()) { y[i] = x[i] * " + n + ".5f + 1.0f; }\n}\n";
    } else {
      r.source = "#include <cupy/complex.cuh>\n#include <cupy/carray.cuh>\n"
                 "extern \"C\" __global__ void cupy_cexp_" + n +
                 "(CArray<complex<float>, 1, true, true> x, CArray<complex<float>, 1, true, true> y) {\n"
                 "  CUPY_FOR(i, y.size()) { y[i] = exp(x[i] * complex<float>(0.5f, " + n + ".0f)); }\n}\n";
    }
  } else {
    return std::nullopt;
  }
  return r;
}

}  // namespace kcache::bench
