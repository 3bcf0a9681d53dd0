// `kcache bundle keygen|create|verify|ls|install` and the bundle tier, as a
// CI job and a fresh machine use them: real processes, real caches, a real
// NVRTC compile served from a bundle.
#include "integration/cli_shell.hpp"
#include "unit/compile/compile_test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace kcache {
namespace {

class CliBundle : public test::CliShell {
protected:
  // A plan of two entries built for two host profiles: four engines.
  void build_plan() {
    test::write_file(dir() / "in.txt", "model weights\n");
    test::write_file(dir() / "plan.toml", R"(version = 1
hosts = ["sm=87,jp=6.2", "sm=90"]
[defaults]
builder = "command"
[[entry]]
name = "copy"
inputs = ["in.txt"]
command = ["sh", "-c", "cat {input} > {output}; echo {precision} >> {output}"]
[[entry]]
name = "tagged"
precision = "fp16"
command = ["sh", "-c", "echo tagged-{precision} > {output}"]
)");
    const test::ShellRun r = sh(R"("$K" plan build plan.toml --host sm=87,jp=6.2 >/dev/null &&
"$K" plan build plan.toml --host sm=90 >/dev/null && "$K" bundle keygen ci.key)");
    ASSERT_EQ(r.rc, 0) << r.err;
  }
};

TEST_F(CliBundle, PlanRoundTripToAFreshCacheByteEqual) {
  build_plan();
  const test::ShellRun created =
      sh(R"("$K" --json bundle create --plan plan.toml --sign ci.key -o engines.kcb)");
  ASSERT_EQ(created.rc, 0) << created.err;
  const auto summary = nlohmann::json::parse(created.out);
  EXPECT_EQ(summary["entries"], 4) << "two entries for each of two host profiles";

  const test::ShellRun ls = sh(R"("$K" --json bundle ls engines.kcb)");
  ASSERT_EQ(ls.rc, 0) << ls.err;
  const auto listed = nlohmann::json::parse(ls.out);
  std::set<std::string> hosts;
  for (const auto& e : listed["entries"]) {
    hosts.insert(e["host"].get<std::string>().substr(0, 6));
  }
  EXPECT_EQ(hosts, (std::set<std::string>{"sm=87,", "sm=90,"}));

  const test::ShellRun verified = sh(R"("$K" bundle verify engines.kcb --trust ci.key.pub)");
  ASSERT_EQ(verified.rc, 0) << verified.err;
  EXPECT_NE(verified.out.find("OK: 4 entries"), std::string::npos) << verified.out;

  // A fresh machine: an empty cache that trusts the public key (setting).
  const test::ShellRun installed =
      sh(R"(export KCACHE_DIR="$PWD/fresh" KCACHE_BUNDLE_TRUSTED_KEYS="$PWD/ci.key.pub"
"$K" --json bundle install engines.kcb)");
  ASSERT_EQ(installed.rc, 0) << installed.err;
  const auto counts = nlohmann::json::parse(installed.out);
  EXPECT_EQ(counts["installed"], 4);
  EXPECT_EQ(counts["already_present"], 0);
  for (const auto& e : listed["entries"]) {
    const std::string key = e["key"];
    const test::ShellRun a =
        sh("\"$K\" get " + key + " -o a.bin && KCACHE_DIR=\"$PWD/fresh\" \"$K\" get " + key +
           " -o b.bin && cmp a.bin b.bin");
    EXPECT_EQ(a.rc, 0) << key << ": " << a.err;
  }
  // Two creates of the same selection give identical bytes.
  const test::ShellRun again =
      sh(R"("$K" bundle create --plan plan.toml --sign ci.key -o again.kcb >/dev/null &&
cmp engines.kcb again.kcb)");
  EXPECT_EQ(again.rc, 0) << again.err;
}

// `bundle install --pin` pins what it installs: `clear` keeps the entries and
// `stats` counts them as pinned; a second install (already present) pins too.
TEST_F(CliBundle, InstallWithPinPinsEveryEntry) {
  build_plan();
  ASSERT_EQ(sh(R"("$K" bundle create --plan plan.toml --sign ci.key -o engines.kcb)").rc, 0);
  const test::ShellRun installed =
      sh(R"(export KCACHE_DIR="$PWD/fresh" KCACHE_BUNDLE_TRUSTED_KEYS="$PWD/ci.key.pub"
"$K" --json bundle install engines.kcb --pin && "$K" clear >/dev/null && "$K" --json stats)");
  ASSERT_EQ(installed.rc, 0) << installed.err;
  const std::string& out = installed.out;
  const auto install_end = out.find("}\n{");
  ASSERT_NE(install_end, std::string::npos) << out;
  const auto counts = nlohmann::json::parse(out.substr(0, install_end + 1));
  EXPECT_EQ(counts["pinned"], 4);
  const auto stats = nlohmann::json::parse(out.substr(install_end + 2));
  EXPECT_EQ(stats["pinned_entries"], 4) << out;
  EXPECT_EQ(stats["entries"], 4) << "clear keeps pinned entries: " << out;

  // Unpinned entries present already are pinned by a second install.
  const test::ShellRun again =
      sh(R"(export KCACHE_DIR="$PWD/second" KCACHE_BUNDLE_TRUSTED_KEYS="$PWD/ci.key.pub"
"$K" bundle install engines.kcb >/dev/null && "$K" --json bundle install engines.kcb --pin >/dev/null &&
"$K" --json stats)");
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["pinned_entries"], 4) << again.out;
}

// `kcache get / show / ls` read the bundle tier (the `bundles` setting) as a
// compile does: a fresh cache with only KCACHE_BUNDLES serves the bundle's
// bytes, shows its passports and lists its entries as tier "bundle", and its
// own disk stays empty. An untrusted bundle serves nothing (a miss, exit 3).
TEST_F(CliBundle, GetShowAndLsReadTheBundleTier) {
  const std::string a = put("a.bin", std::string(5000, 'a') + "end");
  const std::string b = put("b.bin", "tiny");
  ASSERT_EQ(sh(R"("$K" bundle keygen ci.key >/dev/null && "$K" bundle create --sign ci.key -o all.kcb >/dev/null)").rc,
            0);
  const std::string fresh = R"(export KCACHE_DIR="$PWD/fresh" KCACHE_BUNDLES="$PWD/all.kcb" )"
                            R"(KCACHE_BUNDLE_TRUSTED_KEYS="$PWD/ci.key.pub"; )";
  const test::ShellRun got = sh(fresh + "\"$K\" -v get " + a + " -o got.bin && cmp got.bin a.bin && \"$K\" get " + b);
  ASSERT_EQ(got.rc, 0) << got.err;
  EXPECT_EQ(got.out, "tiny");
  EXPECT_NE(got.err.find("from the bundle tier"), std::string::npos) << got.err;
  const test::ShellRun shown = sh(fresh + "\"$K\" show " + a);
  ASSERT_EQ(shown.rc, 0) << shown.err;
  EXPECT_EQ(nlohmann::json::parse(shown.out)["key"], a);
  EXPECT_EQ(nlohmann::json::parse(shown.out)["payload"]["size"], 5003) << shown.out;
  // The disk holds one entry of its own (c): ls shows it as disk, a and b as bundle.
  const std::string c = put("c.bin", "only on disk");
  const test::ShellRun own = sh(fresh + "\"$K\" put c.bin >/dev/null && \"$K\" --json ls && \"$K\" ls");
  ASSERT_EQ(own.rc, 0) << own.err;
  const auto listed = nlohmann::json::parse(own.out.substr(0, own.out.find("]\n") + 1));
  std::set<std::string> tiers;
  for (const auto& e : listed) {
    tiers.insert(e["key"].get<std::string>().substr(0, 8) + ":" + e["tier"].get<std::string>());
  }
  EXPECT_EQ(tiers, (std::set<std::string>{a.substr(0, 8) + ":bundle", b.substr(0, 8) + ":bundle",
                                          c.substr(0, 8) + ":disk"}))
      << own.out;
  EXPECT_NE(own.out.find("TIER"), std::string::npos) << own.out;
  // Nothing the bundle served was written to the fresh cache's disk.
  const test::ShellRun disk = sh(R"(KCACHE_DIR="$PWD/fresh" "$K" --json ls)");
  ASSERT_EQ(disk.rc, 0) << disk.err;
  EXPECT_EQ(nlohmann::json::parse(disk.out).size(), 1U) << disk.out;
  // Untrusted: a miss with a warning, never the bundle's bytes.
  const test::ShellRun untrusted =
      sh(R"(KCACHE_DIR="$PWD/other" KCACHE_BUNDLES="$PWD/all.kcb" "$K" get )" + a);
  EXPECT_EQ(untrusted.rc, 3) << untrusted.err;
  EXPECT_EQ(untrusted.out, "");
}

TEST_F(CliBundle, RefusalsHaveNamedReasonsAndExitCodesAndInstallNothing) {
  build_plan();
  ASSERT_EQ(sh(R"("$K" bundle create --plan plan.toml --sign ci.key -o good.kcb >/dev/null &&
"$K" bundle create --plan plan.toml -o unsigned.kcb >/dev/null &&
"$K" bundle keygen other.key >/dev/null)")
                .rc,
            0);
  struct Case {
    std::string prepare;
    std::string reason;
    int rc;
  };
  const std::vector<Case> cases{
      {"cp unsigned.kcb b.kcb", "(unsigned)", 8},
      {"cp good.kcb b.kcb; TRUST=other.key.pub", "(untrusted-key)", 8},
      {"cp good.kcb b.kcb; printf x >> b.kcb", "(trailing-bytes)", 4},
      {"head -c -1 good.kcb > b.kcb", "(truncated)", 4},
      // One byte of the first passport (just after the index of four 64-byte records).
      {"cp good.kcb b.kcb; printf Z | dd of=b.kcb bs=1 seek=$((64 + 4 * 64 + 30)) conv=notrunc "
       "2>/dev/null",
       "(digest-mismatch)", 4},
      // One byte of the last payload (the last bytes before its padding and the 144-byte trailer).
      {"cp good.kcb b.kcb; size=$(stat -c %s b.kcb); printf Z | dd of=b.kcb bs=1 seek=$((size - "
       "144 - 9)) "
       "conv=notrunc 2>/dev/null",
       "(payload-mismatch)", 4},
  };
  for (const Case& c : cases) {
    const test::ShellRun r = sh("TRUST=ci.key.pub; " + c.prepare + R"(
KCACHE_DIR="$PWD/empty" "$K" bundle install b.kcb --trust "$TRUST"; rc=$?
"$K" bundle verify b.kcb --trust "$TRUST" 2>/dev/null; echo "verify=$?"
KCACHE_DIR="$PWD/empty" "$K" ls --json; exit $rc)");
    EXPECT_EQ(r.rc, c.rc) << c.prepare << "\n" << r.err;
    EXPECT_NE(r.err.find(c.reason), std::string::npos) << c.prepare << "\n" << r.err;
    EXPECT_NE(r.out.find("verify=" + std::to_string(c.rc)), std::string::npos) << c.prepare << "\n"
                                                                               << r.out;
    EXPECT_NE(r.out.find("[]"), std::string::npos) << c.prepare << ": something was installed\n"
                                                   << r.out;
  }
}

TEST_F(CliBundle, SelectionByKeyAndFiltersAndKeygenRefusesToReplace) {
  const std::string a = put("a.txt", "first");
  const std::string b = put("b.txt", "second");
  ASSERT_EQ(sh("\"$K\" bundle keygen ci.key").rc, 0);
  const test::ShellRun again = sh("\"$K\" bundle keygen ci.key");
  EXPECT_EQ(again.rc, 2) << again.err;
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
  const test::ShellRun one =
      sh("\"$K\" --json bundle create --key " + a + " --sign ci.key -o one.kcb");
  ASSERT_EQ(one.rc, 0) << one.err;
  EXPECT_EQ(nlohmann::json::parse(one.out)["entries"], 1);
  const test::ShellRun all = sh(R"("$K" --json bundle create --sign ci.key -o all.kcb)");
  EXPECT_EQ(nlohmann::json::parse(all.out)["entries"], 2);
  const test::ShellRun none =
      sh(R"("$K" --json bundle create --origin nvrtc --sign ci.key -o none.kcb)");
  EXPECT_EQ(nlohmann::json::parse(none.out)["entries"], 0);
  const test::ShellRun missing =
      sh("\"$K\" bundle create --key " + std::string(64, 'e') + " -o m.kcb");
  EXPECT_EQ(missing.rc, 1) << missing.err;
  EXPECT_NE(missing.err.find("not in the local cache"), std::string::npos) << missing.err;
  (void)b;
}

// A fresh cache with the bundle as a tier serves a real NVRTC compile as a
// hit from the first request: nothing compiled, nothing written to disk.
TEST_F(CliBundle, BundleTierServesACompileWithNothingCompiledOrWritten) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  const test::ShellRun ci =
      sh("\"$K\" compile " + src + R"( --json --target cubin --arch sm_90 -o ci.cubin &&
"$K" bundle keygen ci.key >/dev/null && "$K" bundle create --sign ci.key -o kernels.kcb >/dev/null)");
  ASSERT_EQ(ci.rc, 0) << ci.err;
  const auto ci_run = nlohmann::json::parse(ci.out);
  ASSERT_FALSE(ci_run["hit"].get<bool>());
  mkdir((root() / "image").c_str(), 0755);
  const test::ShellRun fresh =
      sh(R"(mv kernels.kcb ci.key.pub ../image/ && export KCACHE_DIR="$PWD/fresh"
export KCACHE_BUNDLES="$PWD/../image/kernels.kcb" KCACHE_BUNDLE_TRUSTED_KEYS="$PWD/../image/ci.key.pub"
"$K" compile )" +
         src + R"( --json --target cubin --arch sm_90 -o fresh.cubin && cmp ci.cubin fresh.cubin &&
env -u KCACHE_BUNDLES "$K" ls --json >&2 && ls ../image >&2)");
  ASSERT_EQ(fresh.rc, 0) << fresh.err;
  const auto run = nlohmann::json::parse(fresh.out);
  EXPECT_TRUE(run["hit"].get<bool>()) << fresh.out;
  // (A new cache directory has no memo of the toolkit's version yet, so NVRTC
  // is loaded once to ask it, as for any first hit there: loaded, not compiled.)
  EXPECT_NE(fresh.err.find("[]"), std::string::npos) << "the hit was copied to the disk tier:\n"
                                                     << fresh.err;
  EXPECT_NE(fresh.err.find("ci.key.pub\nkernels.kcb\n"), std::string::npos)
      << "something was written beside the bundle:\n"
      << fresh.err;
}

} // namespace
} // namespace kcache
