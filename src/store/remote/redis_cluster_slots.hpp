// store/remote/redis_cluster_slots.hpp: which of Redis Cluster's 16384 hash
// slots a key belongs to, as the Redis Cluster specification defines it.
//
//   slot(key) = CRC16(k) mod 16384
//   k         = the text between the first "{" and the first "}" after it,
//               when that text is not empty (a "hash tag"); else the whole key
//   CRC16     = CRC-16/XMODEM: polynomial 0x1021, initial value 0, no
//               reflection, no final xor (CRC16("123456789") = 0x31C3)
//
// kcache's object names ("kcache:v1:<key hex>") hold no braces, so the whole
// name is hashed and entries spread evenly over the masters.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

namespace kcache::remote {

inline constexpr int k_cluster_slots = 16384;

// CRC-16/XMODEM of `bytes`.
std::uint16_t crc16_xmodem(std::string_view bytes) noexcept;

// The hash slot (0..16383) of `key`, hash tags included.
int cluster_key_slot(std::string_view key) noexcept;

}  // namespace kcache::remote
