// kcache/blob.hpp: storing arbitrary files by content (`kcache put`).
//
// A blob's key is KeyBuilder("blob") over its kind and its content:
//
//   key := KeyBuilder("blob").add("kind", kind).add_content("content", bytes)
//
// and nothing else: never the file's name, path or time, so the same bytes
// put from two places share one entry and different bytes never do.
//
// Thread-safety: free functions over values; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "kcache/artifact.hpp"
#include "kcache/error.hpp"
#include "kcache/key_builder.hpp"

namespace kcache {

// The key builder of a blob of `kind` holding `content` (see above).
KeyBuilder blob_key(std::string_view kind, std::string_view content);

// Builds the artifact for `content`: its blob key, a passport with producer
// ("kcache", library version), the payload size and SHA-256, now as created
// time, and `labels`. Returns invalid_argument when `kind` is not
// [a-z0-9_-]{1,32} or a label name is empty.
Result<Artifact> make_blob(std::string kind, std::string content,
                           std::map<std::string, std::string> labels = {});

// The passport make_blob() gives a content of `size` bytes whose SHA-256 is
// `sha256` (32 raw bytes), for a payload that is never held in memory (`kcache
// put` streams files through FileStore::put_stream). Same errors as make_blob.
Result<Passport> make_blob_passport(std::string kind, std::uint64_t size, const std::array<std::uint8_t, 32>& sha256,
                                    std::map<std::string, std::string> labels = {});

}  // namespace kcache
