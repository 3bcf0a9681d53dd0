// The key soundness suite: every key input changes the key, a real recompile
// shows the old binary would have been wrong where the output differs, and
// equivalent spellings of one input give one key.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "kcache/compiler.hpp"
#include "kcache/file_store.hpp"
#include "kcache/program.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

CompileRequest base_request() {
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = "k.cu";
  r.source =
      "#include \"mem.h\"\n"
      "template <int N> __global__ void k(int* p) { *p = N + MEMV + VAL; }\n";
  r.target_kind = "ptx";
  r.options = {"-arch=sm_90", "-DVAL=1"};
  r.headers = {{"mem.h", "header", "#define MEMV 10\n"}};
  r.name_expressions = {"k<1>"};
  return r;
}

Key key_of(const CompileRequest& r) {
  auto kb = derive_key(r);
  EXPECT_TRUE(kb) << kb.error().describe();
  return kb ? kb->key() : Key{};
}

std::string compile_bytes(const CompileRequest& r) {
  auto a = compile_uncached(r);
  EXPECT_TRUE(a) << a.error().describe() << "\n" << a.error().log;
  return a ? std::string(a->payload) : std::string();
}

struct Change {
  std::string what;
  std::function<void(CompileRequest&)> apply;
  bool output_differs;  // a real recompile gives other bytes
};

TEST(KeySoundness, EveryInputChangesTheKeyAndRecompileShowsTheOldBinaryWrong) {
  KCACHE_REQUIRE_TOOLKIT();
  const CompileRequest base = base_request();
  const Key base_key = key_of(base);
  const std::string base_bytes = compile_bytes(base);
  const std::vector<Change> changes = {
      {"source", [](CompileRequest& r) { r.source += "__global__ void extra() {}\n"; }, true},
      {"program name", [](CompileRequest& r) { r.name = "other.cu"; }, false},
      {"arch option", [](CompileRequest& r) { r.options[0] = "-arch=sm_80"; }, true},
      {"arch variant", [](CompileRequest& r) { r.options[0] = "-arch=sm_90a"; }, true},
      {"define", [](CompileRequest& r) { r.options[1] = "-DVAL=2"; }, true},
      {"extra option", [](CompileRequest& r) { r.options.push_back("-lineinfo"); }, true},
      {"in-memory header content", [](CompileRequest& r) { r.headers[0].bytes = "#define MEMV 20\n"; }, true},
      {"extra in-memory header", [](CompileRequest& r) { r.headers.push_back({"unused.h", "header", "x"}); }, false},
      {"name expression", [](CompileRequest& r) { r.name_expressions = {"k<2>"}; }, true},
      {"extra digest", [](CompileRequest& r) { r.extra_digest = "driver 575.1"; }, false},
      {"target kind", [](CompileRequest& r) { r.target_kind = "cubin"; }, true},
      {"backend", [](CompileRequest& r) { r.backend = "nvvm"; }, false},
  };
  for (const auto& c : changes) {
    CompileRequest changed = base;
    c.apply(changed);
    if (changed.backend != "nvrtc") {
      auto kb = derive_key(changed);
      if (kb) {
        EXPECT_NE(kb->key(), base_key) << c.what;
      }
      continue;
    }
    EXPECT_NE(key_of(changed), base_key) << c.what;
    if (c.output_differs) {
      EXPECT_NE(compile_bytes(changed), base_bytes) << c.what << ": the old binary would have been wrong";
    }
  }
}

TEST(KeySoundness, EquivalentSpellingsGiveOneKey) {
  KCACHE_REQUIRE_TOOLKIT();
  const CompileRequest base = base_request();
  const Key base_key = key_of(base);
  for (const auto& opts : std::vector<std::vector<std::string>>{{"--gpu-architecture", "sm_90", "-D", "VAL=1"},
                                                                 {"--gpu-architecture=sm_90", "--define-macro=VAL=1"},
                                                                 {"-arch", "sm_90", "-DVAL=1"},
                                                                 {"-DVAL=1", "-arch=sm_90"}}) {
    CompileRequest r = base;
    r.options = opts;
    EXPECT_EQ(key_of(r), base_key) << opts[0];
  }
  // Where the source was read from is never part of the key.
  CompileRequest r = base;
  r.source_path = "/somewhere/else/k.cu";
  EXPECT_EQ(key_of(r), base_key);
}

TEST(KeySoundness, DiskHeaderContentAndShadowingChangeTheKey) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto first = (tmp.path() / "first").string();
  const auto second = (tmp.path() / "second").string();
  fs::create_directories(first);
  fs::create_directories(second);
  test::write_file(second + "/val.h", "#define DISKV 1\n");
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = "d.cu";
  r.source = "#include <val.h>\n__global__ void k(int* p) { *p = DISKV; }\n";
  r.target_kind = "ptx";
  r.options = {"-arch=sm_90", "-I" + first, "-I" + second};
  std::vector<HeaderDependency> deps;
  auto k1 = derive_key(r, &deps);
  ASSERT_TRUE(k1);
  ASSERT_EQ(deps.size(), 1u);
  EXPECT_EQ(deps[0].path, second + "/val.h");
  const auto bytes1 = compile_bytes(r);

  test::write_file(second + "/val.h", "#define DISKV 2\n");
  // The key alone, as the Cache and Python take it (the derivation's own, not
  // computed again), follows the edit like the record does.
  ASSERT_TRUE(derive_request_key(r));
  auto k2 = derive_key(r);
  ASSERT_TRUE(k2);
  EXPECT_NE(k2->key(), k1->key()) << "edited header";
  EXPECT_EQ(*derive_request_key(r), k2->key());
  const auto bytes2 = compile_bytes(r);
  EXPECT_NE(bytes2, bytes1);

  // A header appearing earlier on the search path shadows the old one.
  test::write_file(first + "/val.h", "#define DISKV 3\n");
  auto k3 = derive_key(r);
  ASSERT_TRUE(k3);
  EXPECT_NE(k3->key(), k2->key()) << "shadowing header";
  EXPECT_EQ(*derive_request_key(r), k3->key());
  EXPECT_EQ(*derive_request_key(r), k3->key()) << "a repeat, from the process's memo";
  EXPECT_NE(compile_bytes(r), bytes2);

  // A pre-included header is read from disk too.
  test::write_file(first + "/pre.h", "#define PRE 1\n");
  CompileRequest pre = r;
  pre.options.push_back("-include=" + first + "/pre.h");
  auto k4 = derive_key(pre);
  test::write_file(first + "/pre.h", "#define PRE 2\n");
  auto k5 = derive_key(pre);
  ASSERT_TRUE(k4 && k5);
  EXPECT_NE(k4->key(), k5->key()) << "pre-include";
}

// Derives the key in a fresh child process (a new header memo) and returns it.
std::string key_in_child(const CompileRequest& r) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    auto kb = derive_key(r);
    const std::string hex = kb ? kb->key().hex() : std::string("error");
    const auto n = ::write(fds[1], hex.data(), hex.size());
    ::_exit(n == static_cast<ssize_t>(hex.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string out;
  char buf[128];
  ssize_t n = 0;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) {
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return out;
}

// A request whose source includes v.h (`#define V 1`), written into `inc`
// and found through -I.
CompileRequest request_with_disk_header(const std::string& inc) {
  fs::create_directories(inc);
  test::write_file(inc + "/v.h", "#define V 1\n");
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = "p.cu";
  r.source = "#include \"v.h\"\n__global__ void k(int* p) { *p = V; }\n";
  r.target_kind = "ptx";
  r.options = {"-arch=sm_90", "-I", inc};
  return r;
}

TEST(KeySoundness, HeaderEditedBetweenProcessesMisses) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto inc = (tmp.path() / "inc").string();
  const CompileRequest r = request_with_disk_header(inc);
  const auto a = key_in_child(r);
  const auto b = key_in_child(r);
  ASSERT_EQ(a.size(), 64u) << a;
  EXPECT_EQ(a, b) << "same inputs, two processes";
  // Same size, same mtime second: only the content differs.
  test::write_file(inc + "/v.h", "#define V 2\n");
  const auto c = key_in_child(r);
  EXPECT_NE(c, a) << "header edited between processes must miss";
}

TEST(KeySoundness, HeaderEditedBetweenProcessesMissesThroughFileStore) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const auto inc = (tmp.path() / "inc").string();
  const CompileRequest r = request_with_disk_header(inc);
  FileStoreOptions fo;
  fo.root = tmp.path() / "cache";
  // Each child opens the store, compiles through it and reports hit (h) or miss (m) and the value.
  auto run_child = [&]() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      auto store = FileStore::open(fo);
      CompileInfo info;
      auto a = store ? compile(r, store->get(), &info) : Result<Artifact>(tl::unexpected(store.error()));
      std::string msg = !a ? "error" : std::string(info.hit ? "h" : "m") +
                                           (a->payload.find("mov.u32 \t%r1, 2;") != std::string::npos ? "2" : "1");
      const auto n = ::write(fds[1], msg.data(), msg.size());
      ::_exit(n > 0 ? 0 : 1);
    }
    ::close(fds[1]);
    std::string out;
    char buf[64];
    ssize_t n = 0;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return out;
  };
  EXPECT_EQ(run_child(), "m1");
  EXPECT_EQ(run_child(), "h1");
  test::write_file(inc + "/v.h", "#define V 2\n");
  EXPECT_EQ(run_child(), "m2");
  EXPECT_EQ(run_child(), "h2");
}

}  // namespace
}  // namespace kcache
