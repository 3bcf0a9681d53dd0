// The working directory is in an NVRTC key exactly where NVRTC writes it into
// the output (deps/working_directory.hpp, docs/keys.md): each case compiles
// the same request in two directories and checks that the keys differ if and
// only if the bytes do.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "deps/working_directory.hpp"
#include "kcache/compiler.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

// Enters `dir` as a shell's `cd` would (chdir, and $PWD set to `pwd`); the
// destructor goes back.
class InDirectory {
 public:
  InDirectory(const fs::path& dir, const std::string& pwd) : m_old(fs::current_path()) {
    const char* old_pwd = std::getenv("PWD");
    m_old_pwd = old_pwd != nullptr ? old_pwd : "";
    fs::current_path(dir);
    ::setenv("PWD", pwd.c_str(), 1);
  }
  ~InDirectory() {
    std::error_code ec;
    fs::current_path(m_old, ec);
    ::setenv("PWD", m_old_pwd.c_str(), 1);
  }
  InDirectory(const InDirectory&) = delete;
  InDirectory& operator=(const InDirectory&) = delete;

 private:
  fs::path m_old;
  std::string m_old_pwd;
};

// Two copies of a small project: k.cu includes "h.h", found through `-I inc`.
struct TwoCopies {
  test::TempDir tmp;
  fs::path a = tmp.path() / "a";
  fs::path b = tmp.path() / "b";
  TwoCopies() {
    for (const auto& dir : {a, b}) {
      fs::create_directories(dir / "inc");
      test::write_file(dir / "inc" / "h.h", "__device__ inline float sq(float x) { return x * x; }\n");
    }
  }
};

const char* const k_source =
    "#include \"h.h\"\n"
    "extern \"C\" __global__ void f(float* p) { p[threadIdx.x] = sq(p[threadIdx.x]); }\n";

struct Case {
  std::string what;
  std::string target;
  std::vector<std::string> options;  // "/fixed/..." stands for a path in copy a, the same from both copies
  std::string name;                  // likewise
  bool memory_header = false;        // h.h given in memory instead of -I
  bool embeds;                       // NVRTC writes the working directory into the output
};

CompileRequest request_for(const Case& c, const fs::path& fixed) {
  auto expand = [&](std::string s) {
    for (const std::string prefix : {"/fixed/", "-I/fixed/"}) {
      if (s.rfind(prefix, 0) == 0) {
        s = prefix.substr(0, prefix.size() - 7) + (fixed / s.substr(prefix.size())).string();
      }
    }
    return s;
  };
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = expand(c.name);
  r.source = k_source;
  if (std::find(c.options.begin(), c.options.end(), "-include") != c.options.end()) {
    r.source = r.source.substr(r.source.find('\n') + 1);  // h.h comes from the pre-include
  }
  r.target_kind = c.target;
  r.options = {"-arch=sm_90"};
  for (const auto& o : c.options) {
    r.options.push_back(expand(o));
  }
  if (c.memory_header) {
    r.headers = {{"h.h", "header", "__device__ inline float sq(float x) { return x * x; }\n"}};
  }
  return r;
}

bool has_working_directory(const KeyBuilder& kb) {
  const auto& f = kb.record().fields;
  return std::any_of(f.begin(), f.end(), [](const KeyField& x) { return x.name == "working_directory"; });
}

TEST(WorkingDirectory, InTheKeyExactlyWhereNvrtcWritesItIntoTheOutput) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::vector<Case> cases = {
      {"release ptx", "ptx", {"-Iinc"}, "k.cu", false, false},
      {"release cubin", "cubin", {"-Iinc"}, "k.cu", false, false},
      {"release cubin -rdc", "cubin", {"-Iinc", "-rdc=true"}, "k.cu", false, false},
      {"release ltoir", "ltoir", {"-Iinc"}, "k.cu", false, true},
      {"release ltoir, absolute paths", "ltoir", {"-I/fixed/inc"}, "/fixed/k.cu", false, true},
      {"-G, absolute paths", "ptx", {"-G", "-I/fixed/inc"}, "/fixed/k.cu", false, true},
      {"--device-debug cubin", "cubin", {"--device-debug", "-Iinc"}, "k.cu", false, true},
      {"-lineinfo, relative name", "ptx", {"-lineinfo", "-I/fixed/none", "-Iinc"}, "k.cu", false, true},
      {"-lineinfo, relative -I", "cubin", {"-lineinfo", "-Iinc"}, "/fixed/k.cu", false, true},
      {"-lineinfo, relative in-memory header", "ptx", {"-lineinfo"}, "/fixed/k.cu", true, true},
      {"-lineinfo, relative -include", "ptx", {"-lineinfo", "-include", "inc/h.h"}, "/fixed/k.cu", false, true},
      {"-lineinfo, absolute paths", "ptx", {"--generate-line-info", "-I/fixed/inc"}, "/fixed/k.cu", false, false},
  };
  TwoCopies copies;
  for (const auto& c : cases) {
    std::vector<std::string> bytes;
    std::vector<Key> keys;
    std::vector<bool> fields;
    for (const auto& dir : {copies.a, copies.b}) {
      InDirectory in(dir, dir.string());
      const CompileRequest r = request_for(c, copies.a);
      auto kb = derive_key(r);
      ASSERT_TRUE(kb) << c.what << ": " << kb.error().describe();
      keys.push_back(kb->key());
      fields.push_back(has_working_directory(*kb));
      auto a = compile_uncached(r);
      ASSERT_TRUE(a) << c.what << ": " << a.error().describe() << "\n" << a.error().log;
      bytes.emplace_back(a->payload);
    }
    EXPECT_EQ(bytes[0] != bytes[1], c.embeds) << c.what << ": NVRTC's output does not behave as measured";
    EXPECT_EQ(keys[0] != keys[1], c.embeds) << c.what;
    EXPECT_EQ(fields[0], c.embeds) << c.what << ": the key record names working_directory";
  }
}

// A `#line` with a relative (or macro-formed) name is joined to the working
// directory under -lineinfo; the check is lexical and conservative.
TEST(WorkingDirectory, RelativeLineDirectivesAreFound) {
  EXPECT_EQ(jit::relative_line_directive("#line 1 \"gen/k.cu\"\nint x;\n"), "#line 1 \"gen/k.cu\"");
  EXPECT_EQ(jit::relative_line_directive("  #  line 7 \"k.cu\"\n"), "#  line 7 \"k.cu\"");
  EXPECT_EQ(jit::relative_line_directive("/* c */ # 12 \"gen/x.cu\" 2\n"), "# 12 \"gen/x.cu\" 2");
  EXPECT_EQ(jit::relative_line_directive("%:line 3 \"a.cu\"\n"), "%:line 3 \"a.cu\"");
  EXPECT_EQ(jit::relative_line_directive("?\?=line 3 \"a.cu\"\n"), "#line 3 \"a.cu\"");
  EXPECT_EQ(jit::relative_line_directive("#li\\\nne 3 \"a.cu\"\n"), "#line 3 \"a.cu\"");
  EXPECT_EQ(jit::relative_line_directive("#line NAME\n"), "#line NAME");
  EXPECT_EQ(jit::relative_line_directive("#line 3 FILE_NAME\n"), "#line 3 FILE_NAME");
  EXPECT_EQ(jit::relative_line_directive("#line 3 \"/abs/k.cu\"\n#line 4\n#include \"h.h\"\n#define x line\n"), "");
  EXPECT_EQ(jit::relative_line_directive("int lines = 3; // #linear\n#pragma once\n"), "");
}

TEST(WorkingDirectory, IsPwdWhenItNamesTheCurrentDirectoryLikeNvrtc) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path real = fs::canonical(tmp.path()) / "real";
  const fs::path other = fs::canonical(tmp.path()) / "other";
  const fs::path link = fs::canonical(tmp.path()) / "link";
  fs::create_directories(real);
  fs::create_directories(other);
  fs::create_directory_symlink(real, link);
  auto cwd_with_pwd = [&](const std::string& pwd) {
    InDirectory in(real, pwd);
    auto cwd = jit::nvrtc_working_directory();
    EXPECT_TRUE(cwd) << cwd.error().describe();
    return cwd ? *cwd : std::string();
  };
  EXPECT_EQ(cwd_with_pwd(real.string()), real.string());
  EXPECT_EQ(cwd_with_pwd(link.string()), link.string()) << "a symbolic link to here is kept, as NVRTC keeps it";
  EXPECT_EQ(cwd_with_pwd(real.string() + "/"), real.string() + "/") << "kept verbatim";
  EXPECT_EQ(cwd_with_pwd(other.string()), real.string()) << "$PWD naming another directory: getcwd()";
  EXPECT_EQ(cwd_with_pwd("real"), real.string()) << "a relative $PWD: getcwd()";

  // NVRTC itself: the line table names the file under $PWD, and the keys follow.
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = "k.cu";
  r.source = "extern \"C\" __global__ void f(float* p) { p[threadIdx.x] *= 2.0f; }\n";
  r.target_kind = "ptx";
  r.options = {"-arch=sm_90", "-lineinfo"};
  std::vector<std::string> ptx;
  std::vector<Key> keys;
  for (const auto& pwd : {link, real, other}) {
    InDirectory in(real, pwd.string());
    auto a = compile_uncached(r);
    ASSERT_TRUE(a) << a.error().describe();
    ptx.emplace_back(a->payload);
    keys.push_back(derive_key(r)->key());
  }
  EXPECT_NE(ptx[0].find("\"" + (link / "k.cu").string() + "\""), std::string::npos) << ptx[0];
  EXPECT_NE(ptx[1].find("\"" + (real / "k.cu").string() + "\""), std::string::npos) << ptx[1];
  EXPECT_EQ(ptx[2], ptx[1]);
  EXPECT_NE(keys[0], keys[1]);
  EXPECT_EQ(keys[2], keys[1]);
}

// A working directory that cannot be read (removed under the process) makes
// such a request uncacheable, never a failed build.
TEST(WorkingDirectory, UnreadableWorkingDirectoryCompilesWithoutTheCache) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path gone = tmp.path() / "gone";
  fs::create_directories(gone);
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = "k.cu";
  r.source = "extern \"C\" __global__ void f(float* p) { p[threadIdx.x] *= 2.0f; }\n";
  r.target_kind = "ltoir";
  r.options = {"-arch=sm_90"};
  InDirectory in(gone, gone.string());
  fs::remove(gone);
  auto kb = derive_key(r);
  ASSERT_FALSE(kb);
  EXPECT_EQ(kb.error().code, ErrorCode::unsupported);
  EXPECT_NE(kb.error().message.find("working directory"), std::string::npos) << kb.error().message;
  test::MapStore store;
  CompileInfo info;
  auto a = compile(r, &store, &info);
  ASSERT_TRUE(a) << a.error().describe();
  EXPECT_FALSE(info.cacheable);
  EXPECT_FALSE(info.stored);
  r.target_kind = "ptx";  // release PTX does not name the directory: cacheable as before
  EXPECT_TRUE(derive_key(r));
}

}  // namespace
}  // namespace kcache
