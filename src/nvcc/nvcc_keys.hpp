// nvcc/nvcc_keys.hpp: the keys of an nvcc compile (private; docs/keys.md,
// "nvcc").
//
// Three kinds, each a KeyBuilder record so `kcache why-miss` can compare them:
// - the root manifest key (domain "nvcc-deps"): every input known before the
//   compile — nvcc's identity, the host compiler's, the environment nvcc and
//   its host compiler read, the working directory where the output names
//   paths, the source's path and bytes, the canonical options, the output
//   kind — plus what shapes the dependency file (its mode, -MT targets or the
//   output path it names, -MP);
// - the next manifest key (domain "nvcc-deps"): the previous manifest key and
//   the digest of the state its headers were found in, for the manifest of a
//   compile whose headers were not the previous one's (an edit added an
//   include) or whose object was not stored for that state;
// - the object key (domain "nvcc"): the inputs, without the dependency-file
//   fields (an object does not depend on them), plus each of the project's
//   headers by content (`header:<path>`, at most 64; more are one digest over
//   their list), one digest over the toolkit's and system's headers
//   (`headers.system`), and the absent names (their digest, and those that
//   exist now).
//
// Thread-safety: functions without shared state.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kcache/key.hpp"
#include "kcache/key_builder.hpp"
#include "nvcc/header_state.hpp"
#include "nvcc/nvcc_command.hpp"
#include "nvcc/path_rewrite.hpp"
#include "nvcc/toolchain.hpp"

namespace kcache::nvcc {

struct DependencyManifest;

struct KeyInputs {
  const NvccCommand* command = nullptr;
  const NvccIdentity* nvcc = nullptr;
  const HostCompiler* host = nullptr;
  std::vector<std::pair<std::string, std::string>> environment;  // name -> value, set ones, sorted by name
  std::string working_directory;  // empty: not keyed
  std::string source_sha256;      // 64 hex
  // base_dir (nvcc/path_rewrite.hpp): paths keyed without it when active;
  // `base_dir` is the key's field for it ("relative", "absolute: <why>",
  // empty without base_dir).
  const PathRewrite* rewrite = nullptr;
  std::string base_dir;
};

// The environment variables that change what nvcc or its host compiler
// produce, for `nvcc`: NVCC_PREPEND_FLAGS, NVCC_APPEND_FLAGS, NVCC_CCBIN,
// every variable nvcc.profile adds to except PATH and LD_LIBRARY_PATH (which
// only decide where programs are found: the programs are keyed by content),
// and those GCC documents (CPATH, C_INCLUDE_PATH, CPLUS_INCLUDE_PATH,
// GCC_EXEC_PREFIX, COMPILER_PATH, SOURCE_DATE_EPOCH, GCC_COMPARE_DEBUG, LANG,
// LC_ALL, LC_CTYPE, LC_MESSAGES). Those set now, with their values, sorted.
std::vector<std::pair<std::string, std::string>> keyed_environment(const NvccIdentity& nvcc);

// True for a header of the project rather than of the toolkit or the system:
// a relative path, or one under an -I or -isystem directory of `command` or
// the source's directory. Only the record's shape depends on it (one field
// per project header): every header is in the key either way.
bool is_project_header(const std::string& path, const NvccCommand& command);

Key root_manifest_key(const KeyInputs& in);
KeyBuilder root_manifest_record(const KeyInputs& in);
KeyBuilder next_manifest_record(const Key& parent, const HeaderState& state);
KeyBuilder object_record(const KeyInputs& in, const DependencyManifest& manifest, const HeaderState& state);

}  // namespace kcache::nvcc
