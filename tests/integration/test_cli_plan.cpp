// The kcache plan / stamp / inspect commands, run as real processes, and P01
// (the plan build killed at random points).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>

#include "plan/sidecar.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"
#include "util/sha256.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;


struct Ran {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs the kcache command with `args` in `cwd`, KCACHE_DIR under `cwd`, and
// the extra environment `env`.
Ran kcache(const fs::path& cwd, const std::vector<std::string>& args,
           const std::vector<std::pair<std::string, std::string>>& env = {}) {
  const fs::path out = cwd / (".stdout-" + std::to_string(::getpid()));
  const fs::path err = cwd / (".stderr-" + std::to_string(::getpid()));
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("KCACHE_DIR", (cwd / "cache").c_str(), 1);
    for (const auto& [name, value] : env) {
      ::setenv(name.c_str(), value.c_str(), 1);
    }
    if (::chdir(cwd.c_str()) != 0) {
      ::_exit(126);
    }
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
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
  int status = 0;
  ::waitpid(pid, &status, 0);
  return Ran{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), test::read_file(out), test::read_file(err)};
}

// A small valid ONNX model (one Identity node).
std::string identity_model() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  auto* node = model.mutable_graph()->add_node();
  node->set_op_type("Identity");
  node->add_input("x");
  node->add_output("y");
  model.mutable_graph()->add_input()->set_name("x");
  model.mutable_graph()->add_output()->set_name("y");
  std::string bytes;
  model.SerializeToString(&bytes);
  return bytes;
}

class CliPlan : public ::testing::Test {
 protected:
  void SetUp() override { test::write_file(m_dir.path() / "in.txt", "input"); }
  test::TempDir m_dir;
};

TEST_F(CliPlan, BuildsThenReusesAndReportsJson) {
  test::write_file(m_dir.path() / "plan.toml", R"(version = 1
output_dir = "out"
[defaults]
builder = "command"
precision = "fp16"
[[entry]]
name = "a"
inputs = ["in.txt"]
command = ["sh", "-c", "cat {input} > {output}"]
[[entry]]
name = "b"
inputs = ["in.txt"]
command = ["sh", "-c", "echo {name}-{precision} > {output}"]
)");
  Ran cold = kcache(m_dir.path(), {"plan", "build", "plan.toml", "--host", "sm=87,jp=6.2,trt=10.3", "--json", "--no-cache"});
  ASSERT_EQ(cold.code, 0) << cold.err;
  auto report = nlohmann::json::parse(cold.out);
  EXPECT_EQ(report["summary"]["built"], 2);
  EXPECT_EQ(report["entries"][0]["outcome"], "BUILT");
  EXPECT_EQ(report["entries"][0]["path"], (m_dir.path() / "out" / "a_sm87_jp62_trt103_fp16.engine").string());
  EXPECT_EQ(test::read_file(m_dir.path() / "out" / "a_sm87_jp62_trt103_fp16.engine"), "input");
  EXPECT_EQ(test::read_file(m_dir.path() / "out" / "b_sm87_jp62_trt103_fp16.engine"), "b-fp16\n");
  Ran warm = kcache(m_dir.path(), {"plan", "build", "plan.toml", "--host", "sm=87,jp=6.2,trt=10.3", "--log-json", "events.jsonl"});
  ASSERT_EQ(warm.code, 0) << warm.err;
  EXPECT_NE(warm.out.find("2 reused"), std::string::npos) << warm.out;
  EXPECT_NE(warm.out.find("REUSED"), std::string::npos);
  std::istringstream events(test::read_file(m_dir.path() / "events.jsonl"));
  std::string line;
  std::vector<std::string> names;
  while (std::getline(events, line)) {
    names.push_back(nlohmann::json::parse(line)["event"]);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"engine.cache.hit", "engine.cache.hit", "engine.build.summary"}));
  Ran sums = kcache(m_dir.path() / "out", {"inspect", "a_sm87_jp62_trt103_fp16.engine", "--json"});
  ASSERT_EQ(sums.code, 0) << sums.err;
  EXPECT_EQ(nlohmann::json::parse(sums.out)["sidecar"], "ok");
}

TEST_F(CliPlan, ContentCacheRefillsADeletedOutputDirectory) {
  test::write_file(m_dir.path() / "plan.toml", "version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\ninputs = [\"in.txt\"]\n"
                                    "command = [\"sh\", \"-c\", \"cat {input} > {output}\"]\n");
  ASSERT_EQ(kcache(m_dir.path(), {"plan", "build", "plan.toml", "--host", "sm=87"}).code, 0);
  fs::remove_all(m_dir.path() / "engines");
  Ran again = kcache(m_dir.path(), {"plan", "build", "plan.toml", "--host", "sm=87", "--json"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["entries"][0]["outcome"], "FETCHED");
  EXPECT_EQ(test::read_file(m_dir.path() / "engines" / "a_sm87_jpna_trtna_fp32.engine"), "input");
}

TEST_F(CliPlan, InvalidPlanExitsWithFileLineAndFix) {
  test::write_file(m_dir.path() / "plan.toml", "version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"comand\"\n[[entry]]\nname = \"a\"\n"
                                    "builder = \"command\"\nshapes = { x = [0] }\ninputs = [\"missing.onnx\"]\n");
  for (const char* sub : {"check", "build"}) {
    Ran r = kcache(m_dir.path(), {"plan", sub, "plan.toml", "--host", "sm=87"});
    if (std::string(sub) == "check") {
      r = kcache(m_dir.path(), {"plan", sub, "plan.toml"});
    }
    EXPECT_EQ(r.code, 1) << sub;
    EXPECT_NE(r.err.find("plan.toml:4: unknown builder 'comand'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("did you mean 'command'?"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("plan.toml:6: duplicate entry name 'a'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("plan.toml:8: shape 'x'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("plan.toml:9: input file 'missing.onnx'"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(m_dir.path() / "engines"));
}

TEST_F(CliPlan, FailingEntryExitsSevenWithAnErrorEvent) {
  test::write_file(m_dir.path() / "plan.toml", R"(version = 1
[defaults]
builder = "command"
[[entry]]
name = "first"
command = ["sh", "-c", "echo 1 > {output}"]
[[entry]]
name = "second"
inputs = ["in.txt"]
command = ["sh", "-c", "echo exploding >&2; exit 9", "{output}"]
[[entry]]
name = "third"
command = ["sh", "-c", "echo 3 > {output}"]
)");
  Ran r = kcache(m_dir.path(), {"plan", "build", "plan.toml", "--host", "sm=87", "--log-json", "-", "--no-cache"});
  EXPECT_EQ(r.code, 7) << r.err;
  EXPECT_NE(r.err.find("entry 'second' failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exploding"), std::string::npos) << r.err;
  bool saw_error = false;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') {
      continue;
    }
    auto e = nlohmann::json::parse(line);
    if (e["event"] == "engine.build.error") {
      saw_error = true;
      EXPECT_EQ(e["name"], "second");
      EXPECT_EQ(e["inputs"][0], (m_dir.path() / "in.txt").string());
    }
  }
  EXPECT_TRUE(saw_error) << r.out;
  EXPECT_TRUE(fs::exists(m_dir.path() / "engines" / "first_sm87_jpna_trtna_fp32.engine"));
  EXPECT_FALSE(fs::exists(m_dir.path() / "engines" / "second_sm87_jpna_trtna_fp32.engine"));
  EXPECT_FALSE(fs::exists(m_dir.path() / "engines" / "third_sm87_jpna_trtna_fp32.engine"));
}

TEST_F(CliPlan, StampAndInspectOnnxModels) {
  test::write_file(m_dir.path() / "m.onnx", identity_model());
  Ran unstamped = kcache(m_dir.path(), {"stamp", "m.onnx", "--check"});
  EXPECT_EQ(unstamped.code, 4);
  EXPECT_NE(unstamped.err.find("no kcache stamp"), std::string::npos) << unstamped.err;
  EXPECT_EQ(kcache(m_dir.path(), {"inspect", "m.onnx"}).code, 4);
  Ran stamped = kcache(m_dir.path(), {"stamp", "m.onnx", "--label", "team=vision"});
  ASSERT_EQ(stamped.code, 0) << stamped.err;
  EXPECT_NE(stamped.out.find("stamped"), std::string::npos);
  const std::string once = test::read_file(m_dir.path() / "m.onnx");
  Ran twice = kcache(m_dir.path(), {"stamp", "m.onnx", "--label", "team=vision"});
  EXPECT_NE(twice.out.find("unchanged"), std::string::npos) << twice.out;
  EXPECT_EQ(test::read_file(m_dir.path() / "m.onnx"), once);
  EXPECT_EQ(kcache(m_dir.path(), {"stamp", "m.onnx", "--check"}).code, 0);
  Ran wrong = kcache(m_dir.path(), {"stamp", "m.onnx", "--check", "--key", std::string(64, 'a')});
  EXPECT_EQ(wrong.code, 4);
  Ran inspect = kcache(m_dir.path(), {"inspect", "m.onnx", "--json"});
  ASSERT_EQ(inspect.code, 0) << inspect.err << inspect.out;
  auto doc = nlohmann::json::parse(inspect.out);
  EXPECT_EQ(doc["onnx_stamp"]["compiled"], "v1");
  EXPECT_EQ(doc["onnx_stamp"]["labels"]["team"], "vision");
}

// The command loads ONNX support (protobuf) on demand: it is not among the
// libraries the dynamic loader maps for every kcache process.
TEST(CliStartup, TheCommandDoesNotLinkProtobufOrOnnx) {
  test::TempDir dir;
  // LD_TRACE_LOADED_OBJECTS makes the dynamic loader list what it would map, then exit (as ldd does).
  Ran trace = kcache(dir.path(), {"--version"}, {{"LD_TRACE_LOADED_OBJECTS", "1"}});
  ASSERT_EQ(trace.code, 0) << trace.err;
  ASSERT_NE(trace.out.find("libc.so"), std::string::npos) << trace.out;
  EXPECT_EQ(trace.out.find("protobuf"), std::string::npos) << trace.out;
  EXPECT_EQ(trace.out.find("onnx"), std::string::npos) << trace.out;
#if KCACHE_STATIC_DEPS
  EXPECT_EQ(trace.out.find("libstdc++"), std::string::npos) << trace.out;
  EXPECT_EQ(trace.out.find("libcrypto"), std::string::npos) << trace.out;
#endif
}

TEST_F(CliPlan, OnnxCommandsSayWhenTheModuleIsMissingAndOthersStillWork) {
  test::write_file(m_dir.path() / "m.onnx", identity_model());
  const std::vector<std::pair<std::string, std::string>> env{{"KCACHE_ONNX_MODULE", "/nonexistent/kcache_onnx.so"}};
  Ran stamp = kcache(m_dir.path(), {"stamp", "m.onnx"}, env);
  EXPECT_EQ(stamp.code, 1);
  EXPECT_NE(stamp.err.find("ONNX support is not available"), std::string::npos) << stamp.err;
  EXPECT_NE(stamp.err.find("/nonexistent/kcache_onnx.so"), std::string::npos) << stamp.err;
  EXPECT_NE(stamp.err.find("KCACHE_ONNX_MODULE"), std::string::npos) << stamp.err;
  Ran inspect = kcache(m_dir.path(), {"inspect", "m.onnx", "--json"}, env);
  EXPECT_EQ(inspect.code, 4);
  EXPECT_NE(inspect.out.find("ONNX support is not available"), std::string::npos) << inspect.out;
  // A library that is no kcache ONNX module is refused by name, not called.
  Ran foreign = kcache(m_dir.path(), {"stamp", "m.onnx"}, {{"KCACHE_ONNX_MODULE", "libc.so.6"}});
  EXPECT_EQ(foreign.code, 1);
  EXPECT_NE(foreign.err.find("is not a kcache ONNX module"), std::string::npos) << foreign.err;
  // A plan without ONNX entries, and the store commands, never need the module.
  test::write_file(m_dir.path() / "plan.toml", "version = 1\noutput_dir = \"out\"\n[[entry]]\nname = \"a\"\n"
                                               "builder = \"command\"\ninputs = [\"in.txt\"]\n"
                                               "command = [\"sh\", \"-c\", \"cat {input} > {output}\"]\n");
  Ran plan = kcache(m_dir.path(), {"plan", "build", "plan.toml", "--host", "sm=87,jp=6.2,trt=10.3"}, env);
  EXPECT_EQ(plan.code, 0) << plan.err;
  EXPECT_EQ(kcache(m_dir.path(), {"ls"}, env).code, 0);
}

TEST_F(CliPlan, OnnxPlanEntriesAreStampedThenCheckedOnReuseThroughTheModule) {
  test::write_file(m_dir.path() / "model.onnx", identity_model());
  test::write_file(m_dir.path() / "plan.toml", R"(version = 1
output_dir = "out"
[[entry]]
name = "m"
builder = "command"
kind = "onnx"
inputs = ["model.onnx"]
command = ["sh", "-c", "cp {input} {output}"]
)");
  const std::vector<std::string> args{"plan", "build", "plan.toml", "--host", "sm=87,jp=6.2,trt=10.3", "--json"};
  Ran cold = kcache(m_dir.path(), args);
  ASSERT_EQ(cold.code, 0) << cold.err;
  const auto report = nlohmann::json::parse(cold.out);
  ASSERT_EQ(report["entries"][0]["outcome"], "BUILT");
  const std::string out = report["entries"][0]["path"];
  Ran check = kcache(m_dir.path(), {"stamp", out, "--check"});
  ASSERT_EQ(check.code, 0) << check.err;
  Ran inspect = kcache(m_dir.path(), {"inspect", out, "--json"});
  ASSERT_EQ(inspect.code, 0) << inspect.err << inspect.out;
  const auto doc = nlohmann::json::parse(inspect.out);
  EXPECT_EQ(doc["onnx_stamp"]["labels"]["plan.entry"], "m");
  EXPECT_EQ(doc["onnx_stamp_ok"], true);
  Ran warm = kcache(m_dir.path(), args);
  ASSERT_EQ(warm.code, 0) << warm.err;
  EXPECT_EQ(nlohmann::json::parse(warm.out)["entries"][0]["outcome"], "REUSED");
  // A model edited after stamping fails the check, so the entry is rebuilt, not reused.
  onnx::ModelProto edited;
  ASSERT_TRUE(edited.ParseFromString(test::read_file(out)));
  edited.mutable_graph()->mutable_node(0)->set_name("edited");
  std::string bytes;
  edited.SerializeToString(&bytes);
  test::write_file(out, bytes);
  Ran again = kcache(m_dir.path(), args);
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(nlohmann::json::parse(again.out)["entries"][0]["outcome"], "REUSED") << again.out;
  EXPECT_EQ(kcache(m_dir.path(), {"stamp", out, "--check"}).code, 0);
}

TEST_F(CliPlan, TwoConcurrentBuildsOfOnePlanBothSucceed) {
  std::string plan = "version = 1\n[defaults]\nbuilder = \"command\"\n";
  for (int i = 0; i < 6; ++i) {
    plan += "[[entry]]\nname = \"c" + std::to_string(i) + "\"\ncommand = [\"sh\", \"-c\", \"sleep 0.05; echo c" +
            std::to_string(i) + " > {output}\"]\n";
  }
  test::write_file(m_dir.path() / "plan.toml", plan);
  std::vector<pid_t> pids;
  for (int p = 0; p < 2; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const Ran r = kcache(m_dir.path(), {"plan", "build", "plan.toml", "--host", "sm=87", "--no-cache", "-j", "3"});
      ::_exit(r.code);
    }
    pids.push_back(pid);
  }
  for (const pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  for (int i = 0; i < 6; ++i) {
    const fs::path engine = m_dir.path() / "engines" / ("c" + std::to_string(i) + "_sm87_jpna_trtna_fp32.engine");
    EXPECT_EQ(test::read_file(engine), "c" + std::to_string(i) + "\n");
    EXPECT_EQ(plan::check_sidecar(engine).state, plan::SidecarState::ok);
  }
  Ran again = kcache(m_dir.path(), {"--json", "plan", "build", "plan.toml", "--host", "sm=87", "--no-cache"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["summary"]["reused"], 6);
}

// True while `pid` is a live process (not gone, not a zombie).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) {
    return false;
  }
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

TEST_F(CliPlan, SigtermEndsTheRunningBuilderToolsToo) {
  const fs::path marker = m_dir.path() / "tool.pid";
  test::write_file(m_dir.path() / "plan.toml", "version = 1\n[[entry]]\nname = \"slow\"\nbuilder = \"command\"\n"
                                    "command = [\"sh\", \"-c\", \"echo $$ > " + marker.string() +
                                    "; exec sleep 30\", \"{output}\"]\n");
  const pid_t pid = ::fork();
  if (pid == 0) {
    const Ran r = kcache(m_dir.path(), {"plan", "build", "plan.toml", "--host", "sm=87", "--no-cache"});
    ::_exit(r.code);
  }
  pid_t tool = 0;
  for (int i = 0; i < 1000 && tool == 0; ++i) {  // up to 10 s for the tool to start
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    tool = static_cast<pid_t>(std::atol(test::read_file(marker).c_str()));
  }
  ASSERT_GT(tool, 0);
  ASSERT_TRUE(alive(tool));
  // The kcache process is the child of our forked helper: find it among the
  // tool's ancestors (the tool's parent is kcache's guardian process).
  auto parent_of = [](pid_t p) {
    std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
    std::string text;
    std::getline(stat, text);
    const auto close = text.rfind(')');
    return close == std::string::npos ? pid_t{0} : static_cast<pid_t>(std::atol(text.c_str() + close + 4));
  };
  pid_t kcache_pid = tool;
  while (kcache_pid > 1 && parent_of(kcache_pid) != pid) {
    kcache_pid = parent_of(kcache_pid);
  }
  ASSERT_GT(kcache_pid, 1);
  ASSERT_EQ(::kill(kcache_pid, SIGTERM), 0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {  // bounded: 5 s
    gone = !alive(tool);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "builder tool " << tool << " still runs after kcache got SIGTERM";
  if (!gone) {
    ::kill(tool, SIGKILL);
  }
  EXPECT_FALSE(fs::exists(m_dir.path() / "engines" / "slow_sm87_jpna_trtna_fp32.engine"));
}

// P01: the plan build killed (SIGKILL / SIGTERM) at random points. Afterwards
// every engine is complete and verified, or absent.
TEST_F(CliPlan, P01KilledPlanBuildLeavesEveryEngineCompleteOrAbsent) {
  constexpr int k_entries = 6;
  constexpr int k_chunks = 12;
  std::string plan = "version = 1\noutput_dir = \"out\"\n[defaults]\nbuilder = \"command\"\n";
  // Each builder writes its output in chunks, slowly, so kills land mid-write too.
  auto expected = [&](int i) {
    std::string out;
    for (int c = 0; c < k_chunks; ++c) {
      out += "entry" + std::to_string(i) + "-chunk" + std::to_string(c) + std::string(2000, static_cast<char>('a' + i)) + "\n";
    }
    return out;
  };
  for (int i = 0; i < k_entries; ++i) {
    plan += "[[entry]]\nname = \"e" + std::to_string(i) + "\"\ncommand = [\"sh\", \"-c\", \"c=0; while [ $c -lt " +
            std::to_string(k_chunks) + " ]; do printf 'entry" + std::to_string(i) + "-chunk%d%s\\\\n' $c " +
            "$(printf '%2000s' '' | tr ' ' '" + std::string(1, static_cast<char>('a' + i)) +
            "') >> {output}; c=$((c+1)); done\"]\n";
  }
  test::write_file(m_dir.path() / "plan.toml", plan);
  // Sanity: an uninterrupted build produces exactly the expected bytes; its
  // duration bounds the random kill times so kills land everywhere in a build.
  int full_us = 0;
  {
    test::TempDir ref;
    test::write_file(ref.path() / "plan.toml", plan);
    const auto t0 = std::chrono::steady_clock::now();
    Ran r = kcache(ref.path(), {"plan", "build", "plan.toml", "--host", "sm=87", "--no-cache", "-j", "2"});
    full_us = static_cast<int>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_EQ(test::read_file(ref.path() / "out" / "e2_sm87_jpna_trtna_fp32.engine"), expected(2));
  }
  std::mt19937 rng(1234);
  int kills = 0;
  int complete_seen = 0;
  int wrong = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  for (int round = 0; round < 30 && std::chrono::steady_clock::now() < deadline; ++round) {
    if (round % 3 == 0) {
      fs::remove_all(m_dir.path() / "out");  // start cold again now and then
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("KCACHE_DIR", (m_dir.path() / "cache").c_str(), 1);
      ::chdir(m_dir.path().c_str());
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      ::execl(KCACHE_CLI_PATH, KCACHE_CLI_PATH, "plan", "build", "plan.toml", "--host", "sm=87", "--no-cache", "-j", "2",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, full_us * 11 / 10)(rng)));
    const int sig = (round % 2 == 0) ? SIGKILL : SIGTERM;
    if (::kill(pid, sig) == 0) {
      ++kills;
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    // Every visible engine is complete; every visible sidecar verifies its file.
    for (int i = 0; i < k_entries; ++i) {
      const fs::path engine = m_dir.path() / "out" / ("e" + std::to_string(i) + "_sm87_jpna_trtna_fp32.engine");
      if (fs::exists(engine)) {
        if (test::read_file(engine) != expected(i)) {
          ++wrong;
          ADD_FAILURE() << "partial or wrong engine " << engine << " after round " << round;
        }
        ++complete_seen;
      }
      if (fs::exists(plan::sidecar_path(engine))) {
        EXPECT_EQ(plan::check_sidecar(engine).state, plan::SidecarState::ok) << engine;
      }
    }
    std::error_code ec;
    for (const auto& f : fs::directory_iterator(m_dir.path() / "out", ec)) {
      const std::string name = f.path().filename().string();
      EXPECT_TRUE(name == ".kcache-staging" || name.ends_with(".engine") || name.ends_with(".engine.sha256") ||
                  name.ends_with(".engine.pass"))
          << "unexpected file " << name;
    }
  }
  // A final uninterrupted run completes everything and sweeps the staging leftovers.
  Ran last = kcache(m_dir.path(), {"plan", "build", "plan.toml", "--host", "sm=87", "--no-cache", "--json"});
  ASSERT_EQ(last.code, 0) << last.err;
  for (int i = 0; i < k_entries; ++i) {
    const fs::path engine = m_dir.path() / "out" / ("e" + std::to_string(i) + "_sm87_jpna_trtna_fp32.engine");
    EXPECT_EQ(test::read_file(engine), expected(i));
    EXPECT_EQ(plan::check_sidecar(engine).state, plan::SidecarState::ok);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // orphaned tool processes finish
  Ran sweep = kcache(m_dir.path(), {"plan", "build", "plan.toml", "--host", "sm=87", "--no-cache"});
  ASSERT_EQ(sweep.code, 0);
  std::size_t leftovers = 0;
  for (const auto& f : fs::directory_iterator(m_dir.path() / "out" / ".kcache-staging")) {
    leftovers += f.path().filename() == "locks" ? 0 : 1;
  }
  EXPECT_EQ(leftovers, 0u);
  EXPECT_EQ(wrong, 0);
  std::cout << "[P01] rounds_kill_window_us=" << full_us << " kills=" << kills << " engines_checked=" << complete_seen << " wrong_or_partial=" << wrong
            << " staging_leftovers_after_sweep=" << leftovers << "\n";
  RecordProperty("kills", kills);
  RecordProperty("wrong_or_partial", wrong);
}

}  // namespace
}  // namespace kcache
