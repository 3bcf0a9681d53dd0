#include "deps/user_memo.hpp"

#include <fcntl.h>

#include "util/atomic_write.hpp"
#include "util/posix_io.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

std::optional<std::string> read_memo_file(const MemoPlaces& places, std::string_view name, std::size_t max_bytes) {
  for (const fs::path* dir : {&places.user, &places.fallback}) {
    if (dir->empty()) {
      continue;
    }
    if (auto text = util::io::read_small_file((*dir / name).string(), max_bytes, O_NOFOLLOW)) {
      return text;
    }
  }
  return std::nullopt;
}

bool write_memo_file(const MemoPlaces& places, std::string_view name, std::string_view text) {
  for (const fs::path* dir : {&places.user, &places.fallback}) {
    if (dir->empty()) {
      continue;
    }
    std::error_code ec;
    fs::create_directories(*dir, ec);
    if (util::write_file_atomically(*dir / name, text, 0600, util::FileSync::none)) {
      return true;
    }
  }
  return false;
}

}  // namespace kcache::jit
