// kcache/linker.hpp: links PTX / LTO-IR / cubin / fatbin inputs with nvJitLink.
//
//   kcache::Linker linker;
//   linker.add_option("-arch=sm_90").add_option("-lto");
//   linker.add_input("a.ltoir", "ltoir", a_bytes).add_input("b.ltoir", "ltoir", b_bytes);
//   auto cubin = linker.link(&store);
//
// Thread-safety: a Linker is a value; link() is const.
#pragma once

#include <concepts>
#include <string>

#include "kcache/artifact.hpp"
#include "kcache/compile_request.hpp"
#include "kcache/compiler.hpp"
#include "kcache/error.hpp"
#include "kcache/store.hpp"

namespace kcache {

class Linker {
 public:
  Linker();

  // Adds one nvJitLink option ("-arch=sm_90", "-lto", "-O3" ...).
  Linker& add_option(std::string option);
  // Adds an input: `kind` is "ptx", "ltoir", "cubin", "fatbin", "object" or
  // "library"; its bytes go into the key by content.
  Linker& add_input(std::string name, std::string kind, std::string bytes);
  // The same for another artifact's payload (copied into the request).
  template <std::same_as<Payload> P>
  Linker& add_input(std::string name, std::string kind, const P& bytes) {
    return add_input(std::move(name), std::move(kind), std::string(bytes));
  }
  Linker& set_extra_digest(std::string digest);

  // Links to a cubin through `cache` (null: directly). Failure: invalid_argument
  // (no inputs, unknown kind, no -arch), compile_failed with nvJitLink's error log.
  Result<Artifact> link(Store* cache, CompileInfo* info = nullptr) const;

  const CompileRequest& request() const noexcept { return m_request; }

 private:
  CompileRequest m_request;
};

}  // namespace kcache
