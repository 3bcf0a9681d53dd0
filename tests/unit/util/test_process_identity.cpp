// util::ProcessIdentity: a writer's identity, judged alive or gone by another process.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include "util/process_identity.hpp"

namespace kcache::util {
namespace {

// Runs `fn` in a forked child and returns its exit status.
template <class Fn>
int in_child(Fn fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::_exit(fn());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ProcessIdentity, TextFormRoundTrips) {
  const ProcessIdentity me = current_process_identity();
  ASSERT_EQ(me.pid, ::getpid());
  ASSERT_NE(me.start, 0U) << "this test machine has /proc";
  ASSERT_NE(me.domain, 0U);
  const std::string text = me.to_string() + "-7.tmp";
  std::string_view rest;
  const auto parsed = ProcessIdentity::parse(text, rest);
  ASSERT_TRUE(parsed.has_value()) << text;
  EXPECT_EQ(parsed->pid, me.pid);
  EXPECT_EQ(parsed->start, me.start);
  EXPECT_EQ(parsed->domain, me.domain);
  EXPECT_EQ(rest, "-7.tmp");
}

TEST(ProcessIdentity, MalformedTextIsRefused) {
  std::string_view rest;
  for (const char* bad : {"", "-1-2-0000000000000001", "0-5-0000000000000001", "12-x-0000000000000001",
                          "12-5-000000000000001", "12-5-000000000000000G", "12", "12-5", "99999999999-5-0000000000000001",
                          "12-5-ABCDEF0000000001"}) {
    EXPECT_FALSE(ProcessIdentity::parse(bad, rest).has_value()) << bad;
  }
}

TEST(ProcessIdentity, ThisProcessIsAliveAndAnEarlierHolderOfItsPidIsGone) {
  ProcessIdentity me = current_process_identity();
  EXPECT_EQ(liveness_of(me), Liveness::alive);
  me.start += 1;  // the same pid, another start time: a reused pid
  EXPECT_EQ(liveness_of(me), Liveness::gone);
}

TEST(ProcessIdentity, QuickCheckOnlyAsksWhetherThePidExists) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  ProcessIdentity other = current_process_identity();
  other.pid = pid;
  other.start = 1;  // not its start time: a full check sees a reused pid
  EXPECT_EQ(liveness_of(other, PidCheck::exists), Liveness::alive);
  EXPECT_EQ(liveness_of(other, PidCheck::full), Liveness::gone);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(liveness_of(other, PidCheck::exists), Liveness::gone);
}

TEST(ProcessIdentity, ChildIsAliveWhileItRunsAndGoneOnceKilled) {
  int go[2];
  int ready[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const ProcessIdentity id = current_process_identity();
    (void)!::write(ready[1], &id, sizeof id);
    char c;
    (void)!::read(go[0], &c, 1);  // blocks until the parent kills it
    ::_exit(0);
  }
  ProcessIdentity child;
  ASSERT_EQ(::read(ready[0], &child, sizeof child), static_cast<ssize_t>(sizeof child));
  EXPECT_EQ(child.pid, pid);
  EXPECT_EQ(child.domain, current_process_identity().domain) << "a fork keeps the boot and pid namespace";
  EXPECT_NE(child.pid, current_process_identity().pid) << "a fork gets its own identity";
  EXPECT_EQ(liveness_of(child), Liveness::alive);
  ::kill(pid, SIGKILL);
  // Killed but not yet reaped: a zombie writes nothing more.
  for (int i = 0; i < 2000 && liveness_of(child) != Liveness::gone; ++i) {
    ::usleep(1000);
  }
  EXPECT_EQ(liveness_of(child), Liveness::gone) << "a killed, unreaped child (zombie)";
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(liveness_of(child), Liveness::gone) << "a reaped child";
  for (int fd : {go[0], go[1], ready[0], ready[1]}) {
    ::close(fd);
  }
}

TEST(ProcessIdentity, ProcessWhoseFirstThreadExitedIsStillAlive) {
  // A first thread that exits alone leaves the process running on its other threads,
  // while /proc/PID/stat shows the first thread as a zombie.
  int ready[2];
  int go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    pthread_t t;
    static int s_go = go[0];
    ::pthread_create(
        &t, nullptr,
        [](void*) -> void* {
          char c;
          (void)!::read(s_go, &c, 1);
          ::_exit(0);
        },
        nullptr);
    const ProcessIdentity id = current_process_identity();
    (void)!::write(ready[1], &id, sizeof id);
    // The first thread alone ends (the exit system call, not exit_group: no
    // unwinding through the test framework).
    ::syscall(SYS_exit, 0);
  }
  ProcessIdentity child;
  ASSERT_EQ(::read(ready[0], &child, sizeof child), static_cast<ssize_t>(sizeof child));
  ::usleep(100'000);  // let the first thread finish exiting (the verdict must be alive either way)
  EXPECT_EQ(liveness_of(child), Liveness::alive) << [&] {
    std::string states;
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(child.pid) + "/task")) {
      std::ifstream in(e.path() / "stat");
      std::string line;
      std::getline(in, line);
      states += line.substr(0, 40) + "\n";
    }
    return states;
  }();
  (void)!::write(go[1], "x", 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(liveness_of(child), Liveness::gone);
  for (int fd : {go[0], go[1], ready[0], ready[1]}) {
    ::close(fd);
  }
}

TEST(ProcessIdentity, IdentityOfAnotherBootOrNamespaceIsNotJudged) {
  ProcessIdentity other = current_process_identity();
  other.domain ^= 1;
  EXPECT_EQ(liveness_of(other), Liveness::unknown);
  other.domain = 0;
  EXPECT_EQ(liveness_of(other), Liveness::unknown);
  // Even for a pid that does not exist here.
  ProcessIdentity far{0x7ffffff0, 5, current_process_identity().domain ^ 2};
  EXPECT_EQ(liveness_of(far), Liveness::unknown);
  far.domain = current_process_identity().domain;
  EXPECT_EQ(liveness_of(far), Liveness::gone);
}

TEST(ProcessIdentity, ForkedChildComputesItsOwnIdentity) {
  const ProcessIdentity parent = current_process_identity();
  EXPECT_EQ(in_child([&] {
              const ProcessIdentity mine = current_process_identity();
              return mine.pid == ::getpid() && mine.pid != parent.pid && mine.domain == parent.domain &&
                             liveness_of(parent) == Liveness::alive && liveness_of(mine) == Liveness::alive
                         ? 0
                         : 1;
            }),
            0);
}

}  // namespace
}  // namespace kcache::util
