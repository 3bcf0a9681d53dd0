// deps/toolkit_memo.hpp: what kcache learned about an installed toolkit,
// remembered in one small file shared by every cache directory (private).
//
// Learning these facts costs a new process milliseconds (loading libnvrtc to
// ask its version: 15-25 ms; listing and reading the package manifests for the
// headers fingerprint), so they are remembered, each under what makes it true:
//   library      a library file's stat identity (path, device, inode, size,
//                mtime and ctime in ns) -> its GNU build-id (or sha256:<hex>)
//   version      a library (nvrtc, nvjitlink, nvvm) and its build-id -> the
//                version that library reported when loaded (a build-id names
//                the bytes of the library, so the version it reports)
//   listing      a digest of the stat identity of the toolkit home, its
//                dist-info/ and libnvrtc's directory -> the fingerprint's input
//                files (i: version.json and each dist-info/*/RECORD; b: each
//                libnvrtc-builtins.so.*)
//   fingerprint  a digest of the stat identity of every input -> the 64-hex
//                headers fingerprint
// An identity that changed less than 2 s before it was read is racy (a second
// write in the same timestamp tick would keep it) and never recorded.
//
// The file (format version 2; strictly parsed, at most 1 MiB; any deviation
// and the whole file is ignored):
//   file     := "kcache-toolkit-memo 2\n" record* "end\n"
//   record   := "library " lib " " stamp " " id " " path "\n"
//             | "version " lib " " id " " version "\n"
//             | "listing " hex32 " " count "\n" (("i "|"b ") path "\n"){count}
//             | "fingerprint " hex32 " " hex64 "\n"
//   lib      := "nvrtc" | "nvjitlink" | "nvvm"
//   stamp    := dev " " ino " " size " " mtime_ns " " ctime_ns   (decimal)
//   id       := [0-9a-z:]{1,80}           version := [0-9a-z./]{1,64}
//   path     := "/" followed by bytes other than LF
// At most k_max_records records of each kind are kept, the newest first.
//
// Thread-safety: a value; Toolkit guards its copy with its mutex.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kcache::jit {

class ToolkitMemo {
public:
  static constexpr std::size_t k_max_records = 16;
  static constexpr std::size_t k_max_bytes = 1u << 20;

  struct Listing {
    std::vector<std::filesystem::path> inputs;
    std::vector<std::filesystem::path> builtins;
  };

  // The memo in `file`; empty when `file` is empty, missing, unreadable or
  // damaged (its facts are then learned again).
  static ToolkitMemo load(const std::filesystem::path& file);

  // The build-id remembered for the library file `path` whose stat is `st`;
  // nullopt when that identity is not remembered.
  std::optional<std::string> build_id(std::string_view lib, const std::filesystem::path& path,
                                      const struct stat& st) const;
  // Remembers it; a racy identity (changed within 2 s of `now_ns`) is not kept.
  void set_build_id(std::string_view lib, const std::filesystem::path& path, const struct stat& st,
                    const std::string& id, std::int64_t now_ns);

  std::optional<std::string> version(std::string_view lib, const std::string& id) const;
  void set_version(std::string_view lib, const std::string& id, const std::string& version);

  // The remembered listing, valid until this memo is changed; null when none.
  const Listing* listing(const std::string& dirs_digest) const;
  void set_listing(const std::string& dirs_digest, const Listing& listing);

  std::optional<std::string> fingerprint(const std::string& inputs_digest) const;
  void set_fingerprint(const std::string& inputs_digest, const std::string& fingerprint);

  // True when the memo holds any record.
  bool has_records() const noexcept { return !m_records.empty(); }

  // True once a set_*() added something load() did not find.
  bool changed() const noexcept { return m_changed; }

  // Writes the records of this memo, merged over those now in `file` (another
  // process may have added some since load()), atomically (temporary file and
  // rename) with mode 0600, creating the parent directory. Best effort: a memo
  // that cannot be written only costs the work again next time.
  void save(const std::filesystem::path& file);

  // The file's text (the grammar above).
  std::string serialize() const;
  // Parses `text`; nullopt on any deviation.
  static std::optional<ToolkitMemo> parse(std::string_view text);

private:
  struct Record {
    std::string kind;          // "library", "version", "listing", "fingerprint"
    std::string key;           // what the value depends on, as written
    std::string value;         // the remembered fact, as written
    Listing listing;           // kind "listing" only
  };
  const Record* find(std::string_view kind, const std::string& key) const;
  void set(Record record);

  std::vector<Record> m_records;  // newest first
  bool m_changed = false;
};

// True when `st` changed less than 2 s before `now_ns` (or lies in the future).
bool stat_is_racy(const struct stat& st, std::int64_t now_ns);

}  // namespace kcache::jit
