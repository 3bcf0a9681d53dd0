// Plan benchmarks (docs/performance.md, "Plans"):
//   BM_ReuseCheck200MiB      exists + sidecar verify of a 200 MiB engine (OpenSSL SHA-256)
//   BM_Sha256sum200MiB       coreutils `sha256sum -c` of the same file: the baseline, same run
//   BM_WarmPlan200MiB        a whole `plan build` run (orchestrator) that REUSES that engine
//   BM_WarmPlan20Small       a warm plan of 20 small entries, all REUSED
// Run: build/release/bench/bench_plan --benchmark_format=json (or console).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <memory>

#include "kcache/orchestrator.hpp"
#include "plan/sidecar.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

// A private directory under $TMPDIR (or /tmp), removed at exit.
class BenchDir {
 public:
  BenchDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/kcache-bench-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::abort();
    }
    m_path = tmpl;
  }
  ~BenchDir() {
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  BenchDir(const BenchDir&) = delete;
  BenchDir& operator=(const BenchDir&) = delete;
  const fs::path& path() const { return m_path; }

 private:
  fs::path m_path;
};

struct Fixture {
  BenchDir dir;
  BuilderRegistry registry = BuilderRegistry::with_shipped_builders();
  Plan big;
  Plan small;
  HostFingerprint host = *HostFingerprint::parse("sm=87,jp=6.2,trt=10.3");
  fs::path big_engine;

  Fixture() {
    std::ofstream(dir.path() / "in.txt") << "input";
    std::string text = "version = 1\noutput_dir = \"big\"\n[[entry]]\nname = \"big\"\nbuilder = \"command\"\n"
                       "inputs = [\"in.txt\"]\ncommand = [\"sh\", \"-c\", \"head -c 209715200 /dev/urandom > {output}\"]\n";
    big = *Plan::parse(text, dir.path(), "big.toml");
    text = "version = 1\noutput_dir = \"small\"\n[defaults]\nbuilder = \"command\"\n";
    for (int i = 0; i < 20; ++i) {
      text += "[[entry]]\nname = \"s" + std::to_string(i) + "\"\ninputs = [\"in.txt\"]\n"
              "command = [\"sh\", \"-c\", \"head -c 65536 /dev/urandom > {output}\"]\n";
    }
    small = *Plan::parse(text, dir.path(), "small.toml");
    auto report = run(big);
    big_engine = report.entries.at(0).path;
    run(small);
  }

  PlanReport run(const Plan& plan) {
    OrchestratorOptions o;
    o.builders = &registry;
    Orchestrator orch(std::move(o));
    auto report = orch.run(plan, host);
    if (!report || !report->ok()) {
      std::abort();
    }
    return *report;
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void BM_ReuseCheck200MiB(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) {
    const auto check = plan::check_sidecar(f.big_engine);
    if (check.state != plan::SidecarState::ok) {
      state.SkipWithError("sidecar did not verify");
    }
    benchmark::DoNotOptimize(check.digest.size);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * (200 << 20));
}
BENCHMARK(BM_ReuseCheck200MiB)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

void BM_Sha256sum200MiB(benchmark::State& state) {
  Fixture& f = fixture();
  const std::string cmd = "cd '" + f.big_engine.parent_path().string() + "' && sha256sum --status -c '" +
                          f.big_engine.filename().string() + ".sha256'";
  for (auto _ : state) {
    if (std::system(cmd.c_str()) != 0) {
      state.SkipWithError("sha256sum -c failed");
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * (200 << 20));
}
BENCHMARK(BM_Sha256sum200MiB)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

void BM_WarmPlan200MiB(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) {
    auto report = f.run(f.big);
    if (report.summary.reused != 1) {
      state.SkipWithError("not reused");
    }
  }
}
BENCHMARK(BM_WarmPlan200MiB)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

void BM_WarmPlan20Small(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) {
    auto report = f.run(f.small);
    if (report.summary.reused != 20) {
      state.SkipWithError("not all reused");
    }
  }
}
BENCHMARK(BM_WarmPlan20Small)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kcache

BENCHMARK_MAIN();
