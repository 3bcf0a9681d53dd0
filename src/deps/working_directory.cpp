#include "deps/working_directory.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace kcache::jit {

namespace {

bool has_option(const CanonicalOptions& options, std::string_view canonical) {
  return std::find(options.options.begin(), options.options.end(), canonical) != options.options.end();
}

// A path NVRTC joins to the working directory before writing it into a line table.
bool relative(const std::string& path) { return path.empty() || path.front() != '/'; }

}  // namespace

std::string working_directory_embedded_because(const CompileRequest& request, const CanonicalOptions& options) {
  if (request.target_kind == "ltoir") {
    return "ltoir";
  }
  if (has_option(options, "--device-debug")) {
    return "--device-debug";
  }
  if (!has_option(options, "--generate-line-info")) {
    return {};
  }
  // An empty program name is NVRTC's "default_program", relative too.
  std::vector<const std::string*> paths{&request.name};
  for (const auto& h : request.headers) {
    paths.push_back(&h.name);
  }
  for (const auto& d : options.include_dirs) {
    paths.push_back(&d);
  }
  for (const auto& p : options.pre_includes) {
    paths.push_back(&p);
  }
  for (const auto* p : paths) {
    if (relative(*p)) {
      return "--generate-line-info with the relative path '" + *p + "'";
    }
  }
  return {};
}

Result<std::string> nvrtc_working_directory() {
  // LLVM's sys::fs::current_path(), which NVRTC uses.
  if (const char* pwd = std::getenv("PWD"); pwd != nullptr && pwd[0] == '/') {
    struct stat a {};
    struct stat b {};
    if (::stat(pwd, &a) == 0 && ::stat(".", &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
      return std::string(pwd);
    }
  }
  return physical_working_directory();
}

Result<std::string> physical_working_directory() {
  std::string buf(256, '\0');
  for (;;) {
    if (::getcwd(buf.data(), buf.size()) != nullptr) {
      buf.resize(std::char_traits<char>::length(buf.c_str()));
      return buf;
    }
    if (errno != ERANGE) {
      return make_errno_error(errno, "getcwd (NVRTC writes the working directory into this output)");
    }
    buf.resize(buf.size() * 2);
  }
}

std::string current_directory() { return physical_working_directory().value_or(std::string()); }

}  // namespace kcache::jit
