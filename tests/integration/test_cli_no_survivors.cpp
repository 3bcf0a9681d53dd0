// Issue 9 item 4: no process outlives a killed kcache. The kcache command is
// started as a real process with a marker in its environment, SIGKILLed while
// its builder tools (and their children) or its worker processes run, and
// /proc is then scanned for any process that still carries the marker.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/files.hpp"
#include "support/temp_dir.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Live (not zombie) processes whose environment holds `marker` ("NAME=VALUE").
std::vector<pid_t> processes_with(const std::string& marker) {
  std::vector<pid_t> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) {
    return found;
  }
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == ::getpid()) {
      continue;
    }
    const std::string base = std::string("/proc/") + e->d_name;
    std::ifstream stat(base + "/stat");
    std::string stat_line;
    std::getline(stat, stat_line);
    const auto paren = stat_line.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat_line.size() || stat_line[paren + 2] == 'Z') {
      continue;
    }
    std::ifstream env(base + "/environ", std::ios::binary);
    std::string entry;
    while (std::getline(env, entry, '\0')) {
      if (entry == marker) {
        found.push_back(static_cast<pid_t>(pid));
        break;
      }
    }
  }
  ::closedir(proc);
  return found;
}

// Polls until `pred` holds or `limit` passes. Returns whether it held.
template <typename Pred>
bool wait_for(Pred pred, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return false;
    }
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

class NoSurvivors : public ::testing::Test {
 protected:
  void SetUp() override {
    m_marker = "KCACHE_TEST_SURVIVOR_MARK=" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  void TearDown() override {
    // Never leave anything behind, even when the test failed.
    for (const pid_t pid : processes_with(m_marker)) {
      ::kill(pid, SIGKILL);
    }
  }

  // Starts kcache with `args` in the test directory (marker in its
  // environment, output to files there). Returns its pid.
  pid_t start(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env = {}) {
    const fs::path cwd = m_dir.path();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("KCACHE_DIR", (cwd / "cache").c_str(), 1);
      const auto eq = m_marker.find('=');
      ::setenv(m_marker.substr(0, eq).c_str(), m_marker.substr(eq + 1).c_str(), 1);
      for (const auto& [name, value] : env) {
        ::setenv(name.c_str(), value.c_str(), 1);
      }
      if (::chdir(cwd.c_str()) != 0) {
        ::_exit(126);
      }
      const int o = ::open((cwd / ".stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int e = ::open((cwd / ".stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(o, 1);
      ::dup2(e, 2);
      std::vector<char*> argv{const_cast<char*>(KCACHE_CLI_PATH)};
      for (const auto& a : args) {
        argv.push_back(const_cast<char*>(a.c_str()));
      }
      argv.push_back(nullptr);
      ::execv(KCACHE_CLI_PATH, argv.data());
      ::_exit(127);
    }
    return pid;
  }

  // SIGKILLs `pid` once `expected` processes besides it carry the marker,
  // then returns the processes still carrying it after a bounded wait.
  std::vector<pid_t> kill_and_collect_survivors(pid_t pid, std::size_t expected) {
    const bool started = wait_for([&] { return processes_with(m_marker).size() >= expected + 1; }, 60s);
    EXPECT_TRUE(started) << "the children never all started; stderr: " << test::read_file(m_dir.path() / ".stderr");
    const std::size_t before = processes_with(m_marker).size();
    EXPECT_GE(before, expected + 1);
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    wait_for([&] { return processes_with(m_marker).empty(); }, 5s);
    return processes_with(m_marker);
  }

  test::TempDir m_dir;
  std::string m_marker;
};

std::string describe(const std::vector<pid_t>& pids) {
  std::ostringstream out;
  for (const pid_t pid : pids) {
    std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    out << " [" << pid << "] " << cmd;
  }
  return out.str();
}

// A builder whose tool sleeps and has started a child of its own (a
// grandchild of kcache): after a SIGKILL of `kcache plan build`, the tool,
// its child and kcache's helper processes are all gone.
TEST_F(NoSurvivors, KilledPlanBuildLeavesNoBuilderToolOrItsChildren) {
  test::write_file(m_dir.path() / "plan.toml",
                   "version = 1\n[defaults]\nbuilder = \"command\"\n"
                   "[[entry]]\nname = \"a\"\ncommand = [\"sh\", \"-c\", \"sleep 300 & sleep 301; echo a > {output}\"]\n"
                   "[[entry]]\nname = \"b\"\ncommand = [\"sh\", \"-c\", \"sleep 302 & sleep 303; echo b > {output}\"]\n");
  const pid_t pid = start({"plan", "build", "plan.toml", "-j", "2"});
  // Each entry: sh, two sleeps (and kcache's guardian process).
  const auto survivors = kill_and_collect_survivors(pid, 6);
  EXPECT_TRUE(survivors.empty()) << survivors.size() << " processes outlived the killed kcache:" << describe(survivors);
}

// A tool that ends normally but left a background child: the child does not
// outlive the build either.
TEST_F(NoSurvivors, FinishedBuilderToolLeavesNoBackgroundChild) {
  test::write_file(m_dir.path() / "plan.toml",
                   "version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\n"
                   "command = [\"sh\", \"-c\", \"sleep 300 >/dev/null 2>&1 & echo a > {output}\"]\n");
  const pid_t pid = start({"plan", "build", "plan.toml"});
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << test::read_file(m_dir.path() / ".stderr");
  EXPECT_EQ(WEXITSTATUS(status), 0) << test::read_file(m_dir.path() / ".stderr");
  wait_for([&] { return processes_with(m_marker).empty(); }, 5s);
  const auto survivors = processes_with(m_marker);
  EXPECT_TRUE(survivors.empty()) << "the tool's background child outlived the build:" << describe(survivors);
}

// `kcache compile -j 2` with workers that hang in their compile: after a
// SIGKILL of kcache no worker is left.
TEST_F(NoSurvivors, KilledCompileLeavesNoWorker) {
  test::write_file(m_dir.path() / "a.cu", "extern \"C\" __global__ void a(int* p) { *p = 1; }\n");
  test::write_file(m_dir.path() / "b.cu", "extern \"C\" __global__ void b(int* p) { *p = 2; }\n");
  const pid_t pid =
      start({"compile", "a.cu", "b.cu", "--arch", "sm_90", "-j", "2"}, {{"KCACHE_WORKER_FAULT", "hang"}});
  const auto survivors = kill_and_collect_survivors(pid, 2);
  EXPECT_TRUE(survivors.empty()) << survivors.size() << " workers outlived the killed kcache:" << describe(survivors);
}

}  // namespace
}  // namespace kcache
