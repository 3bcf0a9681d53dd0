// RequestStats (kcache/request_stats.hpp): requests counted by outcome, tier
// and route in v1/stats/requests, shared by processes, and the `kcache run`
// report (store/file/request_file.hpp).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "kcache/file_store.hpp"
#include "kcache/memory_store.hpp"
#include "kcache/request_stats.hpp"
#include "kcache/tiered_store.hpp"
#include "store/file/request_file.hpp"
#include "support/child.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

class RequestStatsTest : public ::testing::Test {
 protected:
  std::unique_ptr<FileStore> open_store() {
    FileStoreOptions o;
    o.root = m_dir.path() / "cache";
    auto s = FileStore::open(o);
    EXPECT_TRUE(s) << s.error().describe();
    return std::move(*s);
  }
  fs::path cache() const { return m_dir.path() / "cache"; }

  test::TempDir m_dir;
};

const RouteRequests* find(const std::vector<RouteRequests>& routes, const std::string& name) {
  for (const auto& r : routes) {
    if (r.route == name) {
      return &r;
    }
  }
  return nullptr;
}

TEST_F(RequestStatsTest, CountsEachOutcomeByTierAndRoute) {
  auto store = open_store();
  record_request(store.get(), "cli", RequestOutcome::compiled, std::nullopt, 500);
  record_request(store.get(), "cli", RequestOutcome::served, Tier::disk, 500);
  record_request(store.get(), "cli", RequestOutcome::served, Tier::disk, 500);
  record_request(store.get(), "python", RequestOutcome::served, Tier::remote, 700);
  record_request(store.get(), "python", RequestOutcome::served, Tier::memory, 100);
  record_request(store.get(), "python", RequestOutcome::uncached, std::nullopt, 40);
  record_request(store.get(), "python", RequestOutcome::failed, std::nullopt, 3);
  record_request(store.get(), "triton", RequestOutcome::served, Tier::bundle, 9);

  const auto reader = RequestStats::open_existing(cache());
  ASSERT_NE(reader, nullptr);
  const auto routes = reader->routes();
  ASSERT_EQ(routes.size(), 3U);
  EXPECT_EQ(routes[0].route, "cli");  // row order: the order routes first came
  const RequestCounts& cli = routes[0].counts;
  EXPECT_EQ(cli.served[static_cast<unsigned>(Tier::disk)], 2U);
  EXPECT_EQ(cli.served_total(), 2U);
  EXPECT_EQ(cli.compiled, 1U);
  EXPECT_EQ(cli.total(), 3U);
  EXPECT_EQ(cli.compile_us_saved, 1000U);
  EXPECT_EQ(cli.compile_us, 500U);
  const RouteRequests* py = find(routes, "python");
  ASSERT_NE(py, nullptr);
  EXPECT_EQ(py->counts.served[static_cast<unsigned>(Tier::remote)], 1U);
  EXPECT_EQ(py->counts.served[static_cast<unsigned>(Tier::memory)], 1U);
  EXPECT_EQ(py->counts.uncached, 1U);
  EXPECT_EQ(py->counts.failed, 1U);
  EXPECT_EQ(py->counts.compile_us_saved, 800U);
  EXPECT_EQ(py->counts.compile_us, 43U);
  const RouteRequests* triton = find(routes, "triton");
  ASSERT_NE(triton, nullptr);
  EXPECT_EQ(triton->counts.served[static_cast<unsigned>(Tier::bundle)], 1U);
  const RequestCounts all = reader->total();
  EXPECT_EQ(all.total(), 8U);
  EXPECT_EQ(all.served_total(), 5U);
}

TEST_F(RequestStatsTest, AChainCountsInItsFileTier) {
  std::vector<std::unique_ptr<Store>> tiers;
  tiers.push_back(std::make_unique<MemoryStore>(1 << 20));
  tiers.push_back(open_store());
  TieredStore chain(std::move(tiers));
  ASSERT_NE(chain.request_stats(), nullptr);
  EXPECT_EQ(chain.request_stats(), chain.tier(1).request_stats());
  MemoryStore alone(1 << 20);
  EXPECT_EQ(alone.request_stats(), nullptr);  // no cache directory: nothing counted
  record_request(&chain, "library", RequestOutcome::compiled);
  record_request(&alone, "library", RequestOutcome::compiled);
  record_request(static_cast<Store*>(nullptr), "library", RequestOutcome::compiled);
  EXPECT_EQ(RequestStats::open_existing(cache())->total().compiled, 1U);
}

TEST_F(RequestStatsTest, BadRouteNamesAndRoutesPastTheRowsCountAsOther) {
  auto store = open_store();
  EXPECT_FALSE(RequestStats::valid_route(""));  // (record_request reads "" as the default route)
  for (const std::string bad : {"Upper", "has space", "../x", "seventeen-chars-x"}) {
    EXPECT_FALSE(RequestStats::valid_route(bad)) << bad;
    record_request(store.get(), bad, RequestOutcome::compiled);
  }
  record_request(store.get(), "other", RequestOutcome::compiled);  // the name of the last row
  for (unsigned i = 0; i < RequestStats::k_rows + 4; ++i) {
    record_request(store.get(), "route" + std::to_string(i), RequestOutcome::served, Tier::disk);
  }
  const auto routes = RequestStats::open_existing(cache())->routes();
  ASSERT_EQ(routes.size(), RequestStats::k_rows);
  EXPECT_EQ(routes.back().route, "other");
  // Four bad names and "other" itself, and the five routes that found no row.
  EXPECT_EQ(routes.back().counts.compiled, 5U);
  EXPECT_EQ(routes.back().counts.served_total(), 5U);
  EXPECT_EQ(routes[0].route, "route0");
  EXPECT_EQ(routes[RequestStats::k_rows - 2].route, "route29");
}

TEST_F(RequestStatsTest, ProcessesAddToTheSameCounters) {
  open_store();
  constexpr int k_children = 6;
  constexpr int k_each = 500;
  std::vector<pid_t> pids;
  for (int c = 0; c < k_children; ++c) {
    pids.push_back(test::fork_child([&, c] {
      auto store = open_store();
      for (int i = 0; i < k_each; ++i) {
        // Half the children make their route's row at the same moment as another.
        record_request(store.get(), c % 2 == 0 ? "even" : "odd", RequestOutcome::served, Tier::disk, 1);
      }
      return 0;
    }));
  }
  for (const pid_t p : pids) {
    EXPECT_EQ(test::describe_status(test::wait_child(p)), "exit 0");
  }
  const auto routes = RequestStats::open_existing(cache())->routes();
  ASSERT_EQ(routes.size(), 2U);
  for (const auto& r : routes) {
    EXPECT_EQ(r.counts.served_total(), std::uint64_t{k_children / 2 * k_each}) << r.route;
    EXPECT_EQ(r.counts.compile_us_saved, std::uint64_t{k_children / 2 * k_each}) << r.route;
  }
}

TEST_F(RequestStatsTest, ADamagedFileIsRebuiltAndNoneIsMadeByReaders) {
  EXPECT_EQ(RequestStats::open_existing(cache()), nullptr);  // no cache directory yet
  auto store = open_store();
  EXPECT_EQ(RequestStats::open_existing(cache()), nullptr);  // a store that counted nothing makes no file
  EXPECT_FALSE(fs::exists(cache() / "v1" / "stats" / "requests"));
  record_request(store.get(), "cli", RequestOutcome::compiled);
  store.reset();
  const fs::path file = cache() / "v1" / "stats" / "requests";
  ASSERT_EQ(fs::file_size(file), RequestStats::k_file_size);
  test::write_file(file, "garbage");
  auto again = open_store();
  record_request(again.get(), "cli", RequestOutcome::served, Tier::disk);
  const auto routes = RequestStats::open_existing(cache())->routes();
  ASSERT_EQ(routes.size(), 1U);
  EXPECT_EQ(routes[0].counts.total(), 1U);
  EXPECT_EQ(routes[0].counts.compiled, 0U);
}

TEST_F(RequestStatsTest, ARecordByDirectoryNeedsACacheDirectory) {
  record_request(cache(), "jax", RequestOutcome::compiled);
  EXPECT_FALSE(fs::exists(cache()));  // not a cache: nothing is made
  open_store();
  record_request(cache(), "jax", RequestOutcome::compiled, std::nullopt, 10);
  record_request(cache(), "jax", RequestOutcome::served, Tier::remote, 10);
  const auto routes = RequestStats::open_existing(cache())->routes();
  ASSERT_EQ(routes.size(), 1U);
  EXPECT_EQ(routes[0].route, "jax");
  EXPECT_EQ(routes[0].counts.total(), 2U);
}

// The `kcache run` report: made in memory, named by KCACHE_RUN_REPORT to the
// processes of the run (here: programs this process starts, which open it
// through /proc; a process reads the variable once, so new programs, not forks).
TEST_F(RequestStatsTest, TheRunReportCountsEveryProcessThatNamesIt) {
  auto report = store::create_run_report();
  ASSERT_TRUE(report) << report.error().describe();
  ASSERT_GE(report->fd.get(), 200);
  EXPECT_NE(report->env_value.find(std::to_string(::getpid()) + ":"), std::string::npos) << report->env_value;
  const auto tool = [&](const std::string& value, int n) {
    std::string out;
    const int status = test::run_program({KCACHE_STORE_TOOL_PATH, "report", "-", std::to_string(n)},
                                         {{store::k_run_report_env, value}}, &out);
    EXPECT_EQ(test::describe_status(status), "exit 0") << out;
    return out;
  };
  for (int c = 1; c <= 3; ++c) {
    EXPECT_EQ(tool(report->env_value, 2), "REPORT " + std::to_string(2 * c) + " not-top\n");
  }
  // A report named with another id (a reused descriptor), or named badly, is not used.
  std::string forged = report->env_value;
  forged.back() = forged.back() == '0' ? '1' : '0';
  EXPECT_EQ(tool(forged, 1), "REPORT none\n");
  EXPECT_EQ(tool("1:2", 1), "REPORT none\n");
  EXPECT_EQ(tool(std::to_string(::getpid()) + ":999:0123456789abcdef", 1), "REPORT none\n");
  // What they counted is in the report this process holds, and nothing more.
  EXPECT_EQ(tool(report->env_value, 0), "REPORT 6 not-top\n");
}

}  // namespace
}  // namespace kcache
