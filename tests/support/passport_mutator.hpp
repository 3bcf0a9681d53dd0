// tests/support/passport_mutator.hpp: deterministic mutations of real
// passports for the fuzz tests (TESTING F08/F09, issue 9 item 1).
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "kcache/artifact.hpp"

namespace kcache::test {

// One mutated entry: the passport text a reader is given and the payload that
// sits beside it (the original one, or a swapped one for the forged cases).
struct MutatedEntry {
  std::string passport_text;
  std::string payload;
  const char* how = "";  // the mutation's name, for messages
};

// Applies one random mutation to `original` (its to_json() text and payload):
// byte flips, random bytes, truncations, insertions, deletions, member
// removals/additions/type changes/value edits at any depth, repeated members,
// and the forged cases of issue 9 (payload swapped with payload.sha256 and
// size edited, with and without the key record's content digest edited;
// "fields": []; missing domain or schema; missing producer/target members;
// unknown nested members). Deterministic for a given `rng` state.
MutatedEntry mutate_entry(const Artifact& original, std::mt19937_64& rng);

// The passport members a key does not cover: a reader cannot tell an edit of
// these from what the writer wrote without a signature (see docs/passport.md).
// Returns `p` with those members copied from `from`.
Passport with_unkeyed_members_of(Passport p, const Passport& from);

}  // namespace kcache::test
