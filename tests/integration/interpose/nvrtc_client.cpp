// tests/integration/interpose/nvrtc_client.cpp: an ordinary NVRTC program,
// written as a user would, that the `kcache run` tests run with and without
// the stand-in. It knows nothing of kcache.
//
//   nvrtc_client MODE LIBRARY INCLUDE_DIR OUT [THREADS]
//
// MODE: linked (built with -lnvrtc; LIBRARY is ignored), dlopen (dlopen of
// LIBRARY: a soname or an absolute path), deepbind (the same with
// RTLD_DEEPBIND) or plugin (LIBRARY is this file built as a shared library
// linked with -lnvrtc, KCACHE_CLIENT_PLUGIN, opened with RTLD_DEEPBIND: its
// calls would bind to the real NVRTC first). It compiles several programs: name expressions, an
// in-memory header, a header from INCLUDE_DIR, LTO-IR, a warning, an error;
// then links the LTO-IR and the PTX with nvJitLink (found as NVRTC is: linked,
// or the file beside it) and compiles NVVM IR with libNVVM (linked, or the
// file $KCACHE_TEST_NVVM names); with THREADS, that many threads compile at once. Everything the NVRTC API
// returns (codes, sizes, PTX, CUBIN, LTO-IR, logs, lowered names) is written
// to OUT, so two runs can be compared byte for byte. Exit 0 when every call
// behaved as the test expects, 1 otherwise (the program's own check).
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "getter_output.hpp"
#include "nvrtc_declarations.hpp"
#if defined(KCACHE_CLIENT_LINKED) || defined(KCACHE_CLIENT_PLUGIN)
#include <nvvm.h>
#include <nvJitLink.h>  // its inline wrappers call the versioned entry points (__nvJitLinkCreate_13_0 ...)
#endif

namespace {

struct Api {
  nvrtcResult (*create)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
  nvrtcResult (*destroy)(nvrtcProgram*);
  nvrtcResult (*compile)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*ptx_size)(nvrtcProgram, size_t*);
  nvrtcResult (*ptx)(nvrtcProgram, char*);
  nvrtcResult (*cubin_size)(nvrtcProgram, size_t*);
  nvrtcResult (*cubin)(nvrtcProgram, char*);
  nvrtcResult (*ltoir_size)(nvrtcProgram, size_t*);
  nvrtcResult (*ltoir)(nvrtcProgram, char*);
  nvrtcResult (*log_size)(nvrtcProgram, size_t*);
  nvrtcResult (*log)(nvrtcProgram, char*);
  nvrtcResult (*add_name)(nvrtcProgram, const char*);
  nvrtcResult (*lowered)(nvrtcProgram, const char*, const char**);
  nvrtcResult (*version)(int*, int*);
};

Api g_api;

// nvJitLink, reached as NVRTC is (linked, or dlopen of the file beside it).
struct LinkApi {
  int (*create)(void**, uint32_t, const char**);
  int (*destroy)(void**);
  int (*add_data)(void*, int, const void*, size_t, const char*);
  int (*add_file)(void*, int, const char*);
  int (*complete)(void*);
  int (*cubin_size)(void*, size_t*);
  int (*cubin)(void*, void*);
  int (*error_size)(void*, size_t*);
  int (*error)(void*, char*);
  int (*info_size)(void*, size_t*);
  int (*info)(void*, char*);
};

LinkApi g_link;

// libNVVM, reached as NVRTC is (linked, or dlopen of $KCACHE_TEST_NVVM).
struct NvvmApi {
  int (*create)(void**);
  int (*destroy)(void**);
  int (*add)(void*, const char*, size_t, const char*);
  int (*lazy_add)(void*, const char*, size_t, const char*);
  int (*compile)(void*, int, const char**);
  int (*result_size)(void*, size_t*);
  int (*result)(void*, char*);
  int (*log_size)(void*, size_t*);
  int (*log)(void*, char*);
};

NvvmApi g_nvvm;

const char* k_nvvm_ir =
    "target datalayout = \"e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-"
    "f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64\"\n"
    "target triple = \"nvptx64-unknown-cuda\"\n"
    "declare i32 @helper(i32)\n"
    "define void @simple(i32* %data) {\n"
    "entry:\n"
    "  %0 = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %1 = getelementptr inbounds i32, i32* %data, i32 %0\n"
    "  %2 = call i32 @helper(i32 %0)\n"
    "  store i32 %2, i32* %1, align 4\n"
    "  ret void\n"
    "}\n"
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind readnone\n"
    "!nvvm.annotations = !{!0}\n"
    "!0 = !{void (i32*)* @simple, !\"kernel\", i32 1}\n"
    "!nvvmir.version = !{!1}\n"
    "!1 = !{i32 2, i32 0}\n";

const char* k_nvvm_helper =
    "target datalayout = \"e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-"
    "f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64\"\n"
    "target triple = \"nvptx64-unknown-cuda\"\n"
    "define i32 @helper(i32 %x) {\n"
    "  %y = mul i32 %x, 7\n"
    "  ret i32 %y\n"
    "}\n"
    "!nvvmir.version = !{!0}\n"
    "!0 = !{i32 2, i32 0}\n";

template <class F>
void load(void* lib, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (fn == nullptr) {
    std::fprintf(stderr, "nvrtc_client: %s missing\n", name);
    std::exit(1);
  }
}


const char* k_memory_header = "#pragma once\ntemplate <int N> struct Scale { static constexpr int value = 3 * N; };\n";

std::string source(int variant) {
  return "#include \"scale.h\"\n#include \"disk.h\"\n#ifndef VARIANT\n#define VARIANT 0\n#endif\n"
         "template <int N> __global__ void fill(int* p) { p[threadIdx.x] = Scale<N>::value + DISK_OFFSET + VARIANT; }\n"
         "template <typename T> __global__ void copy(T* d, const T* s) { d[threadIdx.x] = s[threadIdx.x]; }\n"
         "extern \"C\" __global__ void plain(float* p) { p[0] = 1.0f + " +
         std::to_string(variant) + "; }\n";
}

// Compiles one program and appends what NVRTC returned to `out`; false when
// a code is not what NVRTC documents for it.
bool compile_one(std::string& out, const std::string& name, const std::string& src, std::vector<std::string> options,
                 const std::vector<std::string>& expressions, bool expect_ok) {
  nvrtcProgram p = nullptr;
  const char* headers[] = {k_memory_header};
  const char* names[] = {"scale.h"};
  if (g_api.create(&p, src.c_str(), name.c_str(), 1, headers, names) != 0) {
    return false;
  }
  for (const auto& e : expressions) {
    if (g_api.add_name(p, e.c_str()) != 0) {
      return false;
    }
  }
  std::vector<const char*> opts;
  for (const auto& o : options) {
    opts.push_back(o.c_str());
  }
  const int rc = g_api.compile(p, static_cast<int>(opts.size()), opts.data());
  out += "== " + name + " compile rc=" + std::to_string(rc) + "\n";
  getter_output(out, "ptx", p, g_api.ptx_size, g_api.ptx);
  getter_output(out, "cubin", p, g_api.cubin_size, g_api.cubin);
  getter_output(out, "ltoir", p, g_api.ltoir_size, g_api.ltoir);
  getter_output(out, "log", p, g_api.log_size, g_api.log);
  for (const auto& e : expressions) {
    const char* lowered = nullptr;
    const int lrc = g_api.lowered(p, e.c_str(), &lowered);
    out += "lowered " + e + " rc=" + std::to_string(lrc) + " " + (lrc == 0 && lowered ? lowered : "-") + "\n";
  }
  const char* unknown = nullptr;
  out += "lowered-unknown rc=" + std::to_string(g_api.lowered(p, "fill<999>", &unknown)) + "\n";
  out += "add-after rc=" + std::to_string(g_api.add_name(p, "fill<7>")) + "\n";
  g_api.destroy(&p);
  return (rc == 0) == expect_ok;
}

// Links `input` (of nvJitLinkInputType `type`) with nvJitLink; appends what it returned.
bool link_one(std::string& out, const std::string& name, int type, const std::string& input,
              std::vector<const char*> options) {
  void* h = nullptr;
  if (g_link.create(&h, static_cast<uint32_t>(options.size()), options.data()) != 0) {
    return false;
  }
  const int add_rc = g_link.add_data(h, type, input.data(), input.size(), name.c_str());
  const int rc = g_link.complete(h);
  out += "== link " + name + " add rc=" + std::to_string(add_rc) + " complete rc=" + std::to_string(rc) + "\n";
  getter_output(out, "linked-cubin", h, g_link.cubin_size, g_link.cubin);
  getter_output(out, "error-log", h, g_link.error_size, g_link.error);
  getter_output(out, "info-log", h, g_link.info_size, g_link.info);
  out += "complete-again rc=" + std::to_string(g_link.complete(h)) + "\n";
  // Calls after Complete: what the real library answers on a completed
  // handle, whether the stand-in linked or served the link (a hit).
  const std::string file = "link-after-" + name;  // in the working directory: the same name in every run
  if (FILE* f = std::fopen(file.c_str(), "wb")) {
    std::fwrite(input.data(), 1, input.size(), f);
    std::fclose(f);
  }
  // One call per statement: the order of the calls is part of what is compared.
  const int again_rc = g_link.add_data(h, type, input.data(), input.size(), "again");
  const int null_rc = g_link.add_data(h, type, nullptr, 0, "null");
  const int file_rc = g_link.add_file(h, type, file.c_str());
  const int missing_rc = g_link.add_file(h, type, "link-after-missing");
  const int complete_rc = g_link.complete(h);
  out += "after-complete add rc=" + std::to_string(again_rc) + " add-null rc=" + std::to_string(null_rc) +
         " add-file rc=" + std::to_string(file_rc) + " add-missing-file rc=" + std::to_string(missing_rc) +
         " complete rc=" + std::to_string(complete_rc) + "\n";
  getter_output(out, "linked-cubin-after", h, g_link.cubin_size, g_link.cubin);
  getter_output(out, "error-log-after", h, g_link.error_size, g_link.error);
  g_link.destroy(&h);
  return rc == 0;
}

// Compiles two NVVM IR modules, with libdevice added lazily ($KCACHE_TEST_LIBDEVICE),
// with libNVVM; appends what it returned.
bool nvvm_one(std::string& out, const std::string& name, bool with_helper) {
  void* p = nullptr;
  if (g_nvvm.create(&p) != 0) {
    return false;
  }
  int add_rc = g_nvvm.add(p, k_nvvm_ir, std::strlen(k_nvvm_ir), "main.ll");
  if (with_helper) {
    add_rc |= g_nvvm.add(p, k_nvvm_helper, std::strlen(k_nvvm_helper), "helper.ll");
  } else {
    const char* broken = "define i32 @helper(ptr %x) {\n  ret i32 0\n}\n";  // does not parse: a failed compile
    add_rc |= g_nvvm.add(p, broken, std::strlen(broken), "broken.ll");
  }
  int lazy_rc = -1;
  if (const char* libdevice = std::getenv("KCACHE_TEST_LIBDEVICE"); libdevice != nullptr) {
    std::string bc;
    if (FILE* f = std::fopen(libdevice, "rb")) {
      char buffer[65536];
      for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) {
        bc.append(buffer, n);
      }
      std::fclose(f);
    }
    lazy_rc = g_nvvm.lazy_add(p, bc.data(), bc.size(), "libdevice");
  }
  const char* options[] = {"-arch=compute_90", "-opt=3"};
  const int rc = g_nvvm.compile(p, 2, options);
  out += "== nvvm " + name + " add rc=" + std::to_string(add_rc) + " lazy rc=" + std::to_string(lazy_rc) +
         " compile rc=" + std::to_string(rc) + "\n";
  getter_output(out, "result", p, g_nvvm.result_size, g_nvvm.result);
  getter_output(out, "log", p, g_nvvm.log_size, g_nvvm.log);
  g_nvvm.destroy(&p);
  return rc == 0;
}

// The bytes after the "<what> size_rc=0 size=N get_rc=0\n" line of the program `name` in `out`.
std::string output_of(const std::string& out, const std::string& name, const std::string& what) {
  const auto at = out.find("== " + name + " ");
  const auto line = out.find(what + " size_rc=0 size=", at);
  if (at == std::string::npos || line == std::string::npos) {
    return {};
  }
  const size_t size = std::strtoull(out.c_str() + line + what.size() + 16, nullptr, 10);
  const auto start = out.find('\n', line) + 1;
  return out.substr(start, size);
}

}  // namespace

#ifdef KCACHE_CLIENT_PLUGIN
extern "C" __attribute__((visibility("default"))) int kcache_client_main(int argc, char** argv) {
#else
int main(int argc, char** argv) {
#endif
  if (argc < 5) {
    std::fprintf(stderr, "usage: nvrtc_client linked|dlopen|deepbind|plugin LIBRARY INCLUDE_DIR OUT [THREADS]\n");
    return 2;
  }
  const std::string mode = argv[1];
#if !defined(KCACHE_CLIENT_LINKED) && !defined(KCACHE_CLIENT_PLUGIN)
  if (mode == "plugin") {
    void* plugin = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (plugin == nullptr) {
      std::fprintf(stderr, "nvrtc_client: %s\n", dlerror());
      return 1;
    }
    auto* entry = reinterpret_cast<int (*)(int, char**)>(dlsym(plugin, "kcache_client_main"));
    return entry != nullptr ? entry(argc, argv) : 1;
  }
#endif
#if defined(KCACHE_CLIENT_LINKED) || defined(KCACHE_CLIENT_PLUGIN)
  g_api = Api{nvrtcCreateProgram, nvrtcDestroyProgram, nvrtcCompileProgram, nvrtcGetPTXSize, nvrtcGetPTX,
              nvrtcGetCUBINSize,  nvrtcGetCUBIN,       nvrtcGetLTOIRSize,   nvrtcGetLTOIR,   nvrtcGetProgramLogSize,
              nvrtcGetProgramLog, nvrtcAddNameExpression, nvrtcGetLoweredName, nvrtcVersion};
  g_link.create = [](void** h, uint32_t n, const char** o) {
    return static_cast<int>(nvJitLinkCreate(reinterpret_cast<nvJitLinkHandle*>(h), n, o));
  };
  g_link.destroy = [](void** h) { return static_cast<int>(nvJitLinkDestroy(reinterpret_cast<nvJitLinkHandle*>(h))); };
  g_link.add_data = [](void* h, int t, const void* d, size_t n, const char* name) {
    return static_cast<int>(
        nvJitLinkAddData(static_cast<nvJitLinkHandle>(h), static_cast<nvJitLinkInputType>(t), d, n, name));
  };
  g_link.add_file = [](void* h, int t, const char* f) {
    return static_cast<int>(nvJitLinkAddFile(static_cast<nvJitLinkHandle>(h), static_cast<nvJitLinkInputType>(t), f));
  };
  g_link.complete = [](void* h) { return static_cast<int>(nvJitLinkComplete(static_cast<nvJitLinkHandle>(h))); };
  g_link.cubin_size = [](void* h, size_t* n) {
    return static_cast<int>(nvJitLinkGetLinkedCubinSize(static_cast<nvJitLinkHandle>(h), n));
  };
  g_link.cubin = [](void* h, void* b) {
    return static_cast<int>(nvJitLinkGetLinkedCubin(static_cast<nvJitLinkHandle>(h), b));
  };
  g_link.error_size = [](void* h, size_t* n) {
    return static_cast<int>(nvJitLinkGetErrorLogSize(static_cast<nvJitLinkHandle>(h), n));
  };
  g_link.error = [](void* h, char* b) {
    return static_cast<int>(nvJitLinkGetErrorLog(static_cast<nvJitLinkHandle>(h), b));
  };
  g_link.info_size = [](void* h, size_t* n) {
    return static_cast<int>(nvJitLinkGetInfoLogSize(static_cast<nvJitLinkHandle>(h), n));
  };
  g_link.info = [](void* h, char* b) { return static_cast<int>(nvJitLinkGetInfoLog(static_cast<nvJitLinkHandle>(h), b)); };
  g_nvvm.create = [](void** p) { return static_cast<int>(nvvmCreateProgram(reinterpret_cast<nvvmProgram*>(p))); };
  g_nvvm.destroy = [](void** p) { return static_cast<int>(nvvmDestroyProgram(reinterpret_cast<nvvmProgram*>(p))); };
  g_nvvm.add = [](void* p, const char* b, size_t n, const char* name) {
    return static_cast<int>(nvvmAddModuleToProgram(static_cast<nvvmProgram>(p), b, n, name));
  };
  g_nvvm.lazy_add = [](void* p, const char* b, size_t n, const char* name) {
    return static_cast<int>(nvvmLazyAddModuleToProgram(static_cast<nvvmProgram>(p), b, n, name));
  };
  g_nvvm.compile = [](void* p, int n, const char** o) {
    return static_cast<int>(nvvmCompileProgram(static_cast<nvvmProgram>(p), n, o));
  };
  g_nvvm.result_size = [](void* p, size_t* n) {
    return static_cast<int>(nvvmGetCompiledResultSize(static_cast<nvvmProgram>(p), n));
  };
  g_nvvm.result = [](void* p, char* b) { return static_cast<int>(nvvmGetCompiledResult(static_cast<nvvmProgram>(p), b)); };
  g_nvvm.log_size = [](void* p, size_t* n) {
    return static_cast<int>(nvvmGetProgramLogSize(static_cast<nvvmProgram>(p), n));
  };
  g_nvvm.log = [](void* p, char* b) { return static_cast<int>(nvvmGetProgramLog(static_cast<nvvmProgram>(p), b)); };
#else
  const auto open_library = [&](const char* name) {
    void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL | (mode == "deepbind" ? RTLD_DEEPBIND : 0));
    if (handle == nullptr) {
      std::fprintf(stderr, "nvrtc_client: %s\n", dlerror());
      std::exit(1);
    }
    return handle;
  };
  void* lib = open_library(argv[2]);
  load(lib, g_api.create, "nvrtcCreateProgram");
  load(lib, g_api.destroy, "nvrtcDestroyProgram");
  load(lib, g_api.compile, "nvrtcCompileProgram");
  load(lib, g_api.ptx_size, "nvrtcGetPTXSize");
  load(lib, g_api.ptx, "nvrtcGetPTX");
  load(lib, g_api.cubin_size, "nvrtcGetCUBINSize");
  load(lib, g_api.cubin, "nvrtcGetCUBIN");
  load(lib, g_api.ltoir_size, "nvrtcGetLTOIRSize");
  load(lib, g_api.ltoir, "nvrtcGetLTOIR");
  load(lib, g_api.log_size, "nvrtcGetProgramLogSize");
  load(lib, g_api.log, "nvrtcGetProgramLog");
  load(lib, g_api.add_name, "nvrtcAddNameExpression");
  load(lib, g_api.lowered, "nvrtcGetLoweredName");
  load(lib, g_api.version, "nvrtcVersion");
  // nvJitLink beside NVRTC: the same soname or path with libnvrtc replaced.
  std::string link_name = argv[2];
  link_name.replace(link_name.find("libnvrtc"), 8, "libnvJitLink");
  void* link_lib = open_library(link_name.c_str());
  load(link_lib, g_link.create, "nvJitLinkCreate");
  load(link_lib, g_link.destroy, "nvJitLinkDestroy");
  load(link_lib, g_link.add_data, "nvJitLinkAddData");
  load(link_lib, g_link.add_file, "nvJitLinkAddFile");
  load(link_lib, g_link.complete, "nvJitLinkComplete");
  load(link_lib, g_link.cubin_size, "nvJitLinkGetLinkedCubinSize");
  load(link_lib, g_link.cubin, "nvJitLinkGetLinkedCubin");
  load(link_lib, g_link.error_size, "nvJitLinkGetErrorLogSize");
  load(link_lib, g_link.error, "nvJitLinkGetErrorLog");
  load(link_lib, g_link.info_size, "nvJitLinkGetInfoLogSize");
  load(link_lib, g_link.info, "nvJitLinkGetInfoLog");
  const char* nvvm_name = std::getenv("KCACHE_TEST_NVVM");
  void* nvvm_lib = open_library(nvvm_name != nullptr ? nvvm_name : "libnvvm.so");
  load(nvvm_lib, g_nvvm.create, "nvvmCreateProgram");
  load(nvvm_lib, g_nvvm.destroy, "nvvmDestroyProgram");
  load(nvvm_lib, g_nvvm.add, "nvvmAddModuleToProgram");
  load(nvvm_lib, g_nvvm.lazy_add, "nvvmLazyAddModuleToProgram");
  load(nvvm_lib, g_nvvm.compile, "nvvmCompileProgram");
  load(nvvm_lib, g_nvvm.result_size, "nvvmGetCompiledResultSize");
  load(nvvm_lib, g_nvvm.result, "nvvmGetCompiledResult");
  load(nvvm_lib, g_nvvm.log_size, "nvvmGetProgramLogSize");
  load(nvvm_lib, g_nvvm.log, "nvvmGetProgramLog");
#endif
  const std::string include = std::string("-I") + argv[3];
  const int threads = argc > 5 ? std::atoi(argv[5]) : 0;
  std::string out;
  bool ok = true;
  if (threads > 0) {
    std::vector<std::string> outs(static_cast<std::size_t>(threads));
    std::vector<int> oks(static_cast<std::size_t>(threads), 0);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const std::string variant = "-DVARIANT=" + std::to_string(t % 4);  // 4 keys, each asked by several threads
        oks[static_cast<std::size_t>(t)] = compile_one(outs[static_cast<std::size_t>(t)], "thread.cu", source(t % 4),
                                                       {"-arch=sm_90", include, variant}, {"fill<2>"}, true);
      });
    }
    for (auto& th : pool) {
      th.join();
    }
    for (int t = 0; t < threads; ++t) {
      out += outs[static_cast<std::size_t>(t)];
      ok = ok && oks[static_cast<std::size_t>(t)] != 0;
    }
  } else {
    ok &= compile_one(out, "kernels.cu", source(0), {"-arch=sm_90", include, "-default-device"},
                      {"fill<1>", "fill<4>", "copy<float>", "&plain"}, true);
    ok &= compile_one(out, "lto.cu", source(1), {"-arch=sm_90", "-dlto", include}, {"fill<2>"}, true);
    ok &= compile_one(out, "warn.cu", "#warning \"kcache test warning\"\n" + source(2),
                      {"-arch=compute_90", include}, {"copy<int>"}, true);
    ok &= compile_one(out, "broken.cu", source(3) + "\nthis is not C++;\n", {"-arch=sm_90", include}, {}, false);
    // Link-time optimisation of the LTO-IR, and a cubin from the PTX, with nvJitLink.
    ok &= link_one(out, "lto.ltoir", 3, output_of(out, "lto.cu", "ltoir"), {"-arch=sm_90", "-lto", "-O3"});
    ok &= link_one(out, "kernels.ptx", 2, output_of(out, "kernels.cu", "ptx"), {"-arch=sm_90"});
    // NVVM IR modules with libdevice added lazily, and with a module that does not parse.
    ok &= nvvm_one(out, "main+helper", true);
    ok &= !nvvm_one(out, "main+broken", false);
  }
  FILE* f = std::fopen(argv[4], "wb");
  if (f == nullptr || std::fwrite(out.data(), 1, out.size(), f) != out.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "nvrtc_client: cannot write %s\n", argv[4]);
    return 1;
  }
  // With KCACHE_TEST_THREADS_FILE: the process's "Threads:" line of
  // /proc/self/status at the end (what kcache run may have added).
  if (const char* threads_file = std::getenv("KCACHE_TEST_THREADS_FILE"); threads_file != nullptr) {
    FILE* status = std::fopen("/proc/self/status", "r");
    FILE* t = std::fopen(threads_file, "w");
    char line[256];
    while (status != nullptr && t != nullptr && std::fgets(line, sizeof line, status) != nullptr) {
      if (std::strncmp(line, "Threads:", 8) == 0) {
        std::fputs(line, t);
      }
    }
    if (status != nullptr) {
      std::fclose(status);
    }
    if (t == nullptr || std::fclose(t) != 0) {
      return 1;
    }
  }
  return ok ? 0 : 1;
}
