// cli/output.hpp: what every kcache command shares for talking to people and
// scripts: error reports with a hint, exit codes for errors, tables, sizes,
// times, and opening the configured on-disk store.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command.hpp"
#include "kcache/artifact.hpp"
#include "kcache/error.hpp"
#include "kcache/file_store.hpp"

namespace kcache::cli {

// The exit code for a failed operation: k_exit_usage for invalid_argument,
// k_exit_corrupt for corrupt, k_exit_compile, k_exit_toolkit, else
// k_exit_error. (A miss is not an error: `get` and `show` return k_exit_miss
// themselves.)
int exit_code_for(const Error& error) noexcept;

// A default "what to do" line for `error` (empty when there is nothing to add).
std::string hint_for(const Error& error);

// Prints "kcache: error: <error.describe()>" and, on the next line,
// "kcache: hint: <hint>" (the given one, else hint_for(error)) to stderr.
// Returns exit_code_for(error), so a command can `return report(err);`.
int report(const Error& error, std::string_view hint = {});

// Prints "kcache: <line>" to stderr.
void note(std::string_view line);

// Loads the settings (command line > environment > file > default) and opens
// the FileStore at the configured cache directory.
Result<std::unique_ptr<FileStore>> open_file_store(const Context& ctx);

// A verified entry fetched by fetch_entry: from the disk tier (its payload
// left in its file) or from the bundle tier (its payload maps the bundle).
struct FetchedEntry {
  PayloadFile file;                 // a disk-tier hit
  std::optional<Artifact> bundled;  // a bundle-tier hit (the `bundles` setting)
  std::unique_ptr<Store> bundle_tier;  // the tier that served `bundled`

  const Passport& passport() const noexcept { return bundled ? bundled->passport : file.passport(); }
  std::uint64_t size() const noexcept { return passport().payload_size; }
  // "disk" or "bundle": the tier that served it.
  const char* tier() const noexcept { return bundled ? "bundle" : "disk"; }
  // Copies the payload to `out_fd`: PayloadFile::copy_to for a disk hit; for
  // a bundle hit, from the bundle file in chunks, each hashed before it is
  // written, so that a bundle changed in place since the hit was checked
  // fails the copy (corrupt, exit 4) instead of writing other bytes.
  Result<void> copy_to(int out_fd, std::string_view out_name) const;
};

// Parses `key_text`, opens the file store and fetches the verified entry,
// leaving its payload in its file (memory does not grow with its size); on a
// disk miss, looks in the bundle tier (the `bundles` setting) when it names
// files. Returns k_exit_ok and fills `out` on a hit; otherwise prints what
// went wrong (not a key, the store cannot be read, a miss) and returns its
// exit code.
int fetch_entry(const Context& ctx, const std::string& key_text, FetchedEntry& out);

// Parses every text as a key (64 hex characters) into `keys`. Returns
// k_exit_ok, or reports the first that is not a key and returns its exit code.
int parse_keys(const std::vector<std::string>& texts, std::vector<Key>& keys);

// One count of a command's summary: `json_name` in `--json` output, `label`
// in the sentence ("pulled 3, already local 1, ...").
struct Tally {
  const char* json_name;
  const char* label;
  std::uint64_t count;
};
// Prints the counts as one JSON object (with --json) or one sentence.
void print_tally(const Context& ctx, const std::vector<Tally>& tally);

// "2025-03-01 14:02:11" (UTC) for a Unix time in milliseconds; "-" for 0.
std::string format_time(std::int64_t unix_ms);
// "850 us", "12.3 ms", "4.20 s", "3 min 12 s", "2 h 05 min".
std::string format_duration_us(std::uint64_t us);

// Prints rows as left-aligned columns separated by two spaces; the first row
// is the header. Columns listed in `right` are right-aligned.
void print_table(const std::vector<std::vector<std::string>>& rows, const std::vector<std::size_t>& right = {});

}  // namespace kcache::cli
