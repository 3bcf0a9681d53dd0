#include "deps/working_directory.hpp"

#include "deps/source_text.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

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

bool line_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

// Skips blanks and block comments from `i` on the same line.
std::size_t skip_blanks(std::string_view t, std::size_t i) {
  for (;;) {
    while (i < t.size() && line_blank(t[i])) {
      ++i;
    }
    if (t.substr(i, 2) != "/*") {
      return i;
    }
    const auto end = t.find("*/", i + 2);
    i = end == std::string_view::npos ? t.size() : end + 2;
  }
}

bool digit(char c) { return c >= '0' && c <= '9'; }

bool ident_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return digit(c) || c == '_' || c == '$' || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u >= 0x80;
}

}  // namespace

std::string relative_line_directive(std::string_view raw) {
  const std::string joined = joined_text(raw);
  const std::string_view t = joined;
  for (std::size_t at = 0; at < t.size(); ++at) {
    std::size_t i = 0;
    if (t[at] == '#') {
      i = at + 1;
    } else if (t.substr(at, 2) == "%:") {
      i = at + 2;
    } else {
      continue;
    }
    i = skip_blanks(t, i);
    const bool line_word = t.substr(i, 4) == "line" && (i + 4 >= t.size() || !ident_char(t[i + 4]));
    if (line_word) {
      i = skip_blanks(t, i + 4);
    } else if (i >= t.size() || !digit(t[i])) {
      continue;  // neither `#line` nor the `# 12 "name"` form
    }
    const std::size_t eol = std::min(t.find('\n', i), t.size());
    const std::string_view directive = t.substr(at, eol - at);
    if (i >= eol || !digit(t[i])) {
      return std::string(directive);  // `#line NAME`: a macro may form any name
    }
    while (i < eol && digit(t[i])) {
      ++i;
    }
    i = skip_blanks(t, i);
    if (i >= eol || t.substr(i, 2) == "//") {
      continue;  // a line number only
    }
    if (t[i] != '"' || i + 1 >= eol || t[i + 1] != '/') {
      return std::string(directive);  // a relative name, or one a macro forms
    }
  }
  return {};
}

std::string files_with_relative_line(const CompileRequest& request, const std::vector<HeaderDependency>& headers) {
  constexpr std::size_t k_max_header_bytes = std::size_t{64} << 20;
  if (auto d = relative_line_directive(request.source); !d.empty()) {
    return request.name + ": " + d;
  }
  for (const auto& h : request.headers) {
    if (auto d = relative_line_directive(h.bytes); !d.empty()) {
      return "in-memory header " + h.name + ": " + d;
    }
  }
  for (const auto& h : headers) {
    const auto bytes = util::io::read_small_file(h.path, k_max_header_bytes, 0);
    if (!bytes || util::sha256_hex(*bytes) != h.sha256) {
      return h.path + " changed while kcache read it";
    }
    if (auto d = relative_line_directive(*bytes); !d.empty()) {
      return h.path + ": " + d;
    }
  }
  return {};
}

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
