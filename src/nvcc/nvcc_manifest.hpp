// nvcc/nvcc_manifest.hpp: the entries and files that remember what an nvcc
// compile read (private; docs/nvcc.md, "How a lookup works").
//
// A dependency manifest is a store entry (kind "nvcc-deps", so the cap,
// verify, prune, bundles and every remote tier carry it like any other): the
// headers a compile read, as its dependency file spells them and in its
// order, the names that must stay absent (nvcc/header_state.hpp), and the
// dependency file nvcc wrote, when one was asked for:
//
//   manifest := "kcache-nvcc-deps 1\n" header* group* depfile? "end\n"
//   header   := "h" str(path) "\n"
//   group    := "a" str(dir) num(count) "\n" ("n" str(name) "\n"){count}
//   depfile  := "d" str(text) "\n"
//
// A local memo (one file per input key, <cache>/v1/nvcc/<k0k1>/<key hex>,
// never shared) remembers how the last lookup resolved on this machine: the
// manifest it used, the object key it found, the stat identity and SHA-256 of
// every header, the identity of every directory holding an absent name, and
// the dependency file. While every identity is unchanged the object key is
// known without reading a header: a hit costs one stat per header and
// directory. A directory whose identity changed (the build directory as the
// working directory, an include directory an editor saved a file into) does
// not void the memo when no absent name existed then (`present` 0): the
// manifest's names in that directory are checked one by one (changed_dirs(),
// nvcc_launcher.cpp).
//
//   memo  := "kcache-nvcc-memo 2\n" keys file* dir* depfile? "sum" str(sha256) "\n"
//   keys  := "k" str(input key) str(manifest key) str(object key) str(base_dir) num(present) "\n"
//   file  := "f" str(path) stamp str(sha256) "\n"
//   dir   := "g" str(dir) stamp "\n"
//   stamp := num(dev) num(ino) num(size) num(mtime_ns) num(ctime_ns)
//   (sum: SHA-256 hex of every byte before "sum")
//
// Both are untrusted: strictly parsed (nvcc/record_text.hpp), bounded
// (manifests 16 MiB, memos 16 MiB), and any deviation makes them ignored.
//
// Thread-safety: values.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nvcc/file_stamp.hpp"
#include "nvcc/header_state.hpp"
#include "nvcc/path_rewrite.hpp"

namespace kcache::nvcc {

inline constexpr std::size_t k_manifest_max_bytes = std::size_t{16} << 20;

struct DependencyManifest {
  std::vector<std::string> headers;
  std::vector<AbsentName> absent;  // sorted
  bool has_depfile = false;
  std::string depfile;

  std::string serialize() const;
  static std::optional<DependencyManifest> parse(std::string_view text);
};

struct LocalMemo {
  std::string input_key;
  std::string manifest_key;
  std::string object_key;
  std::string base_dir;             // the base_dir the paths were expanded with (another: not used)
  std::uint64_t present = 0;        // absent names that existed when the memo was made
  std::vector<HeaderFile> headers;  // a zero stamp never matches
  std::vector<std::pair<std::string, FileStamp>> dirs;
  bool has_depfile = false;
  std::string depfile;

  // The memo of a lookup that found (or stored) `object_key` for the headers
  // of `manifest` in `state`: identities changed within the racy window are
  // recorded as zero (never trusted), as are those of the absent names'
  // directories, which are stat'ed now.
  static LocalMemo make(std::string input_key, std::string manifest_key, std::string object_key,
                        const HeaderState& state, const DependencyManifest& manifest, const PathRewrite& rewrite);

  std::string serialize() const;
  static std::optional<LocalMemo> parse(std::string_view text);

  // The memo of `input_key_hex` under `dir` (v1/nvcc); nullopt when none or unusable.
  static std::optional<LocalMemo> load(const std::filesystem::path& dir, const std::string& input_key_hex);
  // Writes it atomically (mode 0600), keeping its shard within 256 files. Best effort.
  void save(const std::filesystem::path& dir) const;
  // True when every header and directory has its remembered identity now.
  bool still_applies() const;
  // When every header has its remembered identity and every directory still
  // exists: the directories whose identity changed or was not trusted (empty
  // when the memo applies as it is); nullopt otherwise.
  std::optional<std::vector<std::string>> changed_dirs() const;
};

}  // namespace kcache::nvcc
