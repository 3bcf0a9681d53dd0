#include "util/install_location.hpp"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <string>
#include <system_error>

namespace kcache::util {

namespace fs = std::filesystem;

fs::path this_object_path() {
  Dl_info info{};
  struct link_map* map = nullptr;
  // dladdr's dli_fname is the main program's argv[0] (possibly relative, or a
  // name found on PATH); the link map's name is empty for the main program.
  if (::dladdr1(reinterpret_cast<void*>(&this_object_path), &info, reinterpret_cast<void**>(&map),
                RTLD_DL_LINKMAP) != 0 &&
      map != nullptr && map->l_name != nullptr && map->l_name[0] == '/') {
    return fs::path(map->l_name).lexically_normal();
  }
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe;
}

std::vector<fs::path> python_site_dirs(const fs::path& prefix) {
  std::vector<fs::path> out;
  if (prefix.empty()) {
    return out;
  }
  for (const char* lib : {"lib", "lib64"}) {
    std::vector<fs::path> pythons;
    std::error_code ec;
    for (fs::directory_iterator it(prefix / lib, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().filename().string().rfind("python3", 0) == 0) {
        pythons.push_back(it->path());
      }
    }
    std::sort(pythons.begin(), pythons.end());
    for (const auto& py : pythons) {
      for (const char* site : {"site-packages", "dist-packages"}) {
        if (fs::is_directory(py / site, ec)) {
          out.push_back(py / site);
        }
      }
    }
  }
  return out;
}

fs::path installed_file(const fs::path& exe_dir, std::string_view fhs_relpath) {
  const fs::path fhs = (exe_dir / fs::path(fhs_relpath)).lexically_normal();
  std::error_code ec;
  if (fs::is_regular_file(fhs, ec)) {
    return fhs;
  }
  for (const auto& site : python_site_dirs(exe_dir.parent_path())) {
    const fs::path p = site / "kcache" / fhs.filename();
    if (fs::is_regular_file(p, ec)) {
      return p;
    }
  }
  return fhs;
}

fs::path installed_file(std::string_view fhs_relpath) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : installed_file(exe.parent_path(), fhs_relpath);
}

}  // namespace kcache::util
