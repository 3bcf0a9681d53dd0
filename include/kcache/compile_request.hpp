// kcache/compile_request.hpp: a compile described as a plain value.
//
// A CompileRequest is everything a backend needs to produce an artifact. It is
// a value so that it can be keyed, sent to a worker process and compiled there
// (docs/worker-protocol.md serialises it). Backends: "nvrtc" (CUDA C++ ->
// ptx/cubin/ltoir), "nvjitlink" (ptx/ltoir/cubin/fatbin inputs -> cubin),
// "nvvm" (NVVM IR -> ptx).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kcache {

// One input of a link or an in-memory header: a name, a kind and bytes.
struct NamedBytes {
  std::string name;
  std::string kind;  // for link inputs: "ptx" "ltoir" "cubin" "fatbin" "object" "library"; headers: "header"
  std::string bytes;
  friend bool operator==(const NamedBytes&, const NamedBytes&) = default;
};

struct CompileRequest {
  std::string backend;                        // "nvrtc" | "nvjitlink" | "nvvm"
  std::string name;                           // program name (appears in logs and __FILE__)
  std::string source;                         // CUDA C++ or NVVM IR (text or bitcode)
  std::string target_kind;                    // "ptx" | "cubin" | "ltoir"
  std::vector<std::string> options;           // compiler options as given
  std::vector<NamedBytes> headers;            // in-memory headers (nvrtc)
  std::vector<std::string> name_expressions;  // nvrtc name expressions
  std::vector<NamedBytes> inputs;             // link inputs (nvjitlink), extra modules (nvvm)
  std::string extra_digest;                   // anything kcache cannot see, chosen by the caller
  std::string source_path;                    // where `source` was read from, for include resolution;
                                              // never part of the key
  friend bool operator==(const CompileRequest&, const CompileRequest&) = default;
};

}  // namespace kcache
