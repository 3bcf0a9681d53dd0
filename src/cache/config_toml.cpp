// The config file's TOML values as setting text (cache/config_toml.hpp).
#include "cache/config_toml.hpp"

#include <fmt/format.h>

namespace kcache::config_toml {

std::optional<std::string> value_text(const toml::node& node) {
  if (const auto* s = node.as_string()) {
    return s->get();
  }
  if (const auto* i = node.as_integer()) {
    return std::to_string(i->get());
  }
  if (const auto* b = node.as_boolean()) {
    return std::string(b->get() ? "true" : "false");
  }
  return std::nullopt;
}

Result<std::string> remote_list_text(const toml::node& node, const std::string& where) {
  const auto* list = node.as_array();
  auto fail = [&](const std::string& why) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{}: setting 'remote' {}; write remote = [\"redis://host:6379\", "
                                  "{{url = \"redis://other:6379\", read_only = true}}]",
                                  where, why));
  };
  if (list == nullptr) {
    return fail("must be a URL, a list of URLs or a list of tables");
  }
  std::string out;
  for (const toml::node& item : *list) {
    std::string url;
    if (const auto* s = item.as_string()) {
      url = s->get();
    } else if (const auto* t = item.as_table()) {
      std::string attrs;
      for (const auto& [name, value] : *t) {
        const auto v = value_text(value);
        if (!v) {
          return fail("has a table member '" + std::string(name.str()) + "' that is not a string, integer or boolean");
        }
        if (name.str() == "url") {
          url = *v;
        } else {
          attrs += (attrs.empty() ? "" : "&") + std::string(name.str()) + "=" + *v;
        }
      }
      if (url.empty()) {
        return fail("has a table without `url`");
      }
      if (!attrs.empty()) {
        url += (url.find('?') == std::string::npos ? "?" : "&") + attrs;
      }
    } else {
      return fail("has an item that is neither a URL nor a table");
    }
    if (url.find_first_of(" \t\n") != std::string::npos) {
      return fail("has a URL with a space; percent-encode it (%20)");
    }
    out += (out.empty() ? "" : " ") + url;
  }
  return out;
}

}  // namespace kcache::config_toml
