// The builder registry and command placeholders (see kcache/builder.hpp).
#include "kcache/builder.hpp"

#include "kcache/engine_name.hpp"

namespace kcache {

BuilderRegistry BuilderRegistry::with_shipped_builders() {
  BuilderRegistry r;
  r.add(make_command_builder());
  r.add(make_nvcc_builder());
  r.add(make_nvrtc_builder());
  return r;
}

void BuilderRegistry::add(std::unique_ptr<Builder> builder) {
  if (!builder) {
    return;
  }
  std::string name(builder->name());
  m_builders[name] = std::move(builder);
}

const Builder* BuilderRegistry::find(std::string_view name) const {
  const auto it = m_builders.find(name);
  return it == m_builders.end() ? nullptr : it->second.get();
}

std::vector<std::string> BuilderRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, b] : m_builders) {
    out.push_back(name);
  }
  return out;
}

namespace {

std::string shapes_text(const PlanEntry& entry) {
  std::string out;
  for (const auto& [name, dims] : entry.shapes) {
    out += (out.empty() ? "" : ",") + name + ":";
    for (std::size_t i = 0; i < dims.size(); ++i) {
      out += (i == 0 ? "" : "x") + std::to_string(dims[i]);
    }
  }
  return out;
}

Result<std::string> placeholder(std::string_view name, const BuildRequest& r) {
  const PlanEntry& e = r.entry;
  if (name == "input") {
    if (e.inputs.empty()) {
      return make_error(ErrorCode::invalid_argument, "{input} is used but the entry has no inputs; add inputs = [\"...\"]");
    }
    return e.inputs.front().string();
  }
  if (name.starts_with("input") && name.size() > 5 && name.find_first_not_of("0123456789", 5) == std::string_view::npos) {
    const std::size_t i = std::stoul(std::string(name.substr(5)));
    if (i >= e.inputs.size()) {
      return make_error(ErrorCode::invalid_argument, "{" + std::string(name) + "} is used but the entry has only " +
                                                         std::to_string(e.inputs.size()) + " input(s)");
    }
    return e.inputs[i].string();
  }
  if (name == "output") {
    return r.output.string();
  }
  if (name == "precision") {
    return e.precision;
  }
  if (name == "sm") {
    return r.host.sm;
  }
  if (name == "jp") {
    return version_tag(r.host.jetpack);
  }
  if (name == "trt") {
    return version_tag(r.host.trt);
  }
  if (name == "cuda") {
    return r.host.cuda;
  }
  if (name == "name") {
    return e.name;
  }
  if (name == "kind") {
    return r.kind;
  }
  if (name == "workdir") {
    return r.work_dir.string();
  }
  if (name == "shapes") {
    return shapes_text(e);
  }
  if (name.starts_with("opt.")) {
    const auto it = e.options.find(std::string(name.substr(4)));
    if (it == e.options.end()) {
      return make_error(ErrorCode::invalid_argument,
                        "{" + std::string(name) + "} names an option the entry does not set; add it under options");
    }
    return it->second;
  }
  return make_error(ErrorCode::invalid_argument,
                    "unknown placeholder {" + std::string(name) +
                        "}; use {input} {inputN} {output} {precision} {sm} {jp} {trt} {cuda} {name} {kind} {workdir} "
                        "{shapes} {opt.KEY}, or {{ }} for literal braces");
}

}  // namespace

Result<std::string> expand_placeholders(std::string_view arg, const BuildRequest& request) {
  std::string out;
  for (std::size_t i = 0; i < arg.size(); ++i) {
    const char c = arg[i];
    if (c == '{' && i + 1 < arg.size() && arg[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < arg.size() && arg[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const std::size_t close = arg.find('}', i);
      if (close == std::string_view::npos) {
        return make_error(ErrorCode::invalid_argument,
                          "unclosed '{' in command argument '" + std::string(arg) + "'; write {{ for a literal brace");
      }
      auto value = placeholder(arg.substr(i + 1, close - i - 1), request);
      if (!value) {
        return value;
      }
      out += *value;
      i = close;
    } else if (c == '}') {
      return make_error(ErrorCode::invalid_argument,
                        "stray '}' in command argument '" + std::string(arg) + "'; write }} for a literal brace");
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace kcache
