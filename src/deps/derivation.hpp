// deps/derivation.hpp: everything deriving a request's key learns about it (private).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kcache/compiler.hpp"
#include "kcache/key.hpp"
#include "kcache/key_builder.hpp"
#include "kcache/toolkit.hpp"

namespace kcache::jit {

struct ManifestChecks;

struct Derivation {
  KeyBuilder key{"none"};
  Key key_value;                          // key.key(), computed once
  HeaderList headers;  // disk headers in the key (shared by copies: a hit reports them without copying)
  std::string not_cacheable;              // non-empty: compile without the cache
  std::vector<std::string> options;       // canonical options passed to the backend
  std::string arch;
  std::string version;
  ToolkitLibrary library = ToolkitLibrary::nvrtc;
  // For reuse within the process (deps/derivation_memo.hpp): what must be
  // re-checked, the working directory names were resolved against, and the
  // one the key holds (empty when NVRTC does not write it into this output).
  std::shared_ptr<const ManifestChecks> checks;
  // False: derived from a family member's manifest whose identities were not
  // checked yet (jit::ScanInput::defer_member_checks): `checks` must pass
  // (derivation_still_holds()) before the key is trusted.
  bool checked = true;
  std::string scan_directory;
  std::string keyed_directory;
  // base_dir (deps/base_dir.hpp): the setting when derived, the base the
  // key's paths are relative to (empty: absolute), the relative key whose
  // verdict decided it, and where verdicts are remembered.
  std::string base_dir_setting;
  std::string base_dir;
  std::string relative_key;
  std::filesystem::path memo_dir;
  // Set when `key` is an evidence key whose evidence the compile must gather
  // (compile/name_evidence.hpp): the key with the program name's directory,
  // under which a result is stored when the probe compile disagrees.
  std::shared_ptr<const KeyBuilder> name_full_key;
};

}  // namespace kcache::jit
