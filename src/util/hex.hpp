// util/hex.hpp: lowercase hex encoding and strict decoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kcache::util {

std::string to_hex(const std::uint8_t* data, std::size_t size);

// Returns true when every character is in [0-9a-f] (lowercase only).
bool is_lower_hex(std::string_view text) noexcept;

// Decodes lowercase hex; std::nullopt on odd length or any other character.
std::optional<std::vector<std::uint8_t>> from_hex(std::string_view text);

}  // namespace kcache::util
