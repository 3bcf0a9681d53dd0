// kcache/nvvm_program.hpp: NVVM IR (text or bitcode) compiled to PTX with libNVVM.
//
//   kcache::NvvmProgram program(ir, "kernel.ll");
//   program.add_module("libdevice.10.bc", libdevice_bytes).add_option("-arch=compute_90");
//   auto ptx = program.compile(&store);
//
// Thread-safety: a value; compile() is const.
#pragma once

#include <concepts>
#include <string>

#include "kcache/artifact.hpp"
#include "kcache/compile_request.hpp"
#include "kcache/compiler.hpp"
#include "kcache/error.hpp"
#include "kcache/store.hpp"

namespace kcache {

class NvvmProgram {
 public:
  // `ir` is the first module (NVVM IR text or bitcode) named `name`.
  NvvmProgram(std::string ir, std::string name);

  // Adds another module (e.g. libdevice) linked into the program; in the key by content.
  NvvmProgram& add_module(std::string name, std::string bytes);
  // The same for another artifact's payload (copied into the request).
  template <std::same_as<Payload> P>
  NvvmProgram& add_module(std::string name, const P& bytes) {
    return add_module(std::move(name), std::string(bytes));
  }
  // Adds a libNVVM option ("-arch=compute_90", "-opt=3", "-ftz=1" ...).
  NvvmProgram& add_option(std::string option);
  NvvmProgram& set_extra_digest(std::string digest);

  // Compiles to PTX through `cache` (null: directly). Failure: compile_failed
  // with libNVVM's log.
  Result<Artifact> compile(Store* cache, CompileInfo* info = nullptr) const;

  const CompileRequest& request() const noexcept { return m_request; }

 private:
  CompileRequest m_request;
};

}  // namespace kcache
