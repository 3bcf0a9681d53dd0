#include "nvcc/nvcc_keys.hpp"

#include <algorithm>
#include <cstdlib>

#include "nvcc/nvcc_manifest.hpp"
#include "util/hex.hpp"
#include "util/sha256.hpp"

namespace kcache::nvcc {

namespace {

constexpr std::size_t k_max_header_fields = 64;

std::array<std::uint8_t, 32> raw_digest(const std::string& hex) {
  std::array<std::uint8_t, 32> out{};
  if (auto bytes = util::from_hex(hex); bytes && bytes->size() == 32) {
    std::copy(bytes->begin(), bytes->end(), out.begin());
  } else {
    out = util::sha256(hex);  // "missing": a digest no file has
  }
  return out;
}

// The options whose values are paths, which base_dir rewrites.
bool names_paths(std::string_view option) {
  for (const std::string_view p : {"--include-path=", "--system-include=", "--pre-include=", "--library-path=",
                                   "--compiler-options=", "--forwarded="}) {
    if (option.substr(0, p.size()) == p) {
      return true;
    }
  }
  return false;
}

std::string keyed(const KeyInputs& in, std::string_view path) {
  return in.rewrite != nullptr ? in.rewrite->to_key(path) : std::string(path);
}

void add_inputs(KeyBuilder& kb, const KeyInputs& in) {
  const NvccCommand& cmd = *in.command;
  kb.add("nvcc.version", in.nvcc->version);
  kb.add_digest("nvcc.tools", raw_digest(in.nvcc->tools_sha256));
  kb.add("host.version", in.host->version);
  kb.add("host.machine", in.host->machine);
  kb.add_digest("host.driver", raw_digest(in.host->driver_sha256));
  kb.add("host.cc1plus", in.host->cc1plus_sha256.empty() ? "none" : in.host->cc1plus_sha256);
  kb.add("host.as", in.host->as_sha256.empty() ? "none" : in.host->as_sha256);
  for (const auto& [name, value] : in.environment) {
    kb.add("env:" + name, value);
  }
  if (!in.working_directory.empty()) {
    // Debug information names the working directory; with -G a cubin also
    // names its own output file (ptxas's command line), so both are keyed.
    kb.add("working_directory", in.working_directory);
    kb.add("output_path", cmd.output);
  }
  kb.add("output_kind", kind_name(cmd.output_kind));
  kb.add("source_path", keyed(in, cmd.input));
  kb.add_digest("source", raw_digest(in.source_sha256));
  for (const auto& o : cmd.key_options) {
    kb.add("option", names_paths(o) ? keyed(in, o) : o);
  }
  for (const auto& d : cmd.options_file_digests) {
    kb.add_digest("options_file", raw_digest(d));
  }
  if (!in.base_dir.empty()) {
    kb.add("base_dir", in.base_dir);
  }
}

}  // namespace

bool is_project_header(const std::string& path, const NvccCommand& command) {
  if (path.empty() || path.front() != '/') {
    return true;
  }
  const auto under = [&path](std::string dir) {
    if (dir.empty() || dir.front() != '/') {
      return false;  // a relative directory names relative paths, which are the project's already
    }
    while (dir.size() > 1 && dir.back() == '/') {
      dir.pop_back();
    }
    return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
  };
  for (const auto& d : command.include_dirs) {
    if (under(d)) {
      return true;
    }
  }
  for (const auto& d : command.system_dirs) {
    if (under(d)) {
      return true;
    }
  }
  const auto slash = command.input.rfind('/');
  return slash != std::string::npos && slash > 0 && under(command.input.substr(0, slash));
}

std::vector<std::pair<std::string, std::string>> keyed_environment(const NvccIdentity& nvcc) {
  std::vector<std::string> names = {"NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN",
                                    "CPATH",              "C_INCLUDE_PATH",    "CPLUS_INCLUDE_PATH",
                                    "GCC_EXEC_PREFIX",    "COMPILER_PATH",     "SOURCE_DATE_EPOCH",
                                    "GCC_COMPARE_DEBUG",  "LANG",              "LC_ALL",
                                    "LC_CTYPE",           "LC_MESSAGES"};
  for (const auto& v : nvcc.profile_environment) {
    if (v != "PATH" && v != "LD_LIBRARY_PATH") {
      names.push_back(v);
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& n : names) {
    if (const char* v = std::getenv(n.c_str())) {
      out.emplace_back(n, v);
    }
  }
  return out;
}

KeyBuilder root_manifest_record(const KeyInputs& in) {
  KeyBuilder kb("nvcc-deps");
  add_inputs(kb, in);
  const DependencyOutput& deps = in.command->deps;
  kb.add("depfile.mode", deps.mode == DepMode::none ? "none" : deps.mode == DepMode::full ? "full" : "nonsystem");
  if (deps.mode != DepMode::none) {
    if (deps.targets.empty()) {
      kb.add("depfile.target", keyed(in, in.command->output));  // nvcc names the output
    }
    for (const auto& t : deps.targets) {
      kb.add("depfile.target", keyed(in, t));
    }
    kb.add("depfile.phony", deps.phony ? "yes" : "no");
  }
  return kb;
}

Key root_manifest_key(const KeyInputs& in) { return root_manifest_record(in).key(); }

KeyBuilder next_manifest_record(const Key& parent, const HeaderState& state) {
  KeyBuilder kb("nvcc-deps");
  kb.add("parent", parent.hex());
  kb.add_digest("state", raw_digest(state.digest));
  return kb;
}

KeyBuilder object_record(const KeyInputs& in, const DependencyManifest& manifest, const HeaderState& state) {
  KeyBuilder kb("nvcc");
  add_inputs(kb, in);
  // The project's headers one field each (so `kcache why-miss` names the one
  // that changed), the toolkit's and the system's as one digest.
  std::vector<const HeaderFile*> user;
  std::vector<const HeaderFile*> system;
  for (const auto& h : state.headers) {
    (is_project_header(h.path, *in.command) ? user : system).push_back(&h);
  }
  const auto add_list = [&kb](const std::string& name, const std::vector<const HeaderFile*>& list) {
    util::Sha256 digest;
    for (const HeaderFile* h : list) {
      digest.update(h->keyed);
      digest.update("\0", 1);
      digest.update(h->sha256);
      digest.update("\n", 1);
    }
    kb.add(name + ".count", static_cast<std::int64_t>(list.size()));
    kb.add_digest(name, digest.finish());
  };
  if (user.size() <= k_max_header_fields) {
    for (const HeaderFile* h : user) {
      kb.add_digest("header:" + h->keyed, raw_digest(h->sha256));
    }
  } else {
    add_list("headers", user);
  }
  add_list("headers.system", system);
  util::Sha256 names;
  for (const auto& a : manifest.absent) {
    names.update(a.dir);
    names.update("\0", 1);
    names.update(a.name);
    names.update("\n", 1);
  }
  kb.add("absent.count", static_cast<std::int64_t>(manifest.absent.size()));
  kb.add_digest("absent", names.finish());
  kb.add("absent.present", state.present == 0 ? std::string("none") : state.present_names);
  return kb;
}

}  // namespace kcache::nvcc
