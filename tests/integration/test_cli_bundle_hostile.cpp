// `kcache bundle` and the bundle tier against what a careless or hostile
// user names: FIFOs and devices where a bundle or a key should be, outputs
// that are devices, FIFOs, symlinks, directories or standard output, bundles
// of a newer format, bundles changed in place while they are copied, a full
// cache, a stand-in that is not a library. Real processes, real files.
#include "integration/cli_shell.hpp"
#include "unit/compile/compile_test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

namespace kcache {
namespace {

class CliBundleHostile : public test::CliShell {
protected:
  // Two entries in the cache, a key pair, and all.kcb signed with it.
  void make_bundle() {
    a = put("a.bin", std::string(6000, 'a'));
    b = put("b.bin", "bee");
    const test::ShellRun r = sh(R"("$K" bundle keygen ci.key >/dev/null && "$K" bundle create --sign ci.key -o all.kcb >/dev/null)");
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  std::string a;
  std::string b;
};

TEST_F(CliBundleHostile, RefusalsExitAsTheDocsSay) {
  make_bundle();
  // A newer format version is this kcache's limit, not damage: exit 1.
  const test::ShellRun newer = sh(R"(cp all.kcb v2.kcb; printf '\002' | dd of=v2.kcb bs=1 seek=8 conv=notrunc 2>/dev/null
"$K" bundle verify v2.kcb --trust ci.key.pub 2>>err.txt >/dev/null; echo "verify=$?"
"$K" bundle ls v2.kcb 2>>err.txt >/dev/null; echo "ls=$?"
"$K" bundle install v2.kcb --trust ci.key.pub 2>>err.txt >/dev/null; echo "install=$?"
cat err.txt >&2)");
  EXPECT_NE(newer.out.find("verify=1\nls=1\ninstall=1\n"), std::string::npos) << newer.out << newer.err;
  EXPECT_NE(newer.err.find("refused (bad-header): format version 2 (this kcache reads version 1; upgrade kcache)"),
            std::string::npos)
      << newer.err;
  EXPECT_NE(newer.err.find("hint: upgrade kcache"), std::string::npos) << newer.err;
  // A FIFO, a directory: named as such, exit 1, at once.
  const test::ShellRun special = sh(R"(mkfifo ff.kcb; mkdir dd.kcb
for f in ff.kcb dd.kcb; do for c in verify ls install; do
  trust="--trust ci.key.pub"; [ $c = ls ] && trust=
  timeout 20 "$K" bundle $c $f $trust 2>>err.txt; echo "$f $c=$?"; done; done; cat err.txt >&2)");
  for (const char* f : {"ff.kcb", "dd.kcb"}) {
    for (const char* c : {"verify", "ls", "install"}) {
      EXPECT_NE(special.out.find(std::string(f) + " " + c + "=1\n"), std::string::npos) << f << " " << c << "\n"
                                                                                          << special.out;
    }
  }
  EXPECT_NE(special.err.find("error: io: bundle ff.kcb is a FIFO, not a regular file"), std::string::npos)
      << special.err;
  EXPECT_NE(special.err.find("error: io: bundle dd.kcb is a directory, not a regular file"), std::string::npos)
      << special.err;
  // A symlink is followed (current.kcb -> all.kcb); a loop is named.
  const test::ShellRun links = sh(R"(ln -s all.kcb current.kcb && ln -s loop.kcb loop.kcb
"$K" bundle verify current.kcb --trust ci.key.pub && "$K" bundle verify loop.kcb --trust ci.key.pub; echo "loop=$?")");
  EXPECT_NE(links.out.find("current.kcb: OK: 2 entries"), std::string::npos) << links.out << links.err;
  EXPECT_NE(links.out.find("loop=1"), std::string::npos) << links.out;
  EXPECT_NE(links.err.find("bundle loop.kcb is a loop of symbolic links"), std::string::npos) << links.err;
}

TEST_F(CliBundleHostile, AFifoInTheSettingsNeverBlocksACommand) {
  make_bundle();
  // Every command that reads the bundle tier or its keys, with a FIFO named
  // by the setting: each returns (a warning, the bundle not used).
  const test::ShellRun r = sh(R"(mkfifo ff
export KCACHE_DIR="$PWD/fresh"
KCACHE_BUNDLES="$PWD/ff" KCACHE_BUNDLE_TRUSTED_KEYS="$PWD/ci.key.pub" timeout 20 "$K" get )" + a +
                              R"( >/dev/null; echo "bundles get=$?"
KCACHE_BUNDLES="$PWD/ff" timeout 20 "$K" ls >/dev/null; echo "bundles ls=$?"
KCACHE_BUNDLES="$PWD/all.kcb" KCACHE_BUNDLE_TRUSTED_KEYS="$PWD/ff" timeout 20 "$K" get )" + a +
                              R"( >/dev/null; echo "keys get=$?"
KCACHE_BUNDLE_TRUSTED_KEYS="$PWD/ff" timeout 20 "$K" bundle verify all.kcb; echo "keys verify=$?"
KCACHE_CONFIG="$PWD/ff" timeout 20 "$K" config >/dev/null; echo "config=$?")");
  EXPECT_NE(r.out.find("bundles get=3\n"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("bundles ls=0\n"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("keys get=3\n"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("keys verify=1\n"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("config=2\n"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.out.find("=124"), std::string::npos) << "a command blocked on the FIFO:\n" << r.out;
  EXPECT_NE(r.err.find("is a FIFO, not a regular file"), std::string::npos) << r.err;
}

TEST_F(CliBundleHostile, CreateWritesItsOutputLikeEveryOtherOutput) {
  make_bundle();
  // A device stays a device (made in the test's directory: /dev/null's numbers).
  const bool device = ::mknod((dir() / "null").c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0;
  const test::ShellRun r = sh(R"(set -e
"$K" bundle create --sign ci.key -o - > stdout.kcb 2>stdout.err
cmp stdout.kcb all.kcb
grep -q "wrote standard output: 2 entries" stdout.err
mkfifo ff; cat ff > from-fifo.kcb & "$K" bundle create --sign ci.key -o ff >/dev/null; wait; cmp from-fifo.kcb all.kcb
echo old > target; ln -s target link.kcb; "$K" bundle create --sign ci.key -o link.kcb >/dev/null
test -L link.kcb; cmp target all.kcb
mkdir adir; set +e; "$K" bundle create --sign ci.key -o adir; echo "dir=$?")" +
                              std::string(device ? "\nif echo x > null 2>/dev/null; then \"$K\" bundle create --sign ci.key -o null >/dev/null; "
                                                              "echo \"null=$?\"; else echo nodev; fi"
                                                            : ""));
  ASSERT_NE(r.out.find("dir=1"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("cannot write adir: Is a directory"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Device or resource busy"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir() / "-")) << "-o - wrote a file named -";
  EXPECT_EQ(type_of(dir() / "ff"), static_cast<mode_t>(S_IFIFO));
  if (device && r.out.find("nodev") != std::string::npos) {
    GTEST_LOG_(INFO) << "the device node case was skipped: the test directory is on a nodev filesystem";
  } else if (device) {
    EXPECT_NE(r.out.find("null=0"), std::string::npos) << r.out << r.err;
    EXPECT_EQ(type_of(dir() / "null"), static_cast<mode_t>(S_IFCHR)) << "the device node was replaced";
  } else {
    GTEST_LOG_(INFO) << "the device node case was skipped: mknod needs CAP_MKNOD";
  }
}

TEST_F(CliBundleHostile, ErrorsSayWhatIsWrongAndWhatToDo) {
  make_bundle();
  const test::ShellRun pub = sh(R"("$K" bundle create --sign ci.key.pub -o x.kcb)");
  EXPECT_EQ(pub.rc, 2) << pub.err;
  EXPECT_NE(pub.err.find("ci.key.pub is a public key; signing needs the private key"), std::string::npos) << pub.err;
  EXPECT_EQ(pub.err.find("chmod"), std::string::npos) << pub.err;
  const test::ShellRun other = sh(R"("$K" bundle keygen other.key >/dev/null; "$K" bundle verify all.kcb --trust other.key.pub)");
  EXPECT_EQ(other.rc, 8) << other.err;
  EXPECT_NE(other.err.find("(only key "), std::string::npos) << other.err;
  EXPECT_EQ(other.err.find("1 keys are"), std::string::npos) << other.err;
  const test::ShellRun empty = sh(R"("$K" bundle create --kind nothing --sign ci.key -o empty.kcb)");
  EXPECT_EQ(empty.rc, 0) << empty.err;
  EXPECT_NE(empty.err.find("warning: the selection is empty: none of the 2 entries looked at passes the filters given; "
                           "empty.kcb holds no entries"),
            std::string::npos)
      << empty.err;
  const test::ShellRun cut = sh(R"(head -c 5000 all.kcb > cut.kcb; "$K" bundle verify cut.kcb --trust ci.key.pub)");
  EXPECT_EQ(cut.rc, 4) << cut.err;
  EXPECT_NE(cut.err.find("refused (truncated)"), std::string::npos) << cut.err;
  EXPECT_NE(cut.err.find("a copy still running"), std::string::npos) << cut.err;
}

TEST_F(CliBundleHostile, GetOfABundleChangedInPlaceNeverWritesOtherBytes) {
  // A 4 MiB entry served from the bundle tier while another process changes
  // one of its bytes and back, in place: every get writes the exact payload
  // (exit 0) or fails (exit 4) and leaves its output as it was.
  std::string big(4 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) {
    big[i] = static_cast<char>('a' + (i * 13) % 26);
  }
  const std::string key = put("big.bin", big);
  ASSERT_EQ(sh(R"("$K" bundle keygen ci.key >/dev/null && "$K" bundle create --sign ci.key -o big.kcb >/dev/null)").rc, 0);
  const test::ShellRun r = sh(R"SH(export KCACHE_DIR="$PWD/fresh" KCACHE_BUNDLES="$PWD/big.kcb" KCACHE_BUNDLE_TRUSTED_KEYS="$PWD/ci.key.pub"
at=$((4096 + 2 * 1024 * 1024))
( while :; do printf X | dd of=big.kcb bs=1 seek=$at conv=notrunc 2>/dev/null
              printf "$(dd if=big.bin bs=1 skip=$((at - 4096)) count=1 2>/dev/null)" | dd of=big.kcb bs=1 seek=$at conv=notrunc 2>/dev/null; done ) &
writer=$!
ok=0; refused=0; wrong=0
for i in $(seq 1 20); do
  echo previous > out.bin
  "$K" get )SH" + key + R"SH( -o out.bin 2>>get.err; rc=$?
  if [ $rc = 0 ]; then if cmp -s out.bin big.bin; then ok=$((ok+1)); else wrong=$((wrong+1)); fi
  elif [ $rc = 4 ] || [ $rc = 3 ]; then if [ "$(cat out.bin)" = previous ]; then refused=$((refused+1)); else wrong=$((wrong+1)); fi
  else wrong=$((wrong+1)); echo "rc=$rc" >&2; fi
done
kill $writer; wait $writer 2>/dev/null
echo "ok=$ok refused=$refused wrong=$wrong"; grep -m1 refused get.err >&2)SH");
  EXPECT_NE(r.out.find("wrong=0"), std::string::npos) << r.out << r.err;
  GTEST_LOG_(INFO) << r.out;
}

TEST_F(CliBundleHostile, InstallIntoAFullCacheSaysHowFarItGot) {
  // Three entries of 1 MiB each into a 2 MiB tmpfs: the first fits, the second does not.
  for (char c : {'x', 'y', 'z'}) {
    put(std::string(1, c) + ".bin", std::string(1 << 20, c));
  }
  ASSERT_EQ(sh(R"("$K" bundle keygen ci.key >/dev/null && "$K" bundle create --sign ci.key -o three.kcb >/dev/null)").rc, 0);
  const auto small = root() / "small";
  std::filesystem::create_directories(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=1600k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno) << "): needs root";
  }
  const test::ShellRun r = sh("KCACHE_DIR='" + small.string() + "/cache' KCACHE_MAX_SIZE=64M \"$K\" bundle install three.kcb --trust ci.key.pub");
  ::umount2(small.c_str(), MNT_DETACH);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("(installed 1 of 3 entries, 0 already present, before it stopped"), std::string::npos) << r.err;
}

// A container image with its kernels in a bundle: the cache directory is
// missing (creatable or not), or empty and read-only. Every hit comes from
// the bundle and nothing is written anywhere (docs/bundles.md, "in place,
// nothing written"); a miss is compiled, and cached where it can be.
TEST_F(CliBundleHostile, ReadOnlyContainersAreServedFromTheBundleWithNothingWritten) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  const test::ShellRun ci = sh("\"$K\" compile " + src + R"( --target cubin --arch sm_90 -o ci.cubin &&
"$K" bundle keygen ci.key >/dev/null && "$K" bundle create --sign ci.key -o k.kcb >/dev/null)");
  ASSERT_EQ(ci.rc, 0) << ci.err;
  const std::string key = nlohmann::json::parse(sh(R"("$K" --json ls)").out)[0]["key"];
  const auto ro = root() / "ro";
  std::filesystem::create_directories(ro);
  const bool mounted = ::mount("tmpfs", ro.c_str(), "tmpfs", MS_RDONLY, "size=1m") == 0;
  std::vector<std::string> dirs{(root() / "fresh").string(), (root() / "no" / "such" / "parent").string()};
  if (mounted) {
    dirs.push_back(ro.string());                   // empty and read-only
    dirs.push_back((ro / "cache").string());       // missing, and cannot be created (EROFS)
  } else {
    GTEST_LOG_(INFO) << "read-only cases skipped: cannot mount a read-only tmpfs here (" << std::strerror(errno) << ")";
  }
  for (const std::string& d : dirs) {
    const test::ShellRun r = sh("export KCACHE_DIR='" + d + R"(' KCACHE_BUNDLES="$PWD/k.kcb" KCACHE_BUNDLE_TRUSTED_KEYS="$PWD/ci.key.pub"
"$K" compile )" + src + R"( --json --target cubin --arch sm_90 -o out.cubin > compile.json && cmp out.cubin ci.cubin &&
"$K" get )" + key + R"( -o got.cubin && cmp got.cubin ci.cubin && "$K" show )" + key + R"( >/dev/null &&
"$K" ls --json > ls.json && echo served)");
    EXPECT_NE(r.out.find("served"), std::string::npos) << d << ":\n" << r.err;
    EXPECT_TRUE(nlohmann::json::parse(test::read_file(dir() / "compile.json"))["hit"].get<bool>()) << d;
    EXPECT_EQ(nlohmann::json::parse(test::read_file(dir() / "ls.json")).size(), 1U) << d;
    std::error_code ec;
    const bool written = d == ro.string() ? !std::filesystem::is_empty(ro, ec) : std::filesystem::exists(d, ec);
    EXPECT_FALSE(written) << d << ": a bundle hit wrote into the cache directory";
  }
  // A miss with a creatable directory is compiled and cached as usual.
  const test::ShellRun miss = sh(R"(printf '__global__ void other() {}\n' > other.cu
export KCACHE_DIR="$PWD/../fresh" KCACHE_BUNDLES="$PWD/k.kcb" KCACHE_BUNDLE_TRUSTED_KEYS="$PWD/ci.key.pub"
"$K" compile other.cu --target cubin --arch sm_90 -o other.cubin && env -u KCACHE_BUNDLES "$K" ls --json)");
  EXPECT_EQ(miss.rc, 0) << miss.err;
  EXPECT_EQ(nlohmann::json::parse(miss.out).size(), 1U) << miss.out;
  if (mounted) {
    const test::ShellRun ro_miss = sh("export KCACHE_DIR='" + (ro / "cache").string() + R"(' KCACHE_BUNDLES="$PWD/k.kcb" KCACHE_BUNDLE_TRUSTED_KEYS="$PWD/ci.key.pub"
"$K" compile other.cu --target cubin --arch sm_90 -o other2.cubin && cmp other.cubin other2.cubin)");
    EXPECT_EQ(ro_miss.rc, 0) << "a miss on a read-only image still compiles: " << ro_miss.err;
    // Without bundles a cache directory that cannot be made is named with its real error.
    const test::ShellRun stats = sh("KCACHE_DIR='" + (ro / "cache").string() + "' \"$K\" stats");
    EXPECT_EQ(stats.rc, 1) << stats.err;
    EXPECT_NE(stats.err.find("cannot create the cache directory " + (ro / "cache").string()), std::string::npos)
        << stats.err;
    EXPECT_NE(stats.err.find("Read-only file system"), std::string::npos) << stats.err;
    EXPECT_EQ(stats.err.find("No such file or directory"), std::string::npos) << stats.err;
    ::umount2(ro.c_str(), MNT_DETACH);
  }
}

TEST_F(CliBundleHostile, RunRefusesAStandInThatIsNotALibrary) {
  const test::ShellRun r = sh(R"(echo 'not a library' > fake.so; head -c 64 /bin/true > short.so
KCACHE_INTERPOSE_LIBRARY="$PWD/fake.so" "$K" run -- true; echo "text=$?"
KCACHE_INTERPOSE_LIBRARY=/bin/true "$K" run -- true; echo "exe=$?"
mkfifo ff.so; KCACHE_INTERPOSE_LIBRARY="$PWD/ff.so" timeout 20 "$K" run -- true; echo "fifo=$?")");
  EXPECT_NE(r.out.find("text=1\nexe=1\nfifo=1\n"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("fake.so is not an ELF shared library"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/bin/true is a program, not a shared library"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ff.so is a FIFO, not a regular file"), std::string::npos) << r.err;
}

} // namespace
} // namespace kcache
