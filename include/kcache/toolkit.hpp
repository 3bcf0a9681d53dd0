// kcache/toolkit.hpp: finding, identifying and loading the CUDA compiler libraries.
//
// kcache never links against CUDA. The toolkit is found on disk (no dlopen) by
// searching, in order: $KCACHE_CUDA_HOME, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda
// (each: lib64/, lib/, nvvm/lib64/), then the directories of $LD_LIBRARY_PATH
// and the system library directories. A library is identified WITHOUT loading
// it, by its GNU build-id (read from the ELF notes of the file) plus the
// version the library itself reported when it was last loaded (remembered per
// build-id in memory and in the toolkit memo file, see docs/jit.md). Only a compile
// (a cache miss) loads the library with dlopen, and then only the entry points
// kcache uses are resolved.
//
// Thread-safety: every function here is thread-safe; the Toolkit is one object
// per process.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kcache/error.hpp"

namespace kcache {

// The compiler libraries kcache can drive.
enum class ToolkitLibrary { nvrtc, nvjitlink, nvvm };

// Returns "nvrtc", "nvjitlink" or "nvvm".
std::string_view to_string(ToolkitLibrary library) noexcept;

// Who a library is, learned without loading it where possible.
struct LibraryIdentity {
  std::filesystem::path path;  // the file that is (or would be) dlopen'ed
  std::string build_id;        // hex GNU build-id of the file; "sha256:<hex>" of the file when it has none
  std::string version;         // as reported by the library at run time ("13.0"); for nvvm
                               // "<nvvmVersion>/ir<major.minor>/dbg<major.minor>"
  bool version_from_memo = false;  // true: remembered, the library was not loaded to learn it
};

class Toolkit {
 public:
  // The process-wide toolkit.
  static Toolkit& instance();

  // The CUDA home in use (the first candidate directory that holds libnvrtc),
  // or empty when only the loader path found it.
  std::filesystem::path cuda_home();

  // The file of `library` that a load would dlopen (found without loading).
  // toolkit_missing, naming every place searched, when there is none.
  Result<std::filesystem::path> library_path(ToolkitLibrary library);

  // Identifies `library`: path, build-id and run-time version. Loads the
  // library only when its version is not remembered for that build-id (first
  // use on a machine). Returns toolkit_missing, naming every place searched,
  // when the library cannot be found or loaded, or is older than kcache supports
  // (NVRTC/nvJitLink 12.0, libNVVM 2.0).
  Result<LibraryIdentity> identify(ToolkitLibrary library);

  // A digest (64 hex) covering the toolkit's own headers: the content of
  // <cuda>/version.json and of every <cuda>/dist-info/*/RECORD (package
  // manifests that list each installed file's SHA-256), plus the build-id of
  // libnvrtc-builtins, which embeds NVRTC's built-in headers. Computed once per
  // process. Headers under cuda_home() are covered by this fingerprint instead
  // of being hashed one by one (docs/keys.md).
  Result<std::string> headers_fingerprint();

  // The cache directory's memo directory (default: $KCACHE_DIR/v1/toolkit,
  // else $XDG_CACHE_HOME/kcache/v1/toolkit, else ~/.cache/kcache/v1/toolkit;
  // none when KCACHE_DISABLE is true). The header manifests and directory
  // listings live beside it (v1/headers). An empty path turns every memo file
  // off, the toolkit memo too (the in-process memos stay).
  void set_memo_dir(std::filesystem::path dir);
  std::filesystem::path memo_dir();

  // The toolkit memo: one file, shared by every cache directory of the user,
  // that remembers each library file's build-id (under its stat identity),
  // the version each build-id reported, and the headers fingerprint (under
  // the stat identity of its inputs), so a process with a new cache directory
  // loads no library to derive a key (docs/jit.md). Default:
  // $XDG_CACHE_HOME/kcache-toolkit/memo, else ~/.cache/kcache-toolkit/memo,
  // else memo_dir()/memo (also used where the per-user file cannot be read
  // or written); none while memo_dir() is empty. set_memo_file()
  // overrides the default (an empty path: no memo file; nullopt: the default
  // again).
  void set_memo_file(std::optional<std::filesystem::path> file);
  std::filesystem::path memo_file();
  // The per-user default of memo_file(), whatever memo_dir() is; empty when
  // neither XDG_CACHE_HOME nor HOME is an absolute path.
  static std::filesystem::path user_memo_file();

  // How many libraries this process has dlopen'ed (tests and `--json` use it to
  // show that a hit loaded nothing).
  std::uint64_t load_count() const noexcept;

  // True once `library` is loaded in this process.
  bool is_loaded(ToolkitLibrary library) const noexcept;

  // Forgets discovery results (not loaded libraries); for tests that change
  // the environment.
  void reset_discovery();

  // A number that changes whenever what this object reports may change
  // (reset_discovery(), set_memo_dir(), set_memo_file()): results derived from it under one
  // generation hold while it stays the same.
  std::uint64_t generation() const noexcept;

  Toolkit(const Toolkit&) = delete;
  Toolkit& operator=(const Toolkit&) = delete;
  ~Toolkit();

 private:
  Toolkit();
  struct Impl;
  // Loaded libraries are never dlclose'd: handles stay valid for the process.
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache
