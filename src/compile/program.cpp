#include "kcache/program.hpp"

#include <utility>

namespace kcache {

std::string_view to_string(CompileTarget target) noexcept {
  switch (target) {
    case CompileTarget::ptx:
      return "ptx";
    case CompileTarget::cubin:
      return "cubin";
    case CompileTarget::ltoir:
      return "ltoir";
  }
  return "unknown";
}

Program::Program(std::string source, std::string name) {
  m_request.backend = "nvrtc";
  m_request.source = std::move(source);
  m_request.name = std::move(name);
}

Program& Program::add_option(std::string option) {
  m_request.options.push_back(std::move(option));
  return *this;
}

Program& Program::add_header(std::string name, std::string content) {
  m_request.headers.push_back({std::move(name), "header", std::move(content)});
  return *this;
}

Program& Program::add_name_expression(std::string expression) {
  m_request.name_expressions.push_back(std::move(expression));
  return *this;
}

Program& Program::set_extra_digest(std::string digest) {
  m_request.extra_digest = std::move(digest);
  return *this;
}

CompileRequest Program::request(CompileTarget target) const {
  CompileRequest r = m_request;
  r.target_kind = std::string(to_string(target));
  return r;
}

Result<Artifact> Program::compile(CompileTarget target, Store* cache, CompileInfo* info) const {
  return kcache::compile(request(target), cache, info);
}

}  // namespace kcache
