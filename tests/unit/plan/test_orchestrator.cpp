#include "kcache/orchestrator.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kcache/memory_store.hpp"
#include "plan/sidecar.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"
#include "util/sha256.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;


// A builder for tests: its output is a pure function of the entry, so every
// published file can be checked byte for byte. It counts its calls and fails
// for the names it is told to.
class ScriptedBuilder final : public Builder {
 public:
  std::string_view name() const noexcept override { return "scripted"; }
  std::string default_kind() const override { return "engine"; }
  Result<void> validate(const PlanEntry&) const override { return {}; }
  void add_key_fields(const PlanEntry&, const HostFingerprint&, KeyBuilder& key) const override {
    key.add("scripted.version", "1");
  }
  Result<BuildOutput> build(const BuildRequest& r) const override {
    ++m_builds;
    {
      std::lock_guard lock(m_mutex);
      if (m_fail.count(r.entry.name) != 0) {
        return make_error(ErrorCode::compile_failed, "scripted failure for " + r.entry.name, "log line\n");
      }
    }
    test::write_file(r.output, expected(r.entry, r.host));
    return BuildOutput{Producer{"scripted", "1"}, "ok\n"};
  }
  static std::string expected(const PlanEntry& e, const HostFingerprint& h) {
    std::string out = "engine:" + e.name + ":" + e.precision + ":sm" + h.sm + ":";
    for (const auto& in : e.inputs) {
      out += test::read_file(in);
    }
    return out;
  }
  void fail(const std::string& name) {
    std::lock_guard lock(m_mutex);
    m_fail.insert(name);
  }
  int builds() const { return m_builds.load(); }

 private:
  mutable std::atomic<int> m_builds{0};
  mutable std::mutex m_mutex;
  std::set<std::string> m_fail;
};

class OrchestratorTest : public ::testing::Test {
 protected:
  OrchestratorTest() {
    auto b = std::make_unique<ScriptedBuilder>();
    m_builder = b.get();
    m_registry = BuilderRegistry::with_shipped_builders();
    m_registry.add(std::move(b));
    m_host = *HostFingerprint::parse("sm=87,jp=6.2,trt=10.3");
  }

  // A plan with `n` scripted entries m0..m{n-1}, each with its own input file.
  Plan plan(int n, const std::string& extra = "") {
    std::string text = "version = 1\noutput_dir = \"out\"\n[defaults]\nbuilder = \"scripted\"\nprecision = \"fp16\"\n" + extra;
    for (int i = 0; i < n; ++i) {
      const std::string name = "m" + std::to_string(i);
      if (!fs::exists(m_dir.path() / (name + ".onnx"))) {
        test::write_file(m_dir.path() / (name + ".onnx"), "input-of-" + name);
      }
      text += "[[entry]]\nname = \"" + name + "\"\ninputs = [\"" + name + ".onnx\"]\n";
    }
    return from_text(text);
  }
  Plan from_text(const std::string& text) {
    PlanLoadOptions options;
    options.builders = m_registry.names();
    auto p = Plan::parse(text, m_dir.path(), (m_dir.path() / "plan.toml").string(), options);
    EXPECT_TRUE(p) << p.error().log;
    return *p;
  }

  PlanReport run(const Plan& p, const HostFingerprint& host, unsigned jobs = 1, KeepGoing keep = KeepGoing::no) {
    m_events.clear();
    OrchestratorOptions o;
    o.builders = &m_registry;
    o.cache = m_cache;
    o.jobs = jobs;
    o.keep_going = keep;
    o.durability = Durability::none;
    o.on_event = [this](std::string_view line) { m_events.push_back(nlohmann::json::parse(line)); };
    Orchestrator orch(std::move(o));
    auto report = orch.run(p, host);
    EXPECT_TRUE(report) << report.error().describe() << "\n" << report.error().log;
    return report ? *report : PlanReport{};
  }
  PlanReport run(const Plan& p) { return run(p, m_host); }

  int count_events(const std::string& name) const {
    int n = 0;
    for (const auto& e : m_events) {
      n += e["event"] == name ? 1 : 0;
    }
    return n;
  }

  // Every published file of `report` holds the scripted bytes and its sidecar verifies.
  void expect_verified(const Plan& p, const PlanReport& report, const HostFingerprint& host) {
    ASSERT_EQ(report.entries.size(), p.entries.size());
    for (std::size_t i = 0; i < p.entries.size(); ++i) {
      const auto& r = report.entries[i];
      EXPECT_EQ(test::read_file(r.path), ScriptedBuilder::expected(p.entries[i], host)) << r.name;
      EXPECT_EQ(plan::check_sidecar(r.path).state, plan::SidecarState::ok) << r.name;
      EXPECT_EQ(r.sha256, util::sha256_hex(test::read_file(r.path)));
      EXPECT_TRUE(fs::exists(plan_passport_path(r.path)));
    }
  }

  test::TempDir m_dir;
  ScriptedBuilder* m_builder = nullptr;  // owned by m_registry
  BuilderRegistry m_registry;
  HostFingerprint m_host;
  Store* m_cache = nullptr;
  std::vector<nlohmann::json> m_events;
};

TEST_F(OrchestratorTest, ColdPlanBuildsEveryEntryWithOneMissEach) {
  const Plan p = plan(3);
  const PlanReport report = run(p);
  EXPECT_TRUE(report.ok());
  for (const auto& r : report.entries) {
    EXPECT_EQ(r.outcome, Outcome::built) << r.name;
    EXPECT_TRUE(r.build_seconds.has_value());
    EXPECT_EQ(r.reason, "absent");
  }
  EXPECT_EQ(report.entries[0].path, (m_dir.path() / "out" / "m0_sm87_jp62_trt103_fp16.engine").string());
  expect_verified(p, report, m_host);
  EXPECT_EQ(m_builder->builds(), 3);
  EXPECT_EQ(count_events("engine.cache.miss"), 3);
  EXPECT_EQ(count_events("engine.cache.hit"), 0);
  ASSERT_EQ(count_events("engine.build.summary"), 1);
  const auto& summary = m_events.back();
  EXPECT_EQ(summary["event"], "engine.build.summary");
  EXPECT_EQ(summary["built"], 3);
  EXPECT_EQ(summary["reused"], 0);
  EXPECT_EQ(report.summary.built, 3u);
  EXPECT_EQ(report.summary.hit_ratio, 0.0);
  // sha256sum -c accepts every sidecar.
  const std::string cmd = "cd '" + (m_dir.path() / "out").string() + "' && sha256sum --status --strict -c *.sha256";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

TEST_F(OrchestratorTest, WarmPlanReusesEverythingWithoutCallingTheBuilder) {
  const Plan p = plan(3);
  run(p);
  const auto before = fs::last_write_time(m_dir.path() / "out" / "m1_sm87_jp62_trt103_fp16.engine");
  const PlanReport warm = run(p);
  EXPECT_EQ(m_builder->builds(), 3);
  for (const auto& r : warm.entries) {
    EXPECT_EQ(r.outcome, Outcome::reused) << r.name;
    EXPECT_FALSE(r.build_seconds.has_value());
  }
  expect_verified(p, warm, m_host);
  EXPECT_EQ(count_events("engine.cache.hit"), 3);
  EXPECT_EQ(count_events("engine.cache.miss"), 0);
  EXPECT_EQ(warm.summary.reused, 3u);
  EXPECT_EQ(warm.summary.hit_ratio, 1.0);
  EXPECT_EQ(fs::last_write_time(m_dir.path() / "out" / "m1_sm87_jp62_trt103_fp16.engine"), before);
}

TEST_F(OrchestratorTest, MixedPlanBuildsOnlyWhatIsMissing) {
  Plan p = plan(3);
  run(p);
  fs::remove(m_dir.path() / "out" / "m1_sm87_jp62_trt103_fp16.engine");
  p = plan(4);  // and one new entry
  const PlanReport mixed = run(p);
  EXPECT_EQ(mixed.entries[0].outcome, Outcome::reused);
  EXPECT_EQ(mixed.entries[1].outcome, Outcome::built);
  EXPECT_EQ(mixed.entries[1].reason, "absent");
  EXPECT_EQ(mixed.entries[2].outcome, Outcome::reused);
  EXPECT_EQ(mixed.entries[3].outcome, Outcome::built);
  EXPECT_EQ(m_builder->builds(), 5);
  EXPECT_EQ(mixed.summary.built, 2u);
  EXPECT_EQ(mixed.summary.reused, 2u);
  EXPECT_DOUBLE_EQ(mixed.summary.hit_ratio, 0.5);
  expect_verified(p, mixed, m_host);
}

TEST_F(OrchestratorTest, HostChangeBuildsNewNamesAndLeavesOldFilesUntouched) {
  const Plan p = plan(2);
  const PlanReport first = run(p);
  std::map<std::string, std::pair<std::string, fs::file_time_type>> old;
  for (const auto& f : fs::directory_iterator(m_dir.path() / "out")) {
    if (f.is_regular_file()) {
      old[f.path().string()] = {test::read_file(f.path()), f.last_write_time()};
    }
  }
  EXPECT_EQ(old.size(), 6u);  // 2 x (file, passport, sidecar)
  const HostFingerprint other = *HostFingerprint::parse("sm=90,jp=na,trt=10.8");
  const PlanReport second = run(p, other);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(second.entries[i].outcome, Outcome::built);
    EXPECT_NE(second.entries[i].path, first.entries[i].path);
  }
  EXPECT_EQ(second.entries[0].path, (m_dir.path() / "out" / "m0_sm90_jpna_trt108_fp16.engine").string());
  expect_verified(p, second, other);
  for (const auto& [path, content] : old) {
    EXPECT_EQ(test::read_file(path), content.first) << path;
    EXPECT_EQ(fs::last_write_time(path), content.second) << path;
  }
}

TEST_F(OrchestratorTest, FlippedBitInAnEngineIsDetectedAndRebuilt) {
  const Plan p = plan(2);
  run(p);
  const fs::path engine = m_dir.path() / "out" / "m0_sm87_jp62_trt103_fp16.engine";
  std::string bytes = test::read_file(engine);
  bytes[3] = static_cast<char>(bytes[3] ^ 0x10);
  test::write_file(engine, bytes);
  const PlanReport again = run(p);
  EXPECT_EQ(again.entries[0].outcome, Outcome::built);
  EXPECT_EQ(again.entries[0].reason, "sidecar mismatch");
  EXPECT_EQ(again.entries[1].outcome, Outcome::reused);
  ASSERT_EQ(count_events("engine.sidecar.mismatch"), 1);
  for (const auto& e : m_events) {
    if (e["event"] == "engine.sidecar.mismatch") {
      EXPECT_EQ(e["name"], "m0");
      EXPECT_EQ(e["actual"], util::sha256_hex(bytes));
    }
  }
  expect_verified(p, again, m_host);
  EXPECT_EQ(m_builder->builds(), 3);
}

TEST_F(OrchestratorTest, FlippedBitInASidecarIsDetectedAndRebuilt) {
  const Plan p = plan(2);
  run(p);
  const fs::path sidecar = m_dir.path() / "out" / "m1_sm87_jp62_trt103_fp16.engine.sha256";
  std::string text = test::read_file(sidecar);
  text[0] = text[0] == '0' ? '1' : '0';
  test::write_file(sidecar, text);
  const PlanReport again = run(p);
  EXPECT_EQ(again.entries[0].outcome, Outcome::reused);
  EXPECT_EQ(again.entries[1].outcome, Outcome::built);
  EXPECT_EQ(count_events("engine.sidecar.mismatch"), 1);
  expect_verified(p, again, m_host);
}

TEST_F(OrchestratorTest, BuilderErrorOnSecondOfThreeStopsTheBuild) {
  const Plan p = plan(3);
  m_builder->fail("m1");
  const PlanReport report = run(p);
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.entries[0].outcome, Outcome::built);
  EXPECT_EQ(report.entries[1].outcome, Outcome::failed);
  EXPECT_NE(report.entries[1].error.find("scripted failure for m1"), std::string::npos);
  EXPECT_EQ(report.entries[2].outcome, Outcome::not_started);
  EXPECT_EQ(m_builder->builds(), 2);  // the third was never started
  EXPECT_EQ(test::read_file(report.entries[0].path), ScriptedBuilder::expected(p.entries[0], m_host));
  EXPECT_EQ(plan::check_sidecar(report.entries[0].path).state, plan::SidecarState::ok);
  EXPECT_FALSE(fs::exists(report.entries[1].path));
  EXPECT_FALSE(fs::exists(report.entries[1].sidecar));
  EXPECT_FALSE(fs::exists(report.entries[2].path));
  ASSERT_EQ(count_events("engine.build.error"), 1);
  for (const auto& e : m_events) {
    if (e["event"] == "engine.build.error") {
      EXPECT_EQ(e["name"], "m1");
      ASSERT_EQ(e["inputs"].size(), 1u);
      EXPECT_EQ(e["inputs"][0], (m_dir.path() / "m1.onnx").string());
    }
  }
  EXPECT_EQ(report.summary.failed, 1u);
  EXPECT_EQ(report.summary.not_started, 1u);
  // Nothing is left in staging.
  std::size_t staged = 0;
  for (const auto& f : fs::directory_iterator(m_dir.path() / "out" / ".kcache-staging")) {
    staged += f.path().filename() == "locks" ? 0 : 1;
  }
  EXPECT_EQ(staged, 0u);
}

TEST_F(OrchestratorTest, KeepGoingBuildsTheEntriesAfterAFailure) {
  const Plan p = plan(3);
  m_builder->fail("m1");
  const PlanReport report = run(p, m_host, 1, KeepGoing::yes);
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.entries[0].outcome, Outcome::built);
  EXPECT_EQ(report.entries[1].outcome, Outcome::failed);
  EXPECT_EQ(report.entries[2].outcome, Outcome::built);
  EXPECT_EQ(m_builder->builds(), 3);
}

TEST_F(OrchestratorTest, EmptyPlanReportsNothingToDo) {
  const PlanReport report = run(from_text("version = 1\n"));
  EXPECT_TRUE(report.ok());
  EXPECT_TRUE(report.entries.empty());
  EXPECT_EQ(report.summary.entries, 0u);
  EXPECT_EQ(count_events("engine.build.summary"), 1);
  EXPECT_EQ(m_events.size(), 1u);
}

TEST_F(OrchestratorTest, ContentCacheHitIsFetchedAndPublished) {
  MemoryStore cache(64 << 20);
  m_cache = &cache;
  const Plan p = plan(2);
  run(p);
  EXPECT_EQ(m_builder->builds(), 2);
  fs::remove_all(m_dir.path() / "out");
  const PlanReport again = run(p);
  EXPECT_EQ(m_builder->builds(), 2);
  for (const auto& r : again.entries) {
    EXPECT_EQ(r.outcome, Outcome::fetched) << r.name;
  }
  EXPECT_EQ(again.summary.fetched, 2u);
  EXPECT_EQ(count_events("engine.cache.hit"), 2);
  for (const auto& e : m_events) {
    if (e["event"] == "engine.cache.hit") {
      EXPECT_EQ(e["tier"], "store");
    }
  }
  expect_verified(p, again, m_host);
}

TEST_F(OrchestratorTest, ChangedInputMakesTheEntryStale) {
  const Plan p = plan(2);
  run(p);
  test::write_file(m_dir.path() / "m0.onnx", "new weights");
  const PlanReport again = run(p);
  EXPECT_EQ(again.entries[0].outcome, Outcome::built);
  EXPECT_EQ(again.entries[0].reason.rfind("stale", 0), 0u) << again.entries[0].reason;
  EXPECT_EQ(again.entries[1].outcome, Outcome::reused);
  expect_verified(p, again, m_host);
}

TEST_F(OrchestratorTest, RenamedInputPathKeepsTheKey) {
  const Plan p = plan(1);
  OrchestratorOptions o;
  o.builders = &m_registry;
  Orchestrator orch(std::move(o));
  const auto key1 = orch.entry_key(p.entries[0], m_host);
  fs::rename(m_dir.path() / "m0.onnx", m_dir.path() / "renamed.onnx");
  PlanEntry moved = p.entries[0];
  moved.inputs[0] = m_dir.path() / "renamed.onnx";
  const auto key2 = orch.entry_key(moved, m_host);
  ASSERT_TRUE(key1 && key2);
  EXPECT_EQ(*key1, *key2);
  PlanEntry other_precision = moved;
  other_precision.precision = "int8";
  EXPECT_NE(*orch.entry_key(other_precision, m_host), *key1);
}

TEST_F(OrchestratorTest, ParallelJobsBuildEveryEntryOnce) {
  const Plan p = plan(8);
  std::atomic<std::size_t> progress{0};
  OrchestratorOptions o;
  o.builders = &m_registry;
  o.jobs = 4;
  o.durability = Durability::none;
  o.on_progress = [&](const EntryResult&, std::size_t done, std::size_t total) {
    EXPECT_EQ(total, 8u);
    progress = done;
  };
  auto report = Orchestrator(std::move(o)).run(p, m_host);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->summary.built, 8u);
  EXPECT_EQ(m_builder->builds(), 8);
  EXPECT_EQ(progress.load(), 8u);
  expect_verified(p, *report, m_host);
}

TEST_F(OrchestratorTest, StagingLeftByADeadProcessIsSwept) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::_exit(0);
  }
  ::waitpid(child, nullptr, 0);
  const fs::path stale = m_dir.path() / "out" / ".kcache-staging" / (std::to_string(child) + "-0-m0_sm87_jp62_trt103_fp16.engine");
  fs::create_directories(stale);
  test::write_file(stale / "m0_sm87_jp62_trt103_fp16.engine", "half");
  run(plan(1));
  EXPECT_FALSE(fs::exists(stale));
}

TEST_F(OrchestratorTest, CommandBuilderRunsTheToolWithPlaceholders) {
  test::write_file(m_dir.path() / "in.txt", "payload");
  const Plan p = from_text(R"(version = 1
output_dir = "out"
[[entry]]
name = "cmd"
builder = "command"
precision = "int8"
inputs = ["in.txt"]
shapes = { x = [1, 2] }
options = { tag = "t1" }
command = ["sh", "-c", "printf '%s|' {precision} {sm} {jp} {trt} {shapes} {opt.tag} {name} > {output}; cat {input} >> {output}"]
)");
  const PlanReport report = run(p);
  ASSERT_EQ(report.entries[0].outcome, Outcome::built) << report.entries[0].error;
  EXPECT_EQ(report.entries[0].path, (m_dir.path() / "out" / "cmd_sm87_jp62_trt103_int8.engine").string());
  EXPECT_EQ(test::read_file(report.entries[0].path), "int8|87|62|103|x:1x2|t1|cmd|payload");
  EXPECT_EQ(run(p).entries[0].outcome, Outcome::reused);
}

TEST_F(OrchestratorTest, CommandBuilderFailuresPublishNothing) {
  const Plan p = from_text(R"(version = 1
output_dir = "out"
[defaults]
builder = "command"
[[entry]]
name = "exits"
command = ["sh", "-c", "echo broken tool >&2; exit 3", "{output}"]
[[entry]]
name = "empty"
command = ["sh", "-c", ": > \"$0\"", "{output}"]
[[entry]]
name = "hangs"
timeout_s = 1
command = ["sh", "-c", "echo partial > \"$0\"; exec sleep 30", "{output}"]
[[entry]]
name = "missing_tool"
command = ["/nonexistent/tool", "{output}"]
)");
  const PlanReport report = run(p, m_host, 4, KeepGoing::yes);
  ASSERT_EQ(report.entries.size(), 4u);
  for (const auto& r : report.entries) {
    EXPECT_EQ(r.outcome, Outcome::failed) << r.name;
    EXPECT_FALSE(fs::exists(r.path)) << r.name;
    EXPECT_FALSE(fs::exists(r.sidecar)) << r.name;
  }
  EXPECT_NE(report.entries[0].error.find("exited with status 3"), std::string::npos) << report.entries[0].error;
  EXPECT_NE(report.entries[0].log.find("broken tool"), std::string::npos);
  EXPECT_NE(report.entries[1].error.find("no output (or an empty one)"), std::string::npos) << report.entries[1].error;
  EXPECT_NE(report.entries[2].error.find("timed out after 1 s"), std::string::npos) << report.entries[2].error;
  EXPECT_NE(report.entries[3].error.find("not found"), std::string::npos) << report.entries[3].error;
  EXPECT_EQ(count_events("engine.build.error"), 4);
}

TEST_F(OrchestratorTest, BuilderChecksRunBeforeAnythingStarts) {
  const Plan p = from_text(R"(version = 1
output_dir = "out"
[defaults]
builder = "command"
[[entry]]
name = "fine"
command = ["sh", "-c", "echo x > {output}"]
[[entry]]
name = "no_output"
command = ["sh", "-c", "echo x"]
[[entry]]
name = "bad_placeholder"
command = ["tool", "{outptu}", "{output}"]
)");
  OrchestratorOptions o;
  o.builders = &m_registry;
  auto report = Orchestrator(std::move(o)).run(p, m_host);
  ASSERT_FALSE(report);
  EXPECT_EQ(report.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(report.error().log.find("plan.toml:8: the command of entry 'no_output' never mentions {output}"), std::string::npos)
      << report.error().log;
  EXPECT_NE(report.error().log.find("plan.toml:11: entry 'bad_placeholder': unknown placeholder {outptu}"), std::string::npos)
      << report.error().log;
  EXPECT_FALSE(fs::exists(m_dir.path() / "out" / "fine_sm87_jp62_trt103_fp32.engine"));
}

TEST_F(OrchestratorTest, NvccBuilderCompilesACubinForTheHostSm) {
  if (!fs::exists(resolve_cuda_home() / "bin" / "nvcc")) {
    GTEST_SKIP() << "no nvcc under " << resolve_cuda_home();
  }
  test::write_file(m_dir.path() / "k.cu", "extern \"C\" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n");
  const Plan p = from_text(R"(version = 1
output_dir = "out"
[[entry]]
name = "kernels"
builder = "nvcc"
inputs = ["k.cu"]
flags = ["-O3"]
)");
  const PlanReport report = run(p);
  ASSERT_EQ(report.entries[0].outcome, Outcome::built) << report.entries[0].error << report.entries[0].log;
  EXPECT_EQ(report.entries[0].path, (m_dir.path() / "out" / "kernels_sm87_jp62_trt103_fp32.cubin").string());
  const std::string cubin = test::read_file(report.entries[0].path);
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(cubin.substr(0, 4), "\x7f" "ELF");
  EXPECT_NE(cubin.find("twice"), std::string::npos);
  EXPECT_EQ(run(p).entries[0].outcome, Outcome::reused);
}

}  // namespace
}  // namespace kcache

namespace kcache {
namespace {

TEST_F(OrchestratorTest, NvrtcBuilderCompilesThroughTheJitPath) {
  std::error_code ec;
  if (!fs::exists(resolve_cuda_home() / "lib64" / "libnvrtc.so", ec)) {
    GTEST_SKIP() << "no NVRTC under " << resolve_cuda_home();
  }
  test::write_file(m_dir.path() / "k.cu", "extern \"C\" __global__ void thrice(float* x) { x[threadIdx.x] *= 3.0f; }\n");
  const Plan p = from_text(R"(version = 1
output_dir = "out"
[[entry]]
name = "jit_kernels"
builder = "nvrtc"
inputs = ["k.cu"]
)");
  const PlanReport report = run(p);
  ASSERT_EQ(report.entries[0].outcome, Outcome::built) << report.entries[0].error << report.entries[0].log;
  const std::string cubin = test::read_file(report.entries[0].path);
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(cubin.substr(0, 4), "\x7f" "ELF");
  EXPECT_NE(cubin.find("thrice"), std::string::npos);
  EXPECT_EQ(run(p).entries[0].outcome, Outcome::reused);
  // A changed source changes the key: rebuilt.
  test::write_file(m_dir.path() / "k.cu", "extern \"C\" __global__ void thrice(float* x) { x[threadIdx.x] *= 4.0f; }\n");
  EXPECT_EQ(run(p).entries[0].outcome, Outcome::built);
}

}  // namespace
}  // namespace kcache

namespace kcache {
namespace {

TEST_F(OrchestratorTest, BinaryToolOutputStillGivesValidJsonEventsAndReport) {
  const Plan p = from_text(R"(version = 1
output_dir = "out"
[[entry]]
name = "noisy"
builder = "command"
command = ["sh", "-c", "printf 'bad \\377\\376 bytes' >&2; exit 1", "{output}"]
)");
  const PlanReport report = run(p);
  ASSERT_EQ(report.entries[0].outcome, Outcome::failed);
  EXPECT_NE(report.entries[0].log.find("bad"), std::string::npos);
  ASSERT_EQ(count_events("engine.build.error"), 1);
  const auto doc = nlohmann::json::parse(report.to_json());
  EXPECT_EQ(doc["entries"][0]["outcome"], "FAILED");
  EXPECT_NE(report.to_table().find("FAILED"), std::string::npos);
}

}  // namespace
}  // namespace kcache
