// `kcache compile`, `why-miss`: real processes, real NVRTC, a real cache directory.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

struct Run {
  int status = -1;
  std::string out;
};

// Runs the kcache command with KCACHE_DIR=`cache`, in `cwd` when given.
Run run_cli(const fs::path& cache, const std::string& args, const fs::path& cwd = {}) {
  const std::string cd = cwd.empty() ? std::string() : "cd '" + cwd.string() + "' && ";
  const std::string cmd = cd + "KCACHE_DIR='" + cache.string() + "' '" + KCACHE_CLI_PATH + "' " + args + " 2>&1";
  Run r;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) {
    r.out.append(buf, n);
  }
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

TEST(CliCompile, SecondProcessHitsWithoutLoadingTheToolkitAndWritesSameBytes) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  const auto out1 = (tmp.path() / "a.cubin").string();
  const auto out2 = (tmp.path() / "b.cubin").string();
  auto first = run_cli(tmp.path() / "cache", "compile " + src + " --target cubin --arch sm_90 --json -o " + out1);
  ASSERT_EQ(first.status, 0) << first.out;
  const auto j1 = nlohmann::json::parse(first.out);
  EXPECT_FALSE(j1["hit"].get<bool>());
  EXPECT_TRUE(j1["stored"].get<bool>());
  auto second = run_cli(tmp.path() / "cache", "compile " + src + " --target cubin --arch sm_90 --json -o " + out2);
  ASSERT_EQ(second.status, 0) << second.out;
  const auto j2 = nlohmann::json::parse(second.out);
  EXPECT_TRUE(j2["hit"].get<bool>());
  EXPECT_EQ(j2["toolkit_loads"].get<int>(), 0) << "a warm hit must not dlopen the toolkit";
  EXPECT_EQ(j2["key"], j1["key"]);
  EXPECT_EQ(test::read_file(out1), test::read_file(out2));
  EXPECT_EQ(test::read_file(out1).substr(0, 4), "\x7f" "ELF");
}

// The default `put = background` queues the put; the process publishes it
// before it exits (the store's destructor), so the entry is complete on disk
// the moment the command returns and `kcache verify` finds nothing wrong.
// `--set put=sync` publishes before compile() returns, and so does a compile
// of one input whatever `put` says: it would only wait for its one put at
// exit, so it starts no put thread (docs/configuration.md, `put`). Several
// inputs compiled one after another (-j 1) keep the background queue.
TEST(CliCompile, BackgroundPutIsPublishedBeforeTheProcessExits) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto cache = tmp.path() / "cache";
  const auto src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  test::write_file((tmp.path() / "second.cu").string(), "extern \"C\" __global__ void second(int* p) { *p = 2; }\n");
  const auto second = (tmp.path() / "second.cu").string();
  const auto entry_exists = [&](const std::string& key) {
    return fs::exists(cache / "v1" / "entries" / key.substr(0, 2) / (key + ".pass"));
  };
  for (const std::string mode : {"background", "sync"}) {
    const std::string args = "--set put=" + mode + " compile " + src + " --target ptx --arch sm_90 --json" +
                             " --extra-digest " + mode + " -o " + (tmp.path() / (mode + ".ptx")).string();
    auto cold = run_cli(cache, args);
    ASSERT_EQ(cold.status, 0) << cold.out;
    const auto j = nlohmann::json::parse(cold.out);
    EXPECT_FALSE(j["hit"].get<bool>());
    EXPECT_TRUE(j["stored"].get<bool>());
    EXPECT_FALSE(j["store_queued"].get<bool>()) << mode << ": one input is published on the calling thread";
    const std::string key = j["key"].get<std::string>();
    EXPECT_TRUE(entry_exists(key)) << mode;
    auto warm = run_cli(cache, args);
    ASSERT_EQ(warm.status, 0) << warm.out;
    EXPECT_TRUE(nlohmann::json::parse(warm.out)["hit"].get<bool>()) << mode;
    // Two inputs in this process, one after the other: `put` decides.
    const auto out_dir = tmp.path() / ("two-" + mode);
    fs::create_directories(out_dir);
    const std::string two = "--set put=" + mode + " compile " + src + " " + second +
                            " --target ptx --arch sm_90 -j 1 --json --extra-digest two-" + mode;
    auto both = run_cli(cache, two, out_dir);
    ASSERT_EQ(both.status, 0) << both.out;
    const auto list = nlohmann::json::parse(both.out);
    ASSERT_EQ(list.size(), 2u) << both.out;
    for (const auto& r : list) {
      EXPECT_TRUE(r["stored"].get<bool>()) << mode;
      EXPECT_EQ(r["store_queued"].get<bool>(), mode == "background");
      EXPECT_TRUE(entry_exists(r["key"].get<std::string>())) << mode;
    }
  }
  auto verify = run_cli(cache, "verify");
  EXPECT_EQ(verify.status, 0) << verify.out;
}

// A cold compile into a new cache directory makes what the entry needs and
// nothing a later process makes when it needs it (docs/performance.md, "Cold
// CLI compile"): no check table (the first hit makes it), no evict lock (a put
// under the cap takes none), no temp left; the hit that follows checks the
// payload and makes the table.
TEST(CliCompile, AColdCompileIntoANewDirectoryMakesNoCheckTableOrEvictLock) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto cache = tmp.path() / "cache";
  const auto src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  const std::string args = "compile " + src + " --target cubin --arch sm_90 --json -o " + (tmp.path() / "k.cubin").string();
  auto cold = run_cli(cache, args);
  ASSERT_EQ(cold.status, 0) << cold.out;
  const auto j = nlohmann::json::parse(cold.out);
  ASSERT_TRUE(j["stored"].get<bool>());
  const std::string key = j["key"].get<std::string>();
  const auto stats = cache / "v1" / "stats";
  EXPECT_TRUE(fs::exists(cache / "v1" / "entries" / key.substr(0, 2) / key));
  EXPECT_TRUE(fs::exists(cache / "v1" / "entries" / key.substr(0, 2) / (key + ".pass")));
  EXPECT_TRUE(fs::exists(stats / "counters"));
  EXPECT_FALSE(fs::exists(stats / "checks"));
  EXPECT_FALSE(fs::exists(stats / "evict.lock"));
  EXPECT_TRUE(fs::is_empty(cache / "v1" / "tmp"));
  auto warm = run_cli(cache, args);
  ASSERT_EQ(warm.status, 0) << warm.out;
  EXPECT_TRUE(nlohmann::json::parse(warm.out)["hit"].get<bool>());
  EXPECT_TRUE(fs::exists(stats / "checks")) << "the first hit checks the payload and makes the table";
  auto verify = run_cli(cache, "verify");
  EXPECT_EQ(verify.status, 0) << verify.out;
}

TEST(CliCompile, HeaderEditedBetweenProcessesMissesAndWhyMissNamesIt) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto dir = tmp.path() / "src";
  fs::create_directories(dir);
  test::write_file((dir / "v.h").string(), "#define V 1\n");
  test::write_file((dir / "k.cu").string(), "#include \"v.h\"\n__global__ void k(int* p) { *p = V; }\n");
  const std::string args = "compile " + (dir / "k.cu").string() + " --target ptx --arch sm_90 --json -o " +
                           (tmp.path() / "k.ptx").string();
  auto a = run_cli(tmp.path() / "cache", args);
  ASSERT_EQ(a.status, 0) << a.out;
  const auto ja = nlohmann::json::parse(a.out);
  ASSERT_EQ(ja["disk_headers"].size(), 1u);
  test::write_file((dir / "v.h").string(), "#define V 2\n");
  auto b = run_cli(tmp.path() / "cache", args);
  ASSERT_EQ(b.status, 0) << b.out;
  const auto jb = nlohmann::json::parse(b.out);
  EXPECT_FALSE(jb["hit"].get<bool>());
  EXPECT_NE(jb["key"], ja["key"]);
  EXPECT_NE(test::read_file((tmp.path() / "k.ptx").string()).find("mov.u32 \t%r1, 2;"), std::string::npos);
  auto why = run_cli(tmp.path() / "cache", "why-miss " + ja["key"].get<std::string>() + " " +
                                               jb["key"].get<std::string>());
  ASSERT_EQ(why.status, 0) << why.out;
  EXPECT_NE(why.out.find("1 field(s) differ"), std::string::npos) << why.out;
  EXPECT_NE(why.out.find("disk_header:" + (dir / "v.h").string()), std::string::npos) << why.out;
}

TEST(CliCompile, CompileErrorExitsWithCompileCodeAndLog) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  test::write_file((tmp.path() / "bad.cu").string(), "__global__ void k() { undeclared_thing(); }\n");
  auto r = run_cli(tmp.path() / "cache", "compile " + (tmp.path() / "bad.cu").string() +
                                             " --target ptx --arch sm_90 -o " + (tmp.path() / "bad.ptx").string());
  EXPECT_EQ(r.status, 5) << r.out;
  EXPECT_NE(r.out.find("undeclared_thing"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(tmp.path() / "bad.ptx"));
}

// A file NVRTC rejects, among others compiled in the worker pool: it is kept
// as a negative entry, and the next run gets the same failure from it (the
// same exit status and output) with every request served.
TEST(CliCompile, ARejectedFileInTheWorkerPoolIsServedTheSecondTime) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  test::write_file((tmp.path() / "good.cu").string(), "__global__ void k(int* p) { *p = 1; }\n");
  test::write_file((tmp.path() / "bad.cu").string(), "__global__ void k() { undeclared_thing(); }\n");
  const auto cache = tmp.path() / "cache";
  const std::string args = "compile good.cu bad.cu --target ptx --arch sm_90 -j 2";
  auto cold = run_cli(cache, args, tmp.path());
  EXPECT_EQ(cold.status, 5) << cold.out;
  EXPECT_NE(cold.out.find("undeclared_thing"), std::string::npos) << cold.out;
  auto warm = run_cli(cache, args, tmp.path());
  EXPECT_EQ(warm.status, cold.status) << warm.out;
  EXPECT_NE(warm.out.find("undeclared_thing"), std::string::npos) << warm.out;
  auto stats = run_cli(cache, "stats --json");
  ASSERT_EQ(stats.status, 0) << stats.out;
  const auto cli = nlohmann::json::parse(stats.out)["requests"]["routes"]["cli"];
  EXPECT_EQ(cli["compiled"], 2) << cli;
  EXPECT_EQ(cli["served"]["total"], 2) << cli;
  EXPECT_EQ(cli["served"]["failed"], 1) << cli;
  EXPECT_EQ(cli["failed"], 0) << cli;
}

// Several files with -j: compiled in worker processes, outputs in input order
// with the same bytes as one-at-a-time compiles; a second run is all hits.
TEST(CliCompile, SeveralFilesCompileInTheWorkerPoolAndHitTheSecondTime) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto src = tmp.path() / "src";
  const auto out = tmp.path() / "out";
  fs::create_directories(src);
  fs::create_directories(out);
  std::string files;
  for (int i = 0; i < 3; ++i) {
    const auto f = src / ("k" + std::to_string(i) + ".cu");
    test::write_file(f.string(), "__global__ void k(int* p) { *p = " + std::to_string(100 + i) + "; }\n");
    files += " '" + f.string() + "'";
  }
  const auto cache = tmp.path() / "cache";
  auto run_in = [&](const fs::path& dir, const std::string& args) { return run_cli(cache, args, dir); };
  auto cold = run_in(out, "compile" + files + " --target cubin --arch sm_90 -j 2");
  ASSERT_EQ(cold.status, 0) << cold.out;
  EXPECT_NE(cold.out.find("[3/3]"), std::string::npos) << cold.out;  // plain progress lines off a terminal
  for (int i = 0; i < 3; ++i) {
    const auto name = "k" + std::to_string(i);
    const auto single = (tmp.path() / (name + ".single.cubin")).string();
    auto one = run_in(out, "compile '" + (src / (name + ".cu")).string() +
                               "' --no-cache --target cubin --arch sm_90 -o '" + single + "'");
    ASSERT_EQ(one.status, 0) << one.out;
    EXPECT_EQ(test::read_file((out / (name + ".cubin")).string()), test::read_file(single)) << name;
  }
  auto warm = run_in(out, "compile" + files + " --target cubin --arch sm_90 -j 2");
  ASSERT_EQ(warm.status, 0) << warm.out;
  auto stats = run_cli(tmp.path() / "cache", "stats --json");
  ASSERT_EQ(stats.status, 0) << stats.out;
  const auto js = nlohmann::json::parse(stats.out);
  EXPECT_EQ(js["puts"].get<int>(), 3);
  EXPECT_GE(js["hits"].get<int>(), 3);
}

// `kcache stats` leads with requests: one cold and three warm compiles of one
// kernel are 4 requests, 3 served and 1 compiled, whatever the lookups inside
// them were (the disk lookups are their own rows, below).
TEST(CliCompile, StatsCountOneColdAndThreeWarmCompilesAsThreeServedAndOneCompiled) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  for (int i = 0; i < 4; ++i) {
    auto r = run_cli(tmp.path() / "cache", "compile " + src + " --target cubin --arch sm_90 -o " +
                                               (tmp.path() / ("k" + std::to_string(i) + ".cubin")).string());
    ASSERT_EQ(r.status, 0) << r.out;
  }
  auto stats = run_cli(tmp.path() / "cache", "stats --json");
  ASSERT_EQ(stats.status, 0) << stats.out;
  const auto requests = nlohmann::json::parse(stats.out)["requests"];
  EXPECT_EQ(requests["total"], 4) << stats.out;
  EXPECT_EQ(requests["served"]["total"], 3) << stats.out;
  EXPECT_EQ(requests["served"]["disk"], 3) << stats.out;
  EXPECT_EQ(requests["compiled"], 1) << stats.out;
  EXPECT_EQ(requests["failed"], 0) << stats.out;
  EXPECT_GT(requests["compile_us_saved"].get<long long>(), 0) << stats.out;
  EXPECT_EQ(requests["routes"]["cli"]["served"]["total"], 3) << stats.out;
  EXPECT_EQ(requests["routes"]["cli"]["compiled"], 1) << stats.out;
  // A compile NVRTC rejects is stored as a negative entry: compiled; the next
  // one is served (a failed compile replayed, counted apart too), not failed.
  fs::create_directories(tmp.path() / "bad");
  test::write_file(tmp.path() / "bad" / "bad.cu", "__global__ void k() { this is not C++; }\n");
  const std::string bad_args = "compile " + (tmp.path() / "bad" / "bad.cu").string() +
                               " --target cubin --arch sm_90 -o " + (tmp.path() / "bad.cubin").string();
  auto bad = run_cli(tmp.path() / "cache", bad_args);
  EXPECT_EQ(bad.status, 5) << bad.out;
  auto after = nlohmann::json::parse(run_cli(tmp.path() / "cache", "stats --json").out)["requests"];
  EXPECT_EQ(after["total"], 5);
  EXPECT_EQ(after["compiled"], 2);
  EXPECT_EQ(after["failed"], 0);
  auto again = run_cli(tmp.path() / "cache", bad_args);
  EXPECT_EQ(again.status, 5) << again.out;
  EXPECT_EQ(again.out, bad.out);
  after = nlohmann::json::parse(run_cli(tmp.path() / "cache", "stats --json").out)["requests"];
  EXPECT_EQ(after["total"], 6);
  EXPECT_EQ(after["served"]["total"], 4);
  EXPECT_EQ(after["served"]["failed"], 1);
  EXPECT_EQ(after["failed"], 0);
  // The table leads with the requests; the disk tier's lookups come below, named as such.
  auto human = run_cli(tmp.path() / "cache", "stats");
  ASSERT_EQ(human.status, 0) << human.out;
  EXPECT_EQ(human.out.rfind("requests", 0), 0U) << human.out;
  const auto served = human.out.find("\n  served ");
  ASSERT_NE(served, std::string::npos) << human.out;
  EXPECT_EQ(human.out.substr(served, human.out.find('\n', served + 1) - served),
            "\n  served                 4: memory 0, disk 4, bundle 0, remote 0 (1 of them a failed compile, replayed)")
      << human.out;
  EXPECT_NE(human.out.find("route cli              6: 4 served (4 disk; 1 of a failed compile), 2 compiled"),
            std::string::npos)
      << human.out;
  EXPECT_NE(human.out.find("route cli"), std::string::npos) << human.out;
  EXPECT_LT(human.out.find("route cli"), human.out.find("disk lookups")) << human.out;
}

}  // namespace
}  // namespace kcache
