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
//   run_nvrtc_program --compile FILE OUT [OPTION...]
//       one program's compile, as a user writes it: FILE (named FILE, as
//       `kcache compile` names it) to a CUBIN in OUT with exactly OPTION...,
//       nothing else (the baseline of `KCACHE_DISABLE=1 kcache compile` in
//       scripts/bench-process-start.sh). Exit 1 with NVRTC's log on failure.
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
  int (*log_size)(Program, size_t*);
  int (*log)(Program, char*);
};

template <class F>
bool load(void* lib, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

}  // namespace

// --compile FILE OUT [OPTION...] (see the top of the file).
int compile_one(const Api& api, int argc, char** argv) {
  std::ifstream in(argv[2]);
  if (!in) {
    std::fprintf(stderr, "run_nvrtc_program: cannot read %s\n", argv[2]);
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string src = ss.str();
  std::vector<const char*> options(argv + 4, argv + argc);
  Program p = nullptr;
  if (api.create(&p, src.c_str(), argv[2], 0, nullptr, nullptr) != 0) {
    std::fprintf(stderr, "run_nvrtc_program: nvrtcCreateProgram failed\n");
    return 1;
  }
  size_t size = 0;
  if (api.compile(p, static_cast<int>(options.size()), options.data()) != 0 || api.cubin_size(p, &size) != 0) {
    size_t log_size = 0;
    std::string log;
    if (api.log_size(p, &log_size) == 0 && log_size > 1) {
      log.resize(log_size);
      api.log(p, log.data());
    }
    std::fprintf(stderr, "run_nvrtc_program: %s does not compile\n%s\n", argv[2], log.c_str());
    return 1;
  }
  std::string cubin(size, '\0');
  api.cubin(p, cubin.data());
  api.destroy(&p);
  std::FILE* out = std::fopen(argv[3], "wb");
  if (out == nullptr || std::fwrite(cubin.data(), 1, cubin.size(), out) != cubin.size() || std::fclose(out) != 0) {
    std::fprintf(stderr, "run_nvrtc_program: cannot write %s\n", argv[3]);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  const bool one = argc >= 2 && std::string(argv[1]) == "--compile";
  if (argc < (one ? 4 : 3)) {
    std::fprintf(stderr, "usage: run_nvrtc_program CORPUS_DIR CUDA_HOME [KERNEL...]\n"
                         "       run_nvrtc_program --compile FILE OUT [OPTION...]\n");
    return 2;
  }
  void* lib = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    lib = dlopen("libnvrtc.so.12", RTLD_NOW | RTLD_LOCAL);
  }
  Api api{};
  if (lib == nullptr || !load(lib, api.create, "nvrtcCreateProgram") || !load(lib, api.destroy, "nvrtcDestroyProgram") ||
      !load(lib, api.compile, "nvrtcCompileProgram") || !load(lib, api.cubin_size, "nvrtcGetCUBINSize") ||
      !load(lib, api.cubin, "nvrtcGetCUBIN") || !load(lib, api.log_size, "nvrtcGetProgramLogSize") ||
      !load(lib, api.log, "nvrtcGetProgramLog")) {
    std::fprintf(stderr, "run_nvrtc_program: cannot load NVRTC\n");
    return 1;
  }
  if (one) {
    return compile_one(api, argc, argv);
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
