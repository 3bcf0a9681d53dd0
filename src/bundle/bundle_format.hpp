// bundle/bundle_format.hpp: the bytes of a bundle file, format version 1
// (docs/bundle-format.md is the reference; this is its grammar).
//
//   bundle   := header index entry* trailer
//   header   := magic "KCBUNDLE" (8)          offset 0, 64 bytes, integers little-endian
//               version u32 = 1
//               alignment u32 = 4096           payloads start at multiples of it
//               entry_count u64
//               index_offset u64 = 64
//               file_size u64                  the whole file, trailer included
//               trailer_offset u64 = file_size - 144
//               reserved 16 bytes = 0
//   index    := record * entry_count           sorted by key, strictly ascending
//   record   := key (32 raw bytes)            64 bytes
//               passport_offset u64  passport_size u64
//               payload_offset u64   payload_size u64
//   entry    := passport pad0 payload pad1      one per record, in index order
//   passport := the passport's compact JSON (Passport::to_json), passport_size bytes;
//               the first starts right after the index, each next one right after pad1
//   pad0     := 0x00 * (0..alignment-1)          up to the next multiple of alignment
//   payload  := the raw payload bytes, payload_size of them
//   pad1     := 0x00 * (1..8)                   at least one (the NUL a Payload promises),
//                                               up to the next multiple of 8
//   trailer  := magic "KCBSIGN1" (8)            at trailer_offset, 144 bytes
//               scheme u32                     0 = unsigned, 1 = Ed25519
//               reserved u32 = 0
//               digest (32)                    see below
//               public_key (32)                zero when unsigned
//               signature (64)                 zero when unsigned
//
// digest = SHA-256 over every byte before the trailer except the payload
// bytes, in file order (header, index, passports, padding); each payload is
// covered through payload.sha256 of its passport, which the digest covers and
// every reader checks the payload against.
// signature = Ed25519(private key, "kcache-bundle-v1" (16 bytes) || digest).
//
// A reader recomputes the layout from the sizes and requires every offset to
// be exactly where the writer puts it, so the same entries have exactly one
// encoding (reproducible bundles), and any other arrangement is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace kcache::bundle {

inline constexpr std::string_view k_magic = "KCBUNDLE";
inline constexpr std::string_view k_trailer_magic = "KCBSIGN1";
inline constexpr std::string_view k_signed_prefix = "kcache-bundle-v1";
inline constexpr std::uint32_t k_alignment = 4096;
inline constexpr std::size_t k_header_size = 64;
inline constexpr std::size_t k_record_size = 64;
inline constexpr std::size_t k_trailer_size = 144;
inline constexpr std::uint32_t k_scheme_none = 0;
inline constexpr std::uint32_t k_scheme_ed25519 = 1;

// Offsets inside the header, a record and the trailer.
inline constexpr std::size_t k_header_version = 8;
inline constexpr std::size_t k_header_alignment = 12;
inline constexpr std::size_t k_header_count = 16;
inline constexpr std::size_t k_header_index_offset = 24;
inline constexpr std::size_t k_header_file_size = 32;
inline constexpr std::size_t k_header_trailer_offset = 40;
inline constexpr std::size_t k_record_passport_offset = 32;
inline constexpr std::size_t k_record_passport_size = 40;
inline constexpr std::size_t k_record_payload_offset = 48;
inline constexpr std::size_t k_record_payload_size = 56;
inline constexpr std::size_t k_trailer_scheme = 8;
inline constexpr std::size_t k_trailer_digest = 16;
inline constexpr std::size_t k_trailer_public_key = 48;
inline constexpr std::size_t k_trailer_signature = 80;

inline std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}
// Where a payload starts when its passport ends at `passport_end`.
inline std::uint64_t payload_start(std::uint64_t passport_end) {
  return align_up(passport_end, k_alignment);
}
// Where the next entry (or the trailer) starts when a payload ends at `payload_end`.
inline std::uint64_t next_entry_start(std::uint64_t payload_end) {
  return align_up(payload_end + 1, 8);
}

inline std::uint64_t load_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(p[i]);
  }
  return v;
}
inline std::uint32_t load_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(p[i]);
  }
  return v;
}
inline void store_u64(char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    p[i] = static_cast<char>((v >> (8 * i)) & 0xffU);
  }
}
inline void store_u32(char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) {
    p[i] = static_cast<char>((v >> (8 * i)) & 0xffU);
  }
}

} // namespace kcache::bundle
