// nvcc/toolchain.hpp: who compiles: the nvcc that runs and its host
// compiler, asked of the binaries themselves (private).
//
// nvcc's identity is its `--version` text and a SHA-256 over the bytes of
// every program and data file it runs from its own toolkit (nvcc,
// nvcc.profile, cudafe++, cicc, ptxas, fatbinary, nvlink, bin2c, libdevice),
// so a toolkit patched in place (a new ptxas, same version string) is another
// compiler. The host compiler is found as nvcc finds it (-ccbin, else
// NVCC_CCBIN, else `gcc`; a directory means its `gcc`; a bare name is looked
// up on nvcc's PATH: <cuda>/nvvm/bin, <cuda>/bin, then $PATH), and its
// identity is its `--version` line, its `-dumpmachine`, and the SHA-256 of
// the driver, of the cc1plus it runs and of the assembler it runs.
//
// Hashing ~190 MB of binaries and running `--version` costs about a second,
// so each fact is remembered in the toolchain memo (one file per cache
// directory, v1/nvcc/toolchain): a file's digest under its stat identity
// (path, device, inode, size, mtime, ctime; racy identities never recorded),
// and each answer a program gave under the digest of that program (and the
// flags it was asked with). A hit re-stats the files (about 15 stats) and runs
// nothing.
//
//   memo    := "kcache-nvcc-toolchain 1\n" record* "end\n"
//   record  := "file" str(path) num(dev) num(ino) num(size) num(mtime_ns) num(ctime_ns) str(sha256) "\n"
//            | "ask" str(question) str(answer) "\n"
// (nvcc/record_text.hpp: `str` is length:bytes, `num` decimal). At most 512
// records, the newest first; strictly parsed, at most 1 MiB; any deviation
// and the file is ignored (and replaced by the next save).
//
// Thread-safety: a Toolchain is used by one thread.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kcache/error.hpp"
#include "nvcc/file_stamp.hpp"

namespace kcache::nvcc {

struct NvccCommand;

struct NvccIdentity {
  std::filesystem::path nvcc;   // the program that runs
  std::filesystem::path root;   // the toolkit: nvcc's directory's parent
  std::string version;          // the last two lines of `nvcc --version`, joined by "; "
  std::string tools_sha256;     // over every file of tool_files(), by name and digest
  // Environment variables nvcc.profile adds to (`NAME += ...`, `NAME =+ ...`):
  // nvcc reads them (INCLUDES, PTXAS_FLAGS ...).
  std::vector<std::string> profile_environment;
};

struct HostCompiler {
  std::string path;            // as resolved (the file nvcc runs)
  std::string version;         // first line of `--version`
  std::string machine;         // `-dumpmachine`
  std::string driver_sha256;
  std::string cc1plus_sha256;  // empty when the compiler names no cc1plus
  std::string as_sha256;       // empty when the assembler is not found
};

// The directories a compile may search for headers, as sets (in no order
// that matters to the caller): nvcc's own (from its profile), and the host
// compiler's defaults for C++.
struct SearchDirs {
  std::vector<std::string> toolkit;
  std::vector<std::string> host;
};

class Toolchain {
 public:
  // `memo_file` empty: nothing remembered across processes.
  explicit Toolchain(std::filesystem::path memo_file);
  ~Toolchain();
  Toolchain(const Toolchain&) = delete;
  Toolchain& operator=(const Toolchain&) = delete;

  // The identity of the nvcc at `nvcc`. Fails (not_found / io) when it cannot
  // be run or its files cannot be read: the caller then runs nvcc uncached.
  Result<NvccIdentity> nvcc(const std::filesystem::path& nvcc);

  // The host compiler `command` makes `nvcc` run, and its identity.
  Result<HostCompiler> host_compiler(const NvccCommand& command, const NvccIdentity& nvcc);

  // The search directories of a compile by `nvcc` with `host` given the host
  // options `host_options` (those that change the defaults: -nostdinc,
  // --sysroot, -isysroot ...).
  Result<SearchDirs> search_dirs(const NvccIdentity& nvcc, const HostCompiler& host,
                                 const std::vector<std::string>& host_options);

  // Writes what was learned (merged over the file as it is now), when anything was.
  void save();

  // The files of a toolkit that nvcc runs or reads, relative to its root.
  static const std::vector<std::string>& tool_files();

 private:
  std::optional<std::string> digest(const std::string& path);
  std::optional<std::string> ask(const std::string& question, const std::filesystem::path& program,
                                 const std::vector<std::string>& argv, bool want_stderr);
  struct Record {
    std::string kind;  // "file" or "ask"
    std::string key;   // file: path; ask: question
    FileStamp stamp;   // file only
    std::string value;
  };
  void load();
  const Record* find(const std::string& kind, const std::string& key) const;
  void remember(Record record);

  std::filesystem::path m_file;
  std::vector<Record> m_records;  // newest first
  bool m_loaded = false;
  bool m_changed = false;
  std::int64_t m_now_ns = 0;
};

// Parses the text of nvcc.profile: the names of the variables it adds to.
std::vector<std::string> profile_appended_variables(std::string_view profile);

// Parses `gcc -E -v` output: the directories between "#include ... search
// starts here:" and "End of search list.", each trimmed.
std::vector<std::string> parse_search_list(std::string_view verbose_output);

}  // namespace kcache::nvcc
