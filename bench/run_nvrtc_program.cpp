// bench/run_nvrtc_program.cpp: an ordinary NVRTC program for the `kcache run`
// benchmark (bench/bench_run.sh). It knows nothing of kcache: it opens
// libnvrtc with dlopen, compiles each kernel of bench/corpus once (CUBIN for
// sm_90; CUB with -I <cuda>/include/cccl) and prints, per kernel, the time its
// compile calls took (nvrtcCompileProgram plus fetching the CUBIN), in
// microseconds, as one JSON object: {"trivial.cu": us, "trivial.cu/cpu": us,
// ...}: wall time, and the calling thread's CPU time (which the load of a
// shared machine does not inflate).
//
//   run_nvrtc_program CORPUS_DIR CUDA_HOME [KERNEL...]
#include <dlfcn.h>

#include <time.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Program = void*;
struct Api {
  int (*create)(Program*, const char*, const char*, int, const char* const*, const char* const*);
  int (*destroy)(Program*);
  int (*compile)(Program, int, const char* const*);
  int (*cubin_size)(Program, size_t*);
  int (*cubin)(Program, char*);
};

template <class F>
bool load(void* lib, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: run_nvrtc_program CORPUS_DIR CUDA_HOME [KERNEL...]\n");
    return 2;
  }
  void* lib = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    lib = dlopen("libnvrtc.so.12", RTLD_NOW | RTLD_LOCAL);
  }
  Api api{};
  if (lib == nullptr || !load(lib, api.create, "nvrtcCreateProgram") || !load(lib, api.destroy, "nvrtcDestroyProgram") ||
      !load(lib, api.compile, "nvrtcCompileProgram") || !load(lib, api.cubin_size, "nvrtcGetCUBINSize") ||
      !load(lib, api.cubin, "nvrtcGetCUBIN")) {
    std::fprintf(stderr, "run_nvrtc_program: cannot load NVRTC\n");
    return 1;
  }
  std::vector<std::string> kernels;
  for (int i = 3; i < argc; ++i) {
    kernels.emplace_back(argv[i]);
  }
  if (kernels.empty()) {
    kernels = {"trivial.cu", "medium.cu", "heavy_cub.cu"};
  }
  const std::string home = argv[2];
  const std::string cccl = "-I" + home + "/include/cccl";
  const std::string include = "-I" + home + "/include";
  std::string json = "{";
  for (const auto& k : kernels) {
    std::ifstream in(std::string(argv[1]) + "/" + k);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string src = ss.str();
    std::vector<const char*> options = {"-arch=sm_90", cccl.c_str(), include.c_str()};
    timespec cpu_start{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu_start);
    const auto start = std::chrono::steady_clock::now();
    Program p = nullptr;
    size_t size = 0;
    if (api.create(&p, src.c_str(), k.c_str(), 0, nullptr, nullptr) != 0 ||
        api.compile(p, static_cast<int>(options.size()), options.data()) != 0 || api.cubin_size(p, &size) != 0) {
      std::fprintf(stderr, "run_nvrtc_program: %s does not compile\n", k.c_str());
      return 1;
    }
    std::string cubin(size, '\0');
    api.cubin(p, cubin.data());
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
    timespec cpu_end{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu_end);
    const long long cpu_us = (cpu_end.tv_sec - cpu_start.tv_sec) * 1000000LL + (cpu_end.tv_nsec - cpu_start.tv_nsec) / 1000;
    api.destroy(&p);
    json += (json.size() > 1 ? ", \"" : "\"") + k + "/cpu\": " + std::to_string(cpu_us);
    json += ", \"" + k + "\": " + std::to_string(us.count());
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}
