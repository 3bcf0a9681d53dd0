// store/file/file_layout.hpp: names and modes of the on-disk format, version 1.
//
// The exact format is docs/on-disk-format.md. In short:
//
//   root      := "v1/" tree
//   tree      := "entries/" shard* | "tmp/" temp* | "locks/" lock* | "stats/" stats
//              | "toolkit/" memo*
//   shard     := HEX2 "/" ( HEX64 | HEX64 ".pass" | HEX64 ".pin" )*
//                                                        HEX2 == first two chars of HEX64;
//                                                        ".pin": an empty marker, the entry
//                                                        is pinned (FileStore::pin)
//   temp      := PID "-" START "-" DOMAIN "-" SEQ ".tmp"   staging: the writer's identity
//                                                          (util/process_identity.hpp) and a
//                                                          per-process sequence number
//   stats     := "counters" | "checks" | "evict.lock"
//
// A temp is swept once its writer is gone; one whose writer cannot be judged
// (another machine, boot or pid namespace; any other name) once it is older
// than FileStoreOptions::stale_temp_age. Anything else under entries/ is junk:
// ignored by get/list, reported by verify. Every directory above must be a
// directory: one that is not makes FileStore::open fail, and
// FileStore::repair_layout moves it aside.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include <optional>

#include "kcache/file_store.hpp"
#include "kcache/key.hpp"
#include "util/process_identity.hpp"

namespace kcache::store {

inline constexpr const char* k_version_dir = "v1";
inline constexpr const char* k_entries_dir = "entries";
inline constexpr const char* k_tmp_dir = "tmp";
inline constexpr const char* k_locks_dir = "locks";
inline constexpr const char* k_stats_dir = "stats";
inline constexpr const char* k_counters_file = "counters";
inline constexpr const char* k_checks_file = "checks";
inline constexpr const char* k_evict_lock_file = "evict.lock";
inline constexpr const char* k_toolkit_dir = "toolkit";
// What a layout directory that is not a directory is renamed to by repair_layout: NAME ".broken-" UNIX_SECONDS.
inline constexpr std::string_view k_broken_suffix = ".broken-";
inline constexpr std::string_view k_passport_suffix = ".pass";
inline constexpr std::string_view k_pin_suffix = ".pin";
inline constexpr std::string_view k_temp_suffix = ".tmp";
inline constexpr unsigned k_shard_count = 256;

inline mode_t dir_mode(Sharing sharing) noexcept {
  return sharing == Sharing::group ? 02770 : 0700;
}
inline mode_t file_mode(Sharing sharing) noexcept {
  return sharing == Sharing::group ? 0660 : 0600;
}

inline bool is_lower_hex_char(char c) noexcept {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

// Returns the shard index (0..255) of a two-hex-digit directory name, or -1.
inline int shard_index(std::string_view name) noexcept {
  if (name.size() != 2 || !is_lower_hex_char(name[0]) || !is_lower_hex_char(name[1])) {
    return -1;
  }
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  return nibble(name[0]) * 16 + nibble(name[1]);
}

inline std::string shard_name(unsigned index) {
  static constexpr char k_digits[] = "0123456789abcdef";
  return {k_digits[(index >> 4) & 15], k_digits[index & 15]};
}

// What a name inside a shard directory is.
enum class EntryName { payload, passport, pin, junk };

// Classifies `name` found in shard `shard`; `key_hex` receives the key part.
inline EntryName classify_entry_name(std::string_view name, unsigned shard, std::string_view& key_hex) {
  std::string_view base = name;
  EntryName kind = EntryName::payload;
  if (base.size() == Key::k_hex_size + k_passport_suffix.size() &&
      base.substr(Key::k_hex_size) == k_passport_suffix) {
    base = base.substr(0, Key::k_hex_size);
    kind = EntryName::passport;
  } else if (base.size() == Key::k_hex_size + k_pin_suffix.size() && base.substr(Key::k_hex_size) == k_pin_suffix) {
    base = base.substr(0, Key::k_hex_size);
    kind = EntryName::pin;
  }
  if (!Key::is_valid_hex(base) || shard_index(base.substr(0, 2)) != static_cast<int>(shard)) {
    return EntryName::junk;
  }
  key_hex = base;
  return kind;
}

// The name of a temp staged by `writer`: PID "-" START "-" DOMAIN "-" SEQ ".tmp".
inline std::string temp_name(const util::ProcessIdentity& writer, std::uint64_t seq) {
  return writer.to_string() + "-" + std::to_string(seq) + std::string(k_temp_suffix);
}

// The writer named by a temp's name, or nullopt for any other name.
inline std::optional<util::ProcessIdentity> temp_writer(std::string_view name) {
  std::string_view rest;
  auto writer = util::ProcessIdentity::parse(name, rest);
  if (!writer || rest.size() < 2 + k_temp_suffix.size() || rest[0] != '-' ||
      rest.substr(rest.size() - k_temp_suffix.size()) != k_temp_suffix) {
    return std::nullopt;
  }
  const std::string_view seq = rest.substr(1, rest.size() - 1 - k_temp_suffix.size());
  if (seq.size() > 20) {
    return std::nullopt;
  }
  for (const char c : seq) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
  }
  return writer;
}

}  // namespace kcache::store
