#include "worker/compile_progress.hpp"

#include <unistd.h>

#include <string>

namespace kcache::worker {

ProgressStyle progress_style_for(std::FILE* stream) noexcept {
  return ::isatty(::fileno(stream)) == 1 ? ProgressStyle::bar : ProgressStyle::lines;
}

CompileProgress make_progress_printer(std::FILE* stream, ProgressStyle style) {
  return [stream, style](std::size_t done, std::size_t total, const CompileRequest& request,
                         const Result<Artifact>& result) {
    const std::string& name = request.source_path.empty() ? request.name : request.source_path;
    if (style == ProgressStyle::lines) {
      if (result) {
        std::fprintf(stream, "[%zu/%zu] ok %s\n", done, total, name.c_str());
      } else {
        std::fprintf(stream, "[%zu/%zu] FAILED %s: %s\n", done, total, name.c_str(),
                     result.error().describe().c_str());
      }
      std::fflush(stream);
      return;
    }
    constexpr std::size_t k_width = 30;
    const std::size_t filled = total == 0 ? k_width : done * k_width / total;
    std::string bar(filled, '#');
    bar.append(k_width - filled, '.');
    // Failures are printed on their own line above the bar so they stay visible.
    if (!result) {
      std::fprintf(stream, "\r\033[KFAILED %s: %s\n", name.c_str(), result.error().describe().c_str());
    }
    std::fprintf(stream, "\r\033[K[%s] %zu/%zu %s", bar.c_str(), done, total, name.c_str());
    if (done == total) {
      std::fputc('\n', stream);
    }
    std::fflush(stream);
  };
}

}  // namespace kcache::worker
