#include "kcache/linker.hpp"

#include <utility>

namespace kcache {

Linker::Linker() {
  m_request.backend = "nvjitlink";
  m_request.name = "link";
  m_request.target_kind = "cubin";
}

Linker& Linker::add_option(std::string option) {
  m_request.options.push_back(std::move(option));
  return *this;
}

Linker& Linker::add_input(std::string name, std::string kind, std::string bytes) {
  m_request.inputs.push_back({std::move(name), std::move(kind), std::move(bytes)});
  return *this;
}

Linker& Linker::set_extra_digest(std::string digest) {
  m_request.extra_digest = std::move(digest);
  return *this;
}

Result<Artifact> Linker::link(Store* cache, CompileInfo* info) const { return compile(m_request, cache, info); }

}  // namespace kcache
