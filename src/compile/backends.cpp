#include "compile/backends.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>

#include "compile/toolkit_api.hpp"

namespace kcache::jit {

namespace {

// NVRTC_ERROR_COMPILATION: the compiler rejected the program (nvrtc.h).
constexpr int k_nvrtc_error_compilation = 6;

std::vector<const char*> c_strings(const std::vector<std::string>& v) {
  std::vector<const char*> out;
  out.reserve(v.size());
  for (const auto& s : v) {
    out.push_back(s.c_str());
  }
  return out;
}

std::string trim_log(std::string log) {
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) {
    log.pop_back();
  }
  return log;
}

// nvJitLink glues an input's name to its type in some messages ("does not
// match type NVJITLINK_INPUT_CUBINg.cubin"): put ": " between them.
std::string unglue_nvjitlink_names(std::string log) {
  static constexpr std::array<std::string_view, 8> k_types{"NVJITLINK_INPUT_LIBRARY", "NVJITLINK_INPUT_OBJECT",
                                                           "NVJITLINK_INPUT_FATBIN",  "NVJITLINK_INPUT_LTOIR",
                                                           "NVJITLINK_INPUT_CUBIN",   "NVJITLINK_INPUT_INDEX",
                                                           "NVJITLINK_INPUT_PTX",     "NVJITLINK_INPUT_ANY"};
  for (const std::string_view type : k_types) {
    for (std::size_t at = log.find(type); at != std::string::npos; at = log.find(type, at + 1)) {
      const std::size_t end = at + type.size();
      if (end < log.size() && log[end] != ' ' && log[end] != '\n' && log[end] != ',' && log[end] != ':') {
        log.insert(end, ": ");
      }
    }
  }
  return log;
}

// nvJitLink 13.0 writes some errors straight to the process's stderr
// ("@E@error   : Multiple definition of 'f' in 'k.ptx'") and still returns
// success with empty logs and a cubin. While a link runs, descriptor 2 is
// redirected to an anonymous file so such an error can fail the link; what
// was written is handed back by finish() (and restored on destruction).
// Links in one process are serialised while captured (descriptor 2 is
// process-wide). When the redirection cannot be set up, nothing is captured.
class StderrCapture {
 public:
  StderrCapture() : m_lock(mutex()) {
    std::fflush(stderr);
    m_file = ::memfd_create("kcache-nvjitlink-stderr", MFD_CLOEXEC);
    m_saved = m_file >= 0 ? ::dup(STDERR_FILENO) : -1;
    if (m_saved < 0 || ::dup2(m_file, STDERR_FILENO) < 0) {
      close_all();
    }
  }
  ~StderrCapture() { finish(); }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  // Restores descriptor 2 and returns what was written to it meanwhile.
  std::string finish() {
    std::string text;
    if (m_saved < 0) {
      return text;
    }
    std::fflush(stderr);
    ::dup2(m_saved, STDERR_FILENO);
    char buf[4096];
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(m_file, buf, sizeof buf, at);
      if (n <= 0 || text.size() > (1U << 20)) {
        break;
      }
      text.append(buf, static_cast<std::size_t>(n));
      at += n;
    }
    close_all();
    return text;
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  void close_all() {
    if (m_saved >= 0) {
      ::close(m_saved);
    }
    if (m_file >= 0) {
      ::close(m_file);
    }
    m_saved = -1;
    m_file = -1;
  }

  std::lock_guard<std::mutex> m_lock;
  int m_file = -1;
  int m_saved = -1;
};

// What nvJitLink wrote to stderr, without its "@E@"/"@W@"/"@I@" line tags;
// `error` is set when a line was an error.
std::string clean_nvjitlink_output(const std::string& text, bool& error) {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end;
    std::string_view line(text.data() + start, end - start);
    if (line.starts_with("@E@")) {
      error = true;
      line.remove_prefix(3);
    } else if (line.starts_with("@W@") || line.starts_with("@I@")) {
      line.remove_prefix(3);
    }
    if (line.starts_with("error ") || line.starts_with("ERROR")) {
      error = true;
    }
    if (!line.empty()) {
      out.append(line);
      out += '\n';
    }
    start = end + 1;
  }
  return unglue_nvjitlink_names(std::move(out));
}

// Owns one library handle (an NVRTC program, nvJitLink handle, NVVM program)
// and destroys it with the library's own destroy call.
template <class H>
class LibraryHandle {
 public:
  using Destroy = int (*)(H*);
  LibraryHandle(H handle, Destroy destroy) noexcept : m_handle(handle), m_destroy(destroy) {}
  ~LibraryHandle() {
    if (m_handle != nullptr) {
      m_destroy(&m_handle);
    }
  }
  LibraryHandle(const LibraryHandle&) = delete;
  LibraryHandle& operator=(const LibraryHandle&) = delete;
  H operator*() const noexcept { return m_handle; }

 private:
  H m_handle;
  Destroy m_destroy;
};

// NVRTC reads each text as a C string: one larger than it compiles, or with a
// NUL byte (everything after it silently dropped: a 2 GiB file of zeros compiled
// to an empty cubin), is refused naming the input.
Result<void> check_nvrtc_text(std::string_view what, std::string_view name, std::string_view text) {
  if (text.size() > k_nvrtc_max_text_bytes) {
    return make_error(ErrorCode::invalid_argument,
                      std::string(what) + " '" + std::string(name) + "' is " + std::to_string(text.size()) +
                          " bytes; kcache gives NVRTC at most " + std::to_string(k_nvrtc_max_text_bytes) +
                          " bytes (2 GiB). Split it or compile it with nvcc");
  }
  if (const void* nul = std::memchr(text.data(), '\0', text.size()); nul != nullptr) {
    const auto offset = static_cast<const char*>(nul) - text.data();
    return make_error(ErrorCode::invalid_argument,
                      std::string(what) + " '" + std::string(name) + "' holds a NUL byte at offset " +
                          std::to_string(offset) +
                          "; NVRTC would read it only up to there. Is it a binary file? Give the CUDA source text");
  }
  return {};
}

}  // namespace

Result<BackendOutput> run_nvrtc(const CompileRequest& request, const std::vector<std::string>& options,
                                bool* rejected) {
  if (rejected != nullptr) {
    *rejected = false;
  }
  auto api_r = nvrtc_api();
  if (!api_r) {
    return tl::unexpected(api_r.error());
  }
  const NvrtcApi& api = **api_r;
  if (auto ok = check_nvrtc_text("source", request.name, request.source); !ok) {
    return tl::unexpected(ok.error());
  }
  for (const auto& h : request.headers) {
    if (auto ok = check_nvrtc_text("header", h.name, h.bytes); !ok) {
      return tl::unexpected(ok.error());
    }
  }
  std::vector<std::string> header_names;
  std::vector<std::string> header_bodies;
  for (const auto& h : request.headers) {
    header_names.push_back(h.name);
    header_bodies.push_back(h.bytes);
  }
  const auto names = c_strings(header_names);
  const auto bodies = c_strings(header_bodies);
  NvrtcProgramHandle raw = nullptr;
  int rc = api.create_program(&raw, request.source.c_str(), request.name.c_str(), static_cast<int>(names.size()),
                              bodies.empty() ? nullptr : bodies.data(), names.empty() ? nullptr : names.data());
  if (rc != 0) {
    return make_error(ErrorCode::compile_failed,
                      std::string("nvrtcCreateProgram failed: ") + api.get_error_string(rc));
  }
  const LibraryHandle<NvrtcProgramHandle> program(raw, api.destroy_program);
  for (const auto& e : request.name_expressions) {
    if ((rc = api.add_name_expression(*program, e.c_str())) != 0) {
      return make_error(ErrorCode::invalid_argument,
                        "name expression '" + e + "' rejected: " + api.get_error_string(rc));
    }
  }
  const auto opts = c_strings(options);
  const int compile_rc = api.compile_program(*program, static_cast<int>(opts.size()), opts.data());
  BackendOutput out;
  std::size_t log_size = 0;
  if (api.get_log_size(*program, &log_size) == 0 && log_size > 1) {
    out.log.resize(log_size);
    api.get_log(*program, out.log.data());
    out.log = trim_log(std::move(out.log));
  }
  if (compile_rc != 0) {
    if (rejected != nullptr) {
      *rejected = compile_rc == k_nvrtc_error_compilation;
    }
    return make_error(ErrorCode::compile_failed,
                      "NVRTC could not compile " + request.name + " (" + api.get_error_string(compile_rc) +
                          "); the log says why",
                      out.log);
  }
  std::size_t size = 0;
  if (request.target_kind == "ptx") {
    rc = api.get_ptx_size(*program, &size);
    if (rc == 0) {
      out.payload.resize(size);
      rc = api.get_ptx(*program, out.payload.data());
      // PTX is NUL-terminated text; the payload is the text.
      while (!out.payload.empty() && out.payload.back() == '\0') {
        out.payload.pop_back();
      }
    }
  } else if (request.target_kind == "cubin") {
    rc = api.get_cubin_size(*program, &size);
    if (rc == 0) {
      out.payload.resize(size);
      rc = api.get_cubin(*program, out.payload.data());
    }
  } else {
    rc = api.get_ltoir_size(*program, &size);
    if (rc == 0) {
      out.payload.resize(size);
      rc = api.get_ltoir(*program, out.payload.data());
    }
  }
  if (rc != 0 || out.payload.empty()) {
    return make_error(ErrorCode::compile_failed,
                      "NVRTC produced no " + request.target_kind + " for " + request.name +
                          (rc != 0 ? std::string(" (") + api.get_error_string(rc) + ")" : std::string()) +
                          "; check that the options match the target (cubin needs -arch=sm_XX)",
                      out.log);
  }
  for (const auto& e : request.name_expressions) {
    const char* lowered = nullptr;
    if ((rc = api.get_lowered_name(*program, e.c_str(), &lowered)) != 0 || lowered == nullptr) {
      return make_error(ErrorCode::compile_failed,
                        "no lowered name for name expression '" + e + "': " + api.get_error_string(rc), out.log);
    }
    out.symbols[e] = lowered;
  }
  return out;
}

Result<std::string> run_nvrtc_probe(const CompileRequest& request, const std::vector<std::string>& options) {
  auto out = run_nvrtc(request, options);
  if (!out) {
    return tl::unexpected(out.error());
  }
  return std::move(out->log);
}

Result<BackendOutput> run_nvjitlink(const CompileRequest& request, const std::vector<std::string>& options) {
  auto api_r = nvjitlink_api();
  if (!api_r) {
    return tl::unexpected(api_r.error());
  }
  const NvJitLinkApi& api = **api_r;
  auto opts = c_strings(options);
  NvJitLinkHandle raw = nullptr;
  int rc = api.create(&raw, static_cast<std::uint32_t>(opts.size()), opts.data());
  if (rc != 0 || raw == nullptr) {
    return make_error(ErrorCode::compile_failed,
                      "nvJitLinkCreate failed (" + std::to_string(rc) + "); check the link options");
  }
  const LibraryHandle<NvJitLinkHandle> handle(raw, api.destroy);
  auto logs = [&]() {
    std::string log;
    std::size_t n = 0;
    if (api.get_error_log_size(*handle, &n) == 0 && n > 1) {
      std::string e(n, '\0');
      api.get_error_log(*handle, e.data());
      log += trim_log(std::move(e));
    }
    if (api.get_info_log_size(*handle, &n) == 0 && n > 1) {
      std::string i(n, '\0');
      api.get_info_log(*handle, i.data());
      log += (log.empty() ? "" : "\n") + trim_log(std::move(i));
    }
    return unglue_nvjitlink_names(std::move(log));
  };
  // Errors nvJitLink only prints (see StderrCapture) fail the link too.
  StderrCapture capture;
  bool printed_error = false;
  auto printed = [&]() { return trim_log(clean_nvjitlink_output(capture.finish(), printed_error)); };
  for (const auto& in : request.inputs) {
    int kind = 0;
    if (in.kind == "cubin") {
      kind = static_cast<int>(NvJitLinkInput::cubin);
    } else if (in.kind == "ptx") {
      kind = static_cast<int>(NvJitLinkInput::ptx);
    } else if (in.kind == "ltoir") {
      kind = static_cast<int>(NvJitLinkInput::ltoir);
    } else if (in.kind == "fatbin") {
      kind = static_cast<int>(NvJitLinkInput::fatbin);
    } else if (in.kind == "object") {
      kind = static_cast<int>(NvJitLinkInput::object);
    } else if (in.kind == "library") {
      kind = static_cast<int>(NvJitLinkInput::library);
    } else {
      return make_error(ErrorCode::invalid_argument, "link input '" + in.name + "' has unknown kind '" + in.kind +
                                                         "' (ptx, ltoir, cubin, fatbin, object, library)");
    }
    if ((rc = api.add_data(*handle, kind, in.bytes.data(), in.bytes.size(), in.name.c_str())) != 0) {
      const std::string said = printed();
      return make_error(ErrorCode::compile_failed, "nvJitLink rejected input '" + in.name + "'",
                        said + (said.empty() ? "" : "\n") + logs());
    }
  }
  rc = api.complete(*handle);
  const std::string said = printed();
  auto with_said = [&](std::string log) { return said + (said.empty() || log.empty() ? "" : "\n") + log; };
  if (rc != 0) {
    return make_error(ErrorCode::compile_failed, "nvJitLink could not link (" + std::to_string(rc) + ")",
                      with_said(logs()));
  }
  if (printed_error) {
    return make_error(ErrorCode::compile_failed,
                      "nvJitLink reported an error (though it returned success); nothing was linked or cached",
                      with_said(logs()));
  }
  if (!said.empty()) {
    std::fprintf(stderr, "%s\n", said.c_str());  // warnings it printed: still the user's to see
  }
  BackendOutput out;
  out.log = with_said(logs());
  std::size_t size = 0;
  if (request.target_kind == "ptx") {
    rc = api.get_ptx_size(*handle, &size);
    if (rc == 0) {
      out.payload.resize(size);
      rc = api.get_ptx(*handle, out.payload.data());
      while (!out.payload.empty() && out.payload.back() == '\0') {
        out.payload.pop_back();
      }
    }
  } else {
    rc = api.get_cubin_size(*handle, &size);
    if (rc == 0) {
      out.payload.resize(size);
      rc = api.get_cubin(*handle, out.payload.data());
    }
  }
  if (rc != 0 || out.payload.empty()) {
    return make_error(ErrorCode::compile_failed, "nvJitLink produced no " + request.target_kind, out.log);
  }
  return out;
}

Result<BackendOutput> run_nvvm(const CompileRequest& request, const std::vector<std::string>& options) {
  auto api_r = nvvm_api();
  if (!api_r) {
    return tl::unexpected(api_r.error());
  }
  const NvvmApi& api = **api_r;
  // libNVVM does not promise thread safety across programs: one compile at a time.
  static std::mutex nvvm_mutex;
  std::lock_guard lock(nvvm_mutex);
  NvvmProgramHandle raw = nullptr;
  int rc = api.create_program(&raw);
  if (rc != 0) {
    return make_error(ErrorCode::compile_failed, std::string("nvvmCreateProgram failed: ") + api.get_error_string(rc));
  }
  const LibraryHandle<NvvmProgramHandle> program(raw, api.destroy_program);
  auto log_of = [&]() {
    std::string log;
    std::size_t n = 0;
    if (api.get_log_size(*program, &n) == 0 && n > 1) {
      log.resize(n);
      api.get_log(*program, log.data());
    }
    return trim_log(std::move(log));
  };
  if ((rc = api.add_module(*program, request.source.data(), request.source.size(), request.name.c_str())) != 0) {
    return make_error(ErrorCode::compile_failed, "libNVVM rejected module " + request.name + ": " +
                                                     api.get_error_string(rc), log_of());
  }
  for (const auto& m : request.inputs) {
    if ((rc = api.add_module(*program, m.bytes.data(), m.bytes.size(), m.name.c_str())) != 0) {
      return make_error(ErrorCode::compile_failed, "libNVVM rejected module " + m.name + ": " +
                                                       api.get_error_string(rc), log_of());
    }
  }
  auto opts = c_strings(options);
  rc = api.compile_program(*program, static_cast<int>(opts.size()), opts.data());
  BackendOutput out;
  out.log = log_of();
  if (rc != 0) {
    return make_error(ErrorCode::compile_failed,
                      "libNVVM could not compile " + request.name + " (" + api.get_error_string(rc) + ")", out.log);
  }
  std::size_t size = 0;
  if ((rc = api.get_result_size(*program, &size)) != 0 || size == 0) {
    return make_error(ErrorCode::compile_failed, "libNVVM produced no output", out.log);
  }
  out.payload.resize(size);
  if ((rc = api.get_result(*program, out.payload.data())) != 0) {
    return make_error(ErrorCode::compile_failed, "libNVVM produced no output", out.log);
  }
  if (request.target_kind == "ptx") {
    while (!out.payload.empty() && out.payload.back() == '\0') {
      out.payload.pop_back();
    }
  }
  return out;
}

}  // namespace kcache::jit
