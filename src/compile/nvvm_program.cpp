#include "kcache/nvvm_program.hpp"

#include <utility>

namespace kcache {

NvvmProgram::NvvmProgram(std::string ir, std::string name) {
  m_request.backend = "nvvm";
  m_request.source = std::move(ir);
  m_request.name = std::move(name);
  m_request.target_kind = "ptx";
}

NvvmProgram& NvvmProgram::add_module(std::string name, std::string bytes) {
  m_request.inputs.push_back({std::move(name), "nvvm", std::move(bytes)});
  return *this;
}

NvvmProgram& NvvmProgram::add_option(std::string option) {
  m_request.options.push_back(std::move(option));
  return *this;
}

NvvmProgram& NvvmProgram::set_extra_digest(std::string digest) {
  m_request.extra_digest = std::move(digest);
  return *this;
}

Result<Artifact> NvvmProgram::compile(Store* cache, CompileInfo* info) const {
  return kcache::compile(m_request, cache, info);
}

}  // namespace kcache
