// The worker pool with real `kcache worker` processes: TESTING W01 (crash,
// abort, exit, hang, out of memory, garbage and truncated frames), respawn,
// no zombies, no descriptor leaks.
#include "kcache/worker_pool.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "support/temp_dir.hpp"
#include "unit/worker/worker_test_support.hpp"

using kcache::CompileRequest;
using kcache::ErrorCode;
using kcache::WorkerPool;
using kcache::WorkerPoolOptions;
using namespace std::chrono_literals;

namespace {

WorkerPoolOptions options_with(std::vector<std::string> env = {}, unsigned workers = 1,
                               std::chrono::milliseconds timeout = 60s) {
  WorkerPoolOptions o;
  o.executable = KCACHE_CLI_PATH;
  o.workers = workers;
  o.request_timeout = timeout;
  static kcache::test::TempDir memo;  // the toolkit version memo, not ~/.cache
  env.push_back("KCACHE_DIR=" + memo.path().string());
  o.environment = std::move(env);
  return o;
}

CompileRequest request_named(const std::string& name) {
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = name;
  r.source = "extern \"C\" __global__ void k() {}";
  r.target_kind = "ptx";
  r.options = {"-arch=compute_75"};
  return r;
}

// The answer a healthy worker gives (compiled, or the compiler's own error),
// as opposed to the pool's worker_crashed / timeout.
bool healthy_answer(const kcache::Result<kcache::CompileOutput>& r) {
  if (kcache::test::have_nvrtc()) {
    return r.has_value() && r->artifact.verify().has_value();
  }
  return !r.has_value() && r.error().code == ErrorCode::toolkit_missing;
}

std::size_t zombies() {
  std::size_t n = 0;
  for (const auto& [pid, state] : kcache::test::children_of_self()) {
    n += state == 'Z' ? 1 : 0;
  }
  return n;
}

struct FaultCase {
  const char* mode;
  ErrorCode code;
  const char* says;  // a fragment the error message must contain
};

}  // namespace

TEST(WorkerPool, HealthyWorkerAnswersAndIsReused) {
  auto pool = WorkerPool::create(options_with());
  ASSERT_TRUE(pool.has_value()) << pool.error().describe();
  auto a = (*pool)->compile(request_named("a"));
  ASSERT_TRUE(healthy_answer(a)) << a.error().describe();
  const auto pids = (*pool)->worker_pids();
  ASSERT_EQ(pids.size(), 1U);
  auto b = (*pool)->compile(request_named("b"));
  ASSERT_TRUE(healthy_answer(b));
  EXPECT_EQ((*pool)->worker_pids(), pids);
  EXPECT_EQ((*pool)->stats().spawned, 1U);
  EXPECT_EQ((*pool)->stats().requests, 2U);
}

// TESTING W01: each way a worker can fail costs only its own request; the
// worker is reaped and replaced; no zombie, no leaked descriptor.
TEST(WorkerPool, EachWorkerFaultFailsOnlyItsRequestAndTheWorkerIsReplaced) {
  const FaultCase cases[] = {
      {"crash", ErrorCode::worker_crashed, "SIGSEGV"},
      {"abort", ErrorCode::worker_crashed, "SIGABRT"},
      {"exit", ErrorCode::worker_crashed, "exited with status 3"},
      {"garbage", ErrorCode::worker_crashed, "garbage frame"},
      {"truncate", ErrorCode::worker_crashed, "truncated frame"},
      {"oom", ErrorCode::worker_crashed, "out of memory"},
      {"hang", ErrorCode::timeout, "killed"},
  };
  const int fds_before = kcache::test::open_fd_count();
  for (const auto& c : cases) {
    SCOPED_TRACE(c.mode);
    auto pool = WorkerPool::create(options_with({std::string("KCACHE_WORKER_FAULT=") + c.mode + "@bad"}, 1, 2s));
    ASSERT_TRUE(pool.has_value());
    auto before = (*pool)->compile(request_named("good1"));
    ASSERT_TRUE(healthy_answer(before));
    const auto first_pids = (*pool)->worker_pids();
    auto bad = (*pool)->compile(request_named("bad"));
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error().code, c.code) << bad.error().describe();
    EXPECT_NE(bad.error().message.find(c.says), std::string::npos) << bad.error().message;
    EXPECT_NE(bad.error().message.find("'bad'"), std::string::npos) << bad.error().message;
    EXPECT_TRUE((*pool)->worker_pids().empty());  // reaped at once
    EXPECT_EQ(zombies(), 0U);
    auto after = (*pool)->compile(request_named("good2"));
    ASSERT_TRUE(healthy_answer(after)) << after.error().describe();
    const auto new_pids = (*pool)->worker_pids();
    ASSERT_EQ(new_pids.size(), 1U);
    EXPECT_NE(new_pids, first_pids);  // respawned
    EXPECT_EQ((*pool)->stats().spawned, 2U);
    EXPECT_EQ((*pool)->stats().crashed + (*pool)->stats().timed_out, 1U);
  }
  EXPECT_EQ(kcache::test::open_fd_count(), fds_before);
  EXPECT_TRUE(kcache::test::children_of_self().empty());
}

TEST(WorkerPool, ConcurrentRequestsOnlyTheFaultyOneFails) {
  auto pool = WorkerPool::create(options_with({"KCACHE_WORKER_FAULT=crash@bad"}, 2));
  ASSERT_TRUE(pool.has_value());
  std::vector<kcache::Result<kcache::CompileOutput>> results(6, kcache::make_error(ErrorCode::internal, "unset"));
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] {
      results[i] = (*pool)->compile(request_named(i == 3 ? "bad" : "good" + std::to_string(i)));
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (i == 3) {
      ASSERT_FALSE(results[i].has_value());
      EXPECT_EQ(results[i].error().code, ErrorCode::worker_crashed);
    } else {
      EXPECT_TRUE(healthy_answer(results[i])) << i << ": " << results[i].error().describe();
    }
  }
  EXPECT_EQ((*pool)->stats().crashed, 1U);
}

TEST(WorkerPool, DestroyingThePoolReapsEveryWorker) {
  {
    auto pool = WorkerPool::create(options_with({}, 2));
    ASSERT_TRUE(pool.has_value());
    std::thread t1([&] { (void)(*pool)->compile(request_named("x")); });
    std::thread t2([&] { (void)(*pool)->compile(request_named("y")); });
    t1.join();
    t2.join();
    EXPECT_FALSE(kcache::test::children_of_self().empty());
  }
  EXPECT_TRUE(kcache::test::children_of_self().empty());
}

TEST(WorkerPool, MissingExecutableIsAClearError) {
  WorkerPoolOptions o = options_with();
  o.executable = "/nonexistent/kcache";
  auto pool = WorkerPool::create(o);
  ASSERT_TRUE(pool.has_value());
  auto r = (*pool)->compile(request_named("a"));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::worker_crashed);
  EXPECT_NE(r.error().message.find("cannot start worker /nonexistent/kcache"), std::string::npos)
      << r.error().message;
}

TEST(WorkerPool, ProgramThatDoesNotSpeakTheProtocolIsRefused) {
  WorkerPoolOptions o = options_with();
  o.executable = "/bin/sh";
  o.arguments = {"-c", "echo this is not the kcache worker protocol; exec sleep 30"};
  auto pool = WorkerPool::create(o);
  ASSERT_TRUE(pool.has_value());
  auto r = (*pool)->compile(request_named("a"));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::worker_crashed);
  EXPECT_NE(r.error().message.find("did not start"), std::string::npos) << r.error().message;
  EXPECT_TRUE(kcache::test::children_of_self().empty());
}

TEST(WorkerPool, WorkerThatNeverSaysHelloTimesOut) {
  WorkerPoolOptions o = options_with();
  o.executable = "/bin/sleep";
  o.arguments = {"30"};
  o.start_timeout = 200ms;
  auto pool = WorkerPool::create(o);
  ASSERT_TRUE(pool.has_value());
  auto r = (*pool)->compile(request_named("a"));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("did not answer in time"), std::string::npos) << r.error().message;
  EXPECT_TRUE(kcache::test::children_of_self().empty());
}

// A worker compiles where the pool's owner is when it asks, not where it was
// when the worker started: relative include paths resolve there.
TEST(WorkerPool, AWorkerCompilesInTheCallersCurrentDirectory) {
  if (!kcache::test::have_nvrtc()) {
    GTEST_SKIP() << "needs NVRTC";
  }
  kcache::test::TempDir tmp;
  for (const char* d : {"a", "b"}) {
    std::filesystem::create_directories(tmp.path() / d / "inc");
    std::ofstream(tmp.path() / d / "inc" / "h.h") << "#define VALUE " << (d[0] == 'a' ? "11111" : "22222") << "\n";
  }
  const auto before = std::filesystem::current_path();
  struct Restore {
    std::filesystem::path dir;
    ~Restore() { std::filesystem::current_path(dir); }
  } restore{before};
  std::filesystem::current_path(tmp.path() / "a");
  auto pool = WorkerPool::create(options_with());  // the worker starts in a/
  ASSERT_TRUE(pool.has_value()) << pool.error().describe();
  CompileRequest r = request_named("k.cu");
  r.source = "#include \"h.h\"\nextern \"C\" __global__ void k(int* p) { *p = VALUE; }\n";
  r.options = {"-arch=compute_75", "-Iinc"};
  const auto compiled_value = [&]() -> std::string {
    auto out = (*pool)->compile(r);
    if (!out) {
      return "error: " + out.error().describe();
    }
    const std::string ptx(out->artifact.payload);
    return ptx.find("11111") != std::string::npos ? "a" : ptx.find("22222") != std::string::npos ? "b" : "?";
  };
  EXPECT_EQ(compiled_value(), "a");
  std::filesystem::current_path(tmp.path() / "b");
  EXPECT_EQ(compiled_value(), "b");
  std::filesystem::current_path(tmp.path() / "a");
  EXPECT_EQ(compiled_value(), "a");
  EXPECT_EQ((*pool)->stats().spawned, 1U);  // one worker, moved each time
}
