// kcache/program.hpp: a CUDA C++ program compiled with NVRTC through the cache.
//
//   kcache::Program program(source, "saxpy.cu");
//   program.add_option("-arch=sm_90").add_name_expression("saxpy<float>");
//   auto artifact = program.compile(kcache::CompileTarget::cubin, &store);
//   // artifact->passport.symbols["saxpy<float>"] is the lowered name, also after a
//   // cache hit in a new process.
//
// Thread-safety: a Program is a value; compile() is const and may be called
// from many threads.
#pragma once

#include <string>
#include <string_view>

#include "kcache/artifact.hpp"
#include "kcache/compile_request.hpp"
#include "kcache/compiler.hpp"
#include "kcache/error.hpp"
#include "kcache/store.hpp"

namespace kcache {

// What NVRTC produces.
enum class CompileTarget { ptx, cubin, ltoir };

// Returns "ptx", "cubin" or "ltoir".
std::string_view to_string(CompileTarget target) noexcept;

class Program {
 public:
  // `name` is the program name NVRTC sees (logs, __FILE__); quoted includes of
  // the source are resolved relative to its directory, as NVRTC does.
  Program(std::string source, std::string name);

  // Adds one compiler option as NVRTC would take it ("-arch=sm_90", "-I", "dir" ...).
  Program& add_option(std::string option);
  // Adds an in-memory header that `#include "<name>"` finds before any file.
  Program& add_header(std::string name, std::string content);
  // Adds a name expression ("kernel<float>") whose lowered name goes into the
  // artifact's symbol map.
  Program& add_name_expression(std::string expression);
  // Mixes caller-chosen bytes (anything kcache cannot see) into the key.
  Program& set_extra_digest(std::string digest);

  // Compiles to `target` through `cache` (null: directly). Success: the
  // artifact (kind "ptx" / "cubin" / "ltoir"). Failure: see kcache::compile;
  // compile_failed carries NVRTC's log in Error::log.
  Result<Artifact> compile(CompileTarget target, Store* cache, CompileInfo* info = nullptr) const;

  // The request compile() would run for `target`.
  CompileRequest request(CompileTarget target) const;

 private:
  CompileRequest m_request;
};

}  // namespace kcache
