// cache/config_toml.hpp: the config file's TOML values as the text the
// setting parsers take (the same text an environment variable would hold).
#pragma once

#include <optional>
#include <string>

#include <toml++/toml.h>

#include "kcache/error.hpp"

namespace kcache::config_toml {

// A string, integer or boolean as its text; std::nullopt for any other kind
// of value (a table, an array, a date ...).
std::optional<std::string> value_text(const toml::node& node);

// `remote = ["redis://a", {url = "redis://b", read_only = true}]` as the
// space-separated text the `remote` setting takes: a table's members become
// URL attributes. Failure: invalid_argument naming `where` and saying how to
// write the list.
Result<std::string> remote_list_text(const toml::node& node, const std::string& where);

}  // namespace kcache::config_toml
