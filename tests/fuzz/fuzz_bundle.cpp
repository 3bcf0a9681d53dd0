// libFuzzer target over the bundle readers (inspect_bundle, verify_bundle),
// keeping the rules of tests/unit/bundle/bundle_fuzz.hpp. Optional, not run
// in CI (CTest runs the seeded mutation loop of test_bundle_fuzz.cpp); build
// and run it with clang (docs/bundle-format.md, "Fuzzing"):
//   CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DKCACHE_FUZZERS=ON \
//     -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKCACHE_BUILD_BENCH=OFF \
//     -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined
//   cmake --build build/fuzz --target fuzz_bundle
//   build/fuzz/tests/fuzz/fuzz_bundle -max_total_time=60 CORPUS_DIR
// A valid bundle (`kcache bundle create ... -o CORPUS_DIR/seed.kcb`) is a good seed.
#include "unit/bundle/bundle_fuzz.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <fcntl.h>
#include <string>
#include <unistd.h>

namespace {

// The file the readers are given: a bundle reader opens a path, as a user's does.
const std::string& input_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string p = std::string(dir != nullptr ? dir : "/tmp") + "/kcache-fuzz-bundle-" + std::to_string(::getpid());
    return p;
  }();
  return path;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = input_path();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror(path.c_str());
    std::abort();
  }
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) {
      std::abort();
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  const std::string broken = kcache::test::check_bundle_readers(
      path, std::string_view(reinterpret_cast<const char*>(data), size), {}, kcache::BundleTrust{});
  if (!broken.empty()) {
    std::fprintf(stderr, "bundle fuzz: %s\n", broken.c_str());
    std::abort();
  }
  return 0;
}
