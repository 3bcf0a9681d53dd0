#include "support/temp_dir.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <system_error>

namespace kcache::test {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/kcache-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error("mkdtemp failed for " + tmpl);
  }
  m_path = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  // Tests chmod things to 0; make sure removal can descend.
  for (auto it = std::filesystem::recursive_directory_iterator(
           m_path, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code ignore;
    if (it->is_directory(ignore) && !it->is_symlink(ignore)) {
      std::filesystem::permissions(it->path(), std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::add, ignore);
    }
  }
  std::filesystem::remove_all(m_path, ec);
}

}  // namespace kcache::test
