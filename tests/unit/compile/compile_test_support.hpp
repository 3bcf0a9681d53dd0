// tests/unit/compile/compile_test_support.hpp: what the compile tests share.
//
// Tests that need the CUDA toolkit call KCACHE_REQUIRE_TOOLKIT(). Without a
// toolkit they skip with a clear message, unless KCACHE_REQUIRE_TOOLKIT=1 is
// set (CI sets it on machines that must have one): then they fail.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "deps/directive_scanner.hpp"
#include "kcache/store.hpp"
#include "kcache/toolkit.hpp"
#include "support/files.hpp"

namespace kcache::test {

// The header names of the #include directives find_directives() sees in `text`.
inline std::vector<std::string> directive_names(std::string_view text, std::string* computed = nullptr) {
  std::vector<std::string> out;
  for (const auto& d : jit::find_directives(text, computed)) {
    out.push_back(d.name);
  }
  return out;
}

inline bool toolkit_required() {
  const char* v = std::getenv("KCACHE_REQUIRE_TOOLKIT");
  return v != nullptr && std::string(v) == "1";
}

inline std::string toolkit_problem(ToolkitLibrary lib) {
  auto id = Toolkit::instance().identify(lib);
  return id ? std::string() : id.error().describe();
}

#define KCACHE_REQUIRE_LIBRARY(lib)                                                              \
  do {                                                                                           \
    const auto kcache_problem = ::kcache::test::toolkit_problem(lib);                            \
    if (!kcache_problem.empty()) {                                                               \
      if (::kcache::test::toolkit_required()) {                                                  \
        FAIL() << "KCACHE_REQUIRE_TOOLKIT=1 but the CUDA toolkit is missing: " << kcache_problem; \
      }                                                                                          \
      GTEST_SKIP() << "no CUDA toolkit on this machine (" << kcache_problem << ")";              \
    }                                                                                            \
  } while (false)

#define KCACHE_REQUIRE_TOOLKIT() KCACHE_REQUIRE_LIBRARY(::kcache::ToolkitLibrary::nvrtc)

// A small, real, thread-safe Store over a std::map that counts its calls; it
// verifies on put like every store. Used until tests here switch to MemoryStore.
class MapStore final : public Store {
 public:
  std::string_view name() const noexcept override { return "map"; }
  Result<std::optional<Artifact>> get(const Key& key) override {
    std::lock_guard lock(m_mutex);
    ++m_gets;
    const auto it = m_entries.find(key);
    if (it == m_entries.end()) {
      return std::optional<Artifact>{};
    }
    return std::optional<Artifact>(it->second);
  }
  Result<PutOutcome> put(const Artifact& artifact) override {
    if (auto ok = artifact.verify(); !ok) {
      return tl::unexpected(ok.error());
    }
    std::lock_guard lock(m_mutex);
    ++m_puts;
    return m_entries.emplace(artifact.passport.key, artifact).second ? PutOutcome::stored
                                                                     : PutOutcome::already_present;
  }
  Result<bool> remove(const Key& key) override {
    std::lock_guard lock(m_mutex);
    return m_entries.erase(key) > 0;
  }
  Result<std::vector<EntryInfo>> list() override {
    std::lock_guard lock(m_mutex);
    std::vector<EntryInfo> out;
    for (const auto& [k, a] : m_entries) {
      out.push_back({k, a.passport.kind, a.passport.payload_size, a.passport.created_unix_ms, 0});
    }
    return out;
  }
  Result<StoreStats> stats() override {
    std::lock_guard lock(m_mutex);
    StoreStats s;
    s.entries = m_entries.size();
    s.puts = m_puts;
    return s;
  }
  std::size_t puts() const {
    std::lock_guard lock(m_mutex);
    return m_puts;
  }

 private:
  mutable std::mutex m_mutex;
  std::map<Key, Artifact> m_entries;
  std::size_t m_gets = 0;
  std::size_t m_puts = 0;
};

}  // namespace kcache::test
