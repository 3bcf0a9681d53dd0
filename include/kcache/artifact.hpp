// kcache/artifact.hpp: compiled bytes plus their passport.
//
// An artifact is a plain value: it can be copied, stored, sent to another
// process and checked there. The payload is raw bytes (a cubin payload is
// exactly the cubin) in a Payload: immutable and shared, so copying an
// artifact (a memory-tier hit, a Python object) never copies its bytes.
//
// Thread-safety: a value; const methods may be called from many threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kcache/error.hpp"
#include "kcache/passport.hpp"
#include "kcache/payload.hpp"

namespace kcache {

struct Artifact {
  Payload payload;
  Passport passport;

  // Builds an artifact with a passport filled in from its arguments: payload
  // size and SHA-256, the key and its record, created time (now). Other
  // passport members (log, symbols, labels, duration) are left for the caller.
  static Artifact make(const KeyBuilder& key, std::string kind, Payload payload,
                       Producer producer = {}, Target target = {});

  // Checks the passport against the payload and its key: format version,
  // valid kind, size, the key record hashing to the key (and, for a
  // content-addressed entry, naming this payload: check_entry_identity), and
  // the payload's SHA-256. Returns `corrupt` naming the first mismatch.
  Result<void> verify() const;

  // The checks of verify() without the SHA-256: format version, valid kind,
  // payload size. For an artifact whose digest was checked moments ago.
  Result<void> verify_shape() const;

  friend bool operator==(const Artifact&, const Artifact&) = default;
};

}  // namespace kcache
