// util::unique_nonce / temp_suffix: distinct across calls, threads and processes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "util/unique_name.hpp"

namespace kcache::util {
namespace {

TEST(UniqueName, DistinctAcrossManyCallsAndThreads) {
  std::vector<std::vector<std::uint64_t>> per_thread(4);
  std::vector<std::thread> threads;
  for (auto& out : per_thread) {
    threads.emplace_back([&out] {
      for (int i = 0; i < 20000; ++i) {
        out.push_back(unique_nonce());
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  std::set<std::uint64_t> all;
  for (const auto& v : per_thread) {
    all.insert(v.begin(), v.end());
  }
  EXPECT_EQ(all.size(), 4u * 20000u);
}

TEST(UniqueName, ForkedChildrenPickOtherNames) {
  // Children forked from one parent share its memory image (the counter, the
  // addresses); the pid and the clock still set their names apart.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  constexpr int k_children = 16;
  for (int i = 0; i < k_children; ++i) {
    if (::fork() == 0) {
      const std::string s = temp_suffix() + "\n";
      (void)!::write(fds[1], s.data(), s.size());
      ::_exit(0);
    }
  }
  ::close(fds[1]);
  for (int i = 0; i < k_children; ++i) {
    ::wait(nullptr);
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) {
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  std::set<std::string> names;
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    names.insert(text.substr(start, nl - start));
  }
  EXPECT_EQ(names.size(), static_cast<std::size_t>(k_children));
  const std::string mine = temp_suffix();
  EXPECT_EQ(mine.rfind(std::to_string(::getpid()) + "-", 0), 0u) << mine;
  EXPECT_EQ(mine.size(), std::to_string(::getpid()).size() + 1 + 16);
}

}  // namespace
}  // namespace kcache::util
