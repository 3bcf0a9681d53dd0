// util/install_location.hpp: where this copy of kcache is installed, and the
// Python environments around it.
//
// kcache ships in two layouts (docs/install.md):
//   FHS (cmake --install, the Debian package)
//       <prefix>/bin/kcache, <prefix>/lib/kcache/{libkcache-interpose.so, kcache_onnx.so}
//   the wheel (pip install kcache-*.whl, in a venv, --user, conda or a system prefix)
//       <prefix>/bin/kcache, <site>/kcache/{_kcache*.so, libkcache-interpose.so, kcache_onnx.so}
//       where <site> is <prefix>/lib/python3.X/site-packages (or dist-packages,
//       or lib64/... where the interpreter uses it)
// kcache's code is linked into each of those binaries, so "this object" is
// whichever of them the calling code was linked into.
//
// Thread-safety: every function is thread-safe; none caches.
#pragma once

#include <filesystem>
#include <string_view>
#include <vector>

namespace kcache::util {

// The absolute path of the ELF object holding kcache's code in this process:
// the executable (from /proc/self/exe) or the shared library (the extension
// module, the stand-in, the ONNX module) this function is linked into. Empty
// when it cannot be told.
std::filesystem::path this_object_path();

// The site directories of the Python installations under `prefix`:
// <prefix>/{lib,lib64}/python3*/{site-packages,dist-packages} that exist, in
// that order (the python3* names sorted). One directory listing of each of
// <prefix>/lib and <prefix>/lib64; nothing when `prefix` is empty.
std::vector<std::filesystem::path> python_site_dirs(const std::filesystem::path& prefix);

// A file installed with the kcache command in <exe_dir> (the stand-in, the
// ONNX module), named by its path relative to <exe_dir> in the FHS layout
// (`fhs_relpath`, such as "../lib/kcache/kcache_onnx.so"):
// <exe_dir>/<fhs_relpath> when that is a regular file, else the first
// <site>/kcache/<file name> that is one, for the site directories of
// <exe_dir>/.. (the wheel's layout); else the FHS path (for error messages).
std::filesystem::path installed_file(const std::filesystem::path& exe_dir, std::string_view fhs_relpath);

// The same, for the running executable's directory (/proc/self/exe). Empty
// when that cannot be read.
std::filesystem::path installed_file(std::string_view fhs_relpath);

}  // namespace kcache::util
