// util::copy_and_xxh3 and fill_and_xxh3: the copy is exact and the digest is xxh3_64 of it,
// whether the helper thread hashes, this thread does, or both in turn; many
// callers at once and a child of fork() get the same. fill_and_chunk_digest /
// copy_and_chunk_digest: the same with chunk_digest, the chunks filled by two threads.
#include "util/copy_hash.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "util/chunk_digest.hpp"
#include "util/sha256.hpp"

namespace kcache::util {
namespace {

std::string pattern(std::size_t size, std::uint64_t seed) {
  std::string out(size, '\0');
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (std::size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<char>(x);
  }
  return out;
}

// Copies `src` and checks the copy and its digest.
void expect_copied_and_hashed(const std::string& src) {
  std::string dst(src.size(), '\x55');
  const std::uint64_t digest = copy_and_xxh3(dst.data(), src.data(), src.size());
  ASSERT_EQ(dst, src) << src.size();
  EXPECT_EQ(digest, xxh3_64(src)) << src.size();
}

TEST(CopyAndXxh3, CopiesAndHashesTheCopyAtEverySize) {
  for (const std::size_t size :
       {std::size_t{0}, std::size_t{1}, std::size_t{4096}, k_copy_hash_parallel_min - 1, k_copy_hash_parallel_min,
        k_copy_hash_parallel_min + 1, std::size_t{1} << 20, (std::size_t{4} << 20) + 13}) {
    const std::string src = pattern(size, size);
    for (int round = 0; round < 3; ++round) {  // the helper is started by the first, reused after
      expect_copied_and_hashed(src);
    }
  }
}

// fill_and_xxh3 (FileStore's copied large reads: pread per chunk): the bytes
// are filled in order and hashed; a fill that fails stops the fills there and
// its error comes back, whether or not the helper was hashing behind.
TEST(CopyAndXxh3, FillHashesWhatWasFilledAndStopsAtAFailedFill) {
  const std::string src = pattern((std::size_t{4} << 20) + 13, 7);
  std::string dst(src.size(), '\x55');
  std::size_t next = 0;
  int error = -1;
  const ChunkFill fill = [&](char* to, std::size_t offset, std::size_t n) noexcept {
    if (offset != next) {
      return EINVAL;  // out of order
    }
    std::memcpy(to, src.data() + offset, n);
    next = offset + n;
    return 0;
  };
  EXPECT_EQ(fill_and_xxh3(dst.data(), dst.size(), fill, error), xxh3_64(src));
  EXPECT_EQ(error, 0);
  EXPECT_EQ(dst, src);
  std::size_t calls = 0;
  const ChunkFill failing = [&](char* to, std::size_t offset, std::size_t n) noexcept {
    if (++calls == 5) {
      return EPIPE;  // the file ended early
    }
    std::memcpy(to, src.data() + offset, n);
    return 0;
  };
  EXPECT_EQ(fill_and_xxh3(dst.data(), dst.size(), failing, error), 0U);
  EXPECT_EQ(error, EPIPE);
  EXPECT_EQ(calls, 5U);
}

TEST(CopyAndXxh3, ManyCallersAtOnceEachGetTheirOwnDigest) {
  // One helper serves one caller at a time; the others hash on their own thread.
  constexpr int k_threads = 4;
  std::vector<std::string> sources;
  for (int t = 0; t < k_threads; ++t) {
    sources.push_back(pattern((std::size_t{2} << 20) + static_cast<std::size_t>(t) * 4099, 100 + t));
  }
  std::vector<std::thread> threads;
  std::vector<int> wrong(k_threads, 0);
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      const std::string& src = sources[static_cast<std::size_t>(t)];
      std::string dst(src.size(), '\0');
      for (int i = 0; i < 20; ++i) {
        if (copy_and_xxh3(dst.data(), src.data(), src.size()) != xxh3_64(src) || dst != src) {
          ++wrong[static_cast<std::size_t>(t)];
        }
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  EXPECT_EQ(wrong, std::vector<int>(k_threads, 0));
}

TEST(CopyAndXxh3, AChildOfForkHashesWithoutItsParentsHelper) {
  const std::string src = pattern(std::size_t{3} << 20, 7);
  expect_copied_and_hashed(src);  // the parent's helper exists now
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::string dst(src.size(), '\0');
    bool ok = true;
    for (int i = 0; i < 3; ++i) {
      ok = ok && copy_and_xxh3(dst.data(), src.data(), src.size()) == xxh3_64(src) && dst == src;
    }
    ::_exit(ok ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  expect_copied_and_hashed(src);  // and the parent's still works
}

// ------------------------------------------------------------ split fills

TEST(FillAndChunkDigest, FillsEveryByteOnceAndDigestsTheCopyAtEverySize) {
  for (const std::size_t size : {std::size_t{0}, std::size_t{4096}, k_chunked_digest_min - 1, k_chunked_digest_min,
                                 k_chunked_digest_min + 1, (std::size_t{4} << 20) + 13, std::size_t{9} << 20}) {
    const std::string src = pattern(size, size + 1);
    for (int round = 0; round < 3; ++round) {
      std::string dst(size, '\x55');
      std::vector<std::atomic<int>> filled((size + k_digest_chunk - 1) / k_digest_chunk + 1);
      std::atomic<bool> misplaced{false};
      int error = -1;
      const ChunkFill fill = [&](char* to, std::size_t offset, std::size_t n) noexcept {
        // From either thread, each chunk once, at its own place.
        if (to != dst.data() + offset || n == 0 || offset + n > size) {
          misplaced = true;
          return EINVAL;
        }
        filled[offset / k_digest_chunk].fetch_add(1);
        std::memcpy(to, src.data() + offset, n);
        return 0;
      };
      EXPECT_EQ(fill_and_chunk_digest(dst.data(), size, fill, error), chunk_digest(src)) << size;
      EXPECT_EQ(error, 0);
      EXPECT_FALSE(misplaced);
      ASSERT_EQ(dst, src) << size;
      if (size >= k_chunked_digest_min) {
        for (std::size_t i = 0; i + 1 < filled.size(); ++i) {
          EXPECT_EQ(filled[i].load(), 1) << size << " chunk " << i;
        }
      }
      std::string copy(size, '\0');
      EXPECT_EQ(copy_and_chunk_digest(copy.data(), src.data(), size), chunk_digest(src)) << size;
      EXPECT_EQ(copy, src);
    }
  }
}

TEST(FillAndChunkDigest, AFailedFillOnEitherThreadComesBackAndNothingTouchesTheBufferAfter) {
  const std::string src = pattern((std::size_t{8} << 20) + 7, 3);
  for (const std::size_t failing_chunk : {std::size_t{0}, std::size_t{5}, std::size_t{32}}) {
    std::string dst(src.size(), '\0');
    std::atomic<int> in_flight{0};
    std::atomic<bool> after_return{false};
    std::atomic<bool> returned{false};
    int error = 0;
    const ChunkFill fill = [&](char* to, std::size_t offset, std::size_t n) noexcept {
      in_flight.fetch_add(1);
      if (returned.load()) {
        after_return = true;
      }
      int e = 0;
      if (offset / k_digest_chunk == failing_chunk) {
        e = EPIPE;  // the file ended early
      } else {
        std::memcpy(to, src.data() + offset, n);
      }
      in_flight.fetch_sub(1);
      return e;
    };
    EXPECT_EQ(fill_and_chunk_digest(dst.data(), dst.size(), fill, error), 0U);
    returned = true;
    EXPECT_EQ(error, EPIPE) << failing_chunk;
    EXPECT_EQ(in_flight.load(), 0) << "a fill still running after the call returned";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_FALSE(after_return.load());
  }
}

TEST(FillAndChunkDigest, ManyCallersAtOnceAndAChildOfForkEachGetTheirOwnDigest) {
  constexpr int k_threads = 4;
  std::vector<std::string> sources;
  for (int t = 0; t < k_threads; ++t) {
    sources.push_back(pattern((std::size_t{3} << 20) + static_cast<std::size_t>(t) * 4099, 200 + t));
  }
  std::vector<std::thread> threads;
  std::vector<int> wrong(k_threads, 0);
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      const std::string& src = sources[static_cast<std::size_t>(t)];
      const std::uint64_t want = chunk_digest(src);
      std::string dst(src.size(), '\0');
      for (int i = 0; i < 20; ++i) {
        if (copy_and_chunk_digest(dst.data(), src.data(), src.size()) != want || dst != src) {
          ++wrong[static_cast<std::size_t>(t)];
        }
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  EXPECT_EQ(wrong, std::vector<int>(k_threads, 0));
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::string dst(sources[0].size(), '\0');
    const bool ok = copy_and_chunk_digest(dst.data(), sources[0].data(), dst.size()) == chunk_digest(sources[0]) &&
                    dst == sources[0];
    ::_exit(ok ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace kcache::util
