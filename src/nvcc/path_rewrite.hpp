// nvcc/path_rewrite.hpp: keys and manifests that two checkouts share
// (`base_dir`, KCACHE_BASE_DIR; private; docs/nvcc.md, "Sharing across
// checkouts").
//
// With base_dir set, the paths an nvcc key holds (the source, -I, -isystem,
// -include and host -I values, the dependency file's target, every header
// and absent name) are keyed with base_dir's part replaced by a marker byte
// (0x01, which no path nvcc writes holds), and the dependency manifest keeps
// the headers, the absent names and the dependency file's text that way, so
// a build in /home/b/proj finds what one in /home/a/proj stored and expands
// it with its own base_dir. It is used only where the output does not name
// those paths: never with -g, -G, -lineinfo (the launcher keys the working
// directory there), and a compile whose output holds `<base_dir>/` anyway
// (`__FILE__`, `assert`) is not stored and its relative key is remembered
// as absolute (deps/base_dir.hpp's verdicts, in v1/nvcc/), so the next
// compile of it is keyed with absolute paths.
//
// Thread-safety: a value.
#pragma once

#include <string>
#include <string_view>

namespace kcache::nvcc {

class PathRewrite {
 public:
  static constexpr char k_marker = '\x01';

  PathRewrite() = default;  // inactive: every string as it is
  explicit PathRewrite(std::string base) : m_base(std::move(base)) {}

  bool active() const noexcept { return !m_base.empty(); }
  const std::string& base() const noexcept { return m_base; }

  // `text` with every occurrence of base_dir that ends there or at a '/' (or
  // a ',' inside an option's list) replaced by the marker.
  std::string to_key(std::string_view text) const;
  // The inverse: every marker replaced by base_dir.
  std::string expand(std::string_view text) const;

  // Why base_dir cannot be used for keys here (a character a dependency file
  // escapes, a path that holds the marker); empty when it can.
  static std::string unusable_because(const std::string& base);

 private:
  std::string m_base;
};

}  // namespace kcache::nvcc
