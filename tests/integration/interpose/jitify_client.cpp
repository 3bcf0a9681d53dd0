// tests/integration/interpose/jitify_client.cpp: an NVRTC program that
// preprocesses as jitify2 does, written as a user would, for the `kcache run`
// tests of failed compiles (docs/run.md, "Failed compiles"). It knows nothing
// of kcache.
//
//   jitify_client INCLUDE_DIR OUT
//
// jitify2 finds a program's headers by compiling it with `#include
// <__JITIFY_STOP_COMPILATION>` appended: NVRTC stops at the first header it
// cannot open (NVRTC_ERROR_COMPILATION, "catastrophic error: cannot open
// source file ..." in the log); jitify supplies that header from its own
// sources as an in-memory header and compiles again, until the log names only
// the stop header. Then it compiles the program for real. This program does
// the same over a source that includes "widget.h" (a file of INCLUDE_DIR,
// passed as -I) and "gadget.h" (which only this program knows), then compiles
// it for real. Everything NVRTC returns (codes, sizes, logs, PTX, what the
// getters and a lowered name give after a failed compile) is written to OUT,
// so two runs can be compared byte for byte. Exit 0 when the loop ended as
// jitify's does, 1 otherwise.
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "getter_output.hpp"
#include "nvrtc_declarations.hpp"

namespace {

constexpr int k_nvrtc_error_compilation = 6;
constexpr const char* k_stop = "__JITIFY_STOP_COMPILATION";

const char* k_source =
    "#include \"widget.h\"\n"
    "#include \"gadget.h\"\n"
    "template <int N> __global__ void fill(int* p) { p[threadIdx.x] = WIDGET + Gadget<N>::value; }\n";

// The headers only this program knows (jitify's own sources).
std::string known_header(const std::string& name) {
  if (name == "gadget.h") {
    return "#pragma once\ntemplate <int N> struct Gadget { static constexpr int value = 2 * N; };\n";
  }
  return {};
}


// Compiles `source` with `headers` (name, content); appends what NVRTC
// returned to `out`; sets `log` and returns the compile's code.
int compile(std::string& out, const std::string& source, const std::vector<std::pair<std::string, std::string>>& headers,
            const std::vector<std::string>& options, std::string& log) {
  std::vector<const char*> names;
  std::vector<const char*> bodies;
  for (const auto& h : headers) {
    names.push_back(h.first.c_str());
    bodies.push_back(h.second.c_str());
  }
  nvrtcProgram p = nullptr;
  if (nvrtcCreateProgram(&p, source.c_str(), "jitify.cu", static_cast<int>(headers.size()), bodies.data(),
                         names.data()) != 0) {
    out += "create failed\n";
    return -1;
  }
  const int add_rc = nvrtcAddNameExpression(p, "fill<3>");
  std::vector<const char*> opts;
  for (const auto& o : options) {
    opts.push_back(o.c_str());
  }
  const int rc = nvrtcCompileProgram(p, static_cast<int>(opts.size()), opts.data());
  out += "== compile headers=" + std::to_string(headers.size()) + " add_rc=" + std::to_string(add_rc) +
         " rc=" + std::to_string(rc) + "\n";
  log = getter_output(out, "log", p, nvrtcGetProgramLogSize, nvrtcGetProgramLog);
  getter_output(out, "ptx", p, nvrtcGetPTXSize, nvrtcGetPTX);
  getter_output(out, "cubin", p, nvrtcGetCUBINSize, nvrtcGetCUBIN);
  getter_output(out, "ltoir", p, nvrtcGetLTOIRSize, nvrtcGetLTOIR);
  const char* lowered = nullptr;
  const int lrc = nvrtcGetLoweredName(p, "fill<3>", &lowered);
  out += "lowered rc=" + std::to_string(lrc) + " " + (lrc == 0 && lowered != nullptr ? lowered : "-") + "\n";
  out += "add-after rc=" + std::to_string(nvrtcAddNameExpression(p, "fill<4>")) + "\n";
  nvrtcDestroyProgram(&p);
  return rc;
}

// The header NVRTC could not open, as its log names it ("cannot open source
// file \"NAME\""), or empty.
std::string missing_header(const std::string& log) {
  const std::string marker = "cannot open source file \"";
  const auto at = log.find(marker);
  if (at == std::string::npos) {
    return {};
  }
  const auto from = at + marker.size();
  const auto to = log.find('"', from);
  return to == std::string::npos ? std::string() : log.substr(from, to - from);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: jitify_client INCLUDE_DIR OUT\n");
    return 2;
  }
  const std::vector<std::string> options = {"-arch=compute_90", std::string("-I") + argv[1], "-std=c++17"};
  std::string out;
  bool ok = true;
  // Preprocessing: compile with the stop header appended until the log names
  // no header but the stop header (or the compile succeeds: a stop header
  // exists on the search path).
  std::vector<std::pair<std::string, std::string>> headers;
  const std::string stopped = std::string(k_source) + "#include <" + k_stop + ">\n";
  for (int round = 0;; ++round) {
    std::string log;
    const int rc = compile(out, stopped, headers, options, log);
    if (rc == 0) {
      out += "preprocessed: the stop header was found\n";
      break;
    }
    const std::string missing = missing_header(log);
    if (rc != k_nvrtc_error_compilation || missing.empty() || round == 8) {
      out += "preprocessing failed\n";
      ok = false;
      break;
    }
    if (missing == k_stop) {
      out += "preprocessed\n";
      break;
    }
    const std::string body = known_header(missing);
    if (body.empty()) {
      out += "unknown header " + missing + "\n";
      ok = false;
      break;
    }
    headers.emplace_back(missing, body);
  }
  // The real compile.
  std::string log;
  ok = compile(out, k_source, headers, options, log) == 0 && ok;
  FILE* f = std::fopen(argv[2], "wb");
  if (f == nullptr || std::fwrite(out.data(), 1, out.size(), f) != out.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "jitify_client: cannot write %s\n", argv[2]);
    return 1;
  }
  return ok ? 0 : 1;
}
