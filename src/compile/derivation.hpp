// compile/derivation.hpp: everything deriving a request's key learns about it (private).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kcache/compiler.hpp"
#include "kcache/key.hpp"
#include "kcache/key_builder.hpp"
#include "kcache/toolkit.hpp"

namespace kcache::jit {

struct HeaderManifest;

struct Derivation {
  KeyBuilder key{"none"};
  Key key_value;                          // key.key(), computed once
  std::vector<HeaderDependency> headers;  // disk headers in the key
  std::string not_cacheable;              // non-empty: compile without the cache
  std::vector<std::string> options;       // canonical options passed to the backend
  std::string arch;
  std::string version;
  ToolkitLibrary library = ToolkitLibrary::nvrtc;
  // For reuse within the process (compile/derivation_memo.hpp): what must be
  // re-checked, the working directory names were resolved against, and the
  // one the key holds (empty when NVRTC does not write it into this output).
  std::shared_ptr<const HeaderManifest> checks;
  std::string scan_directory;
  std::string keyed_directory;
};

}  // namespace kcache::jit
