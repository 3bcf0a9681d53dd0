// How nvcc command lines are read and classified (src/nvcc/nvcc_command.hpp).
#include "nvcc/nvcc_command.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/files.hpp"
#include "support/temp_dir.hpp"

namespace kcache::nvcc {
namespace {

NvccCommand parse(const std::vector<std::string>& args, NvccEnvironment env = {}) { return parse_command(args, env); }

TEST(NvccCommand, ACmakeCompileIsCacheableWithItsPartsFound) {
  const auto c = parse({"-forward-unknown-to-host-compiler", "-DPROJECT_SCALE=3", "-I/p/include", "-isystem", "/p/sys",
                        "--generate-code=arch=compute_90,code=[compute_90,sm_90]", "-std=c++17", "-MD", "-MT",
                        "CMakeFiles/x.dir/k.cu.o", "-MF", "CMakeFiles/x.dir/k.cu.o.d", "-x", "cu", "-c", "/p/src/k.cu",
                        "-o", "CMakeFiles/x.dir/k.cu.o"});
  ASSERT_TRUE(c.cacheable()) << c.reason_text;
  EXPECT_EQ(c.input, "/p/src/k.cu");
  EXPECT_EQ(c.output, "CMakeFiles/x.dir/k.cu.o");
  EXPECT_EQ(c.output_kind, OutputKind::object);
  EXPECT_EQ(c.deps.mode, DepMode::full);
  EXPECT_EQ(c.deps.file, "CMakeFiles/x.dir/k.cu.o.d");
  ASSERT_EQ(c.deps.targets.size(), 1u);
  EXPECT_EQ(c.deps.targets[0], "CMakeFiles/x.dir/k.cu.o");
  EXPECT_EQ(c.include_dirs, std::vector<std::string>{"/p/include"});
  EXPECT_EQ(c.system_dirs, std::vector<std::string>{"/p/sys"});
  EXPECT_FALSE(c.output_names_paths);
  // Canonical spellings, in order; the output, -MD/-MT/-MF and the input are not options of the key.
  const std::vector<std::string> want{"--forward-unknown-to-host-compiler",
                                      "--define-macro=PROJECT_SCALE=3",
                                      "--include-path=/p/include",
                                      "--system-include=/p/sys",
                                      "--generate-code=arch=compute_90,code=[compute_90,sm_90]",
                                      "--std=c++17",
                                      "--x=cu",
                                      "--compile"};
  EXPECT_EQ(c.key_options, want);
}

TEST(NvccCommand, EverySpellingOfAnOptionIsOneCanonicalOption) {
  const std::vector<std::vector<std::string>> spellings = {
      {"-arch=sm_90"}, {"-arch", "sm_90"}, {"--gpu-architecture=sm_90"}, {"--gpu-architecture", "sm_90"},
      {"-gpu-architecture=sm_90"}};
  for (const auto& s : spellings) {
    std::vector<std::string> args = s;
    args.insert(args.end(), {"-c", "k.cu"});
    const auto c = parse(args);
    ASSERT_TRUE(c.cacheable()) << s[0];
    EXPECT_EQ(c.key_options.front(), "--gpu-architecture=sm_90") << s[0];
  }
  EXPECT_EQ(parse({"-Iinc", "-c", "k.cu"}).key_options.front(), "--include-path=inc");
  EXPECT_EQ(parse({"-I", "inc", "-c", "k.cu"}).key_options.front(), "--include-path=inc");
  EXPECT_EQ(parse({"-O3", "-c", "k.cu"}).key_options.front(), "--optimize=3");
  EXPECT_EQ(parse({"-DX=1", "-c", "k.cu"}).key_options.front(), "--define-macro=X=1");
  EXPECT_EQ(parse({"-m64", "-c", "k.cu"}).key_options.front(), "--m64");
}

TEST(NvccCommand, WhatIsNotACompileOfOneSourceIsNotCacheableWithItsReason) {
  struct Case {
    std::vector<std::string> args;
    Uncacheable reason;
  };
  const std::vector<Case> cases = {
      {{"k.cu", "-o", "app"}, Uncacheable::link},
      {{"-c", "a.cu", "b.cu"}, Uncacheable::several_inputs},
      {{"-c"}, Uncacheable::no_input},
      {{"-c", "a.o"}, Uncacheable::input_kind},
      {{"-E", "k.cu"}, Uncacheable::preprocess},
      {{"-M", "k.cu"}, Uncacheable::dependencies_only},
      {{"-c", "k.cu", "--no-such-option"}, Uncacheable::unknown_option},
      {{"-c", "k.cu", "-keep"}, Uncacheable::side_output},
      {{"-c", "k.cu", "-time", "t.csv"}, Uncacheable::side_output},
      {{"-c", "k.cu", "-Xcompiler", "-save-temps"}, Uncacheable::host_option},
      {{"-c", "k.cu", "-Xcompiler", "-fPIC,-MD"}, Uncacheable::host_option},
      {{"--version"}, Uncacheable::no_compile},
      {{"-c", "k.cu", "--dryrun"}, Uncacheable::no_compile},
      {{"-dlink", "a.o", "-o", "d.o"}, Uncacheable::link},
      {{"-c", "k.cu", "-v"}, Uncacheable::other},
      {{"-c", "k.cu", "-MF", "k.d"}, Uncacheable::other},
      {{"-c", "-ptx", "k.cu"}, Uncacheable::other},
      {{"-c", "k.cu", "-o"}, Uncacheable::other},
      {{"-c", "k.cu", "-lineinfo=true"}, Uncacheable::other},
      {{"-c", "k.cu", "-optf", "/nonexistent/options.txt"}, Uncacheable::options_file},
  };
  for (const auto& c : cases) {
    const auto cmd = parse(c.args);
    EXPECT_EQ(cmd.reason, c.reason) << c.args[0] << " ... " << c.args.back() << ": " << cmd.reason_text;
    EXPECT_FALSE(cmd.reason_text.empty());
  }
}

TEST(NvccCommand, UnknownOptionsAreForwardedToTheHostCompilerWhenNvccWouldForwardThem) {
  const auto c = parse({"-forward-unknown-to-host-compiler", "-Wall", "-fPIC", "-c", "k.cu"});
  ASSERT_TRUE(c.cacheable()) << c.reason_text;
  EXPECT_EQ(c.host_options, (std::vector<std::string>{"-Wall", "-fPIC"}));
  EXPECT_EQ(parse({"-forward-unknown-to-host-compiler", "-fdump-tree-all", "-c", "k.cu"}).reason, Uncacheable::host_option);
  EXPECT_EQ(parse({"-Wall", "-c", "k.cu"}).reason, Uncacheable::unknown_option);
}

TEST(NvccCommand, DebugInformationMakesTheOutputNamePaths) {
  for (const auto* opt : {"-g", "-G", "-lineinfo", "--generate-line-info", "-src-in-ptx"}) {
    EXPECT_TRUE(parse({opt, "-c", "k.cu"}).output_names_paths) << opt;
  }
  EXPECT_TRUE(parse({"-Xcompiler", "-g3", "-c", "k.cu"}).output_names_paths);
  EXPECT_TRUE(parse({"-Xptxas", "-O3,-lineinfo", "-c", "k.cu"}).output_names_paths);
  EXPECT_FALSE(parse({"-O3", "-c", "k.cu"}).output_names_paths);
}

TEST(NvccCommand, OutputsAndDependencyFilesGetTheNamesNvccGivesThem) {
  auto c = parse({"-c", "dir/k.cu", "-MD"});
  EXPECT_EQ(c.output, "k.o");
  EXPECT_EQ(c.deps.file, "k.d");
  c = parse({"-c", "k.cu", "-o", "out/k.cu.o", "-MD"});
  EXPECT_EQ(c.deps.file, "out/k.cu.d");
  c = parse({"-ptx", "k.cu"});
  EXPECT_EQ(c.output, "k.ptx");
  EXPECT_EQ(c.output_kind, OutputKind::ptx);
  EXPECT_EQ(parse({"-cubin", "k.cu"}).output_kind, OutputKind::cubin);
  EXPECT_EQ(parse({"-fatbin", "k.cu"}).output_kind, OutputKind::fatbin);
  EXPECT_EQ(parse({"-dc", "k.cu"}).output_kind, OutputKind::object);
}

TEST(NvccCommand, EnvironmentFlagsAndOptionsFilesAreReadWhereNvccReadsThem) {
  test::TempDir dir;
  const auto file = dir.path() / "opts.txt";
  test::write_file(file, "-DQ=\"a b\"\n -O2\n");
  NvccEnvironment env;
  env.has_prepend = true;
  env.prepend_flags = "-DFIRST";
  env.has_append = true;
  env.append_flags = "-DA=\"x y\" -lineinfo";
  const auto c = parse({"-optf", file.string(), "-c", "k.cu"}, env);
  ASSERT_TRUE(c.cacheable()) << c.reason_text;
  const std::vector<std::string> want{"--define-macro=FIRST", "--define-macro=Q=a b", "--optimize=2", "--compile",
                                      "--define-macro=A=\"x y\"", "--generate-line-info"};
  EXPECT_EQ(c.key_options, want);
  ASSERT_EQ(c.options_file_digests.size(), 1u);
  EXPECT_TRUE(c.output_names_paths);
  NvccEnvironment linking;
  linking.has_append = true;
  linking.append_flags = "-E";
  EXPECT_EQ(parse({"-c", "k.cu"}, linking).reason, Uncacheable::preprocess);
}

TEST(NvccCommand, HostCompilerComesFromCcbinThenTheEnvironment) {
  NvccEnvironment env;
  env.has_ccbin = true;
  env.ccbin = "g++-12";
  EXPECT_EQ(parse({"-c", "k.cu"}, env).ccbin, "g++-12");
  EXPECT_EQ(parse({"-ccbin", "/usr/bin/gcc", "-c", "k.cu"}, env).ccbin, "/usr/bin/gcc");
  EXPECT_EQ(parse({"-c", "k.cu"}).ccbin, "");
}

TEST(NvccCommand, SplittersKeepWhatNvccKeeps) {
  EXPECT_EQ(split_options_file("-DA='x y' \"-I my dir\"\t-O3 \\ z"),
            (std::vector<std::string>{"-DA=x y", "-I my dir", "-O3", " z"}));
  EXPECT_EQ(split_environment_flags("  -DA=\"x y\"   -DB "), (std::vector<std::string>{"-DA=\"x y\"", "-DB"}));
  EXPECT_TRUE(split_environment_flags("").empty());
}

}  // namespace
}  // namespace kcache::nvcc
