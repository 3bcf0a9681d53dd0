// store/remote/remote_probe.hpp: what `kcache remote ping` checks of one
// remote, through its backend (not subject to the circuit breaker).
//
// In order, each step only when the one before passed:
//   1. reach    describe(): the server answers (version, mode; HTTP: status
//               of the prefix and the Server header)
//   2. read     GET of an absent probe object: a miss (HTTP 401/403 here is
//               an authentication failure: permission_denied)
//   3. write    unless the remote is read_only: an object holding a small
//               probe artifact, encoded as every upload is (compressed,
//               signed with the team key when one is set), is written under
//               a probe name, read back byte for byte, decoded and verified
//               in full (decode_object: the signature with this host's team
//               keys, the digest, the key), and removed
//   4. signers  where the backend can list (Redis, Redis Cluster): the
//               headers (80 bytes each) of up to k_probe_sample objects are
//               read, and their signer ids counted, so that objects signed
//               with a key this host does not hold are reported
//
// Probe names are "kcache:probe:<16 random hex>": never an object name
// (kcache:v1:<key>) nor a lease, so a probe cannot collide with an entry. On
// Redis the probe is written with a 60 s expiry, so a killed ping leaves
// nothing for long.
//
// Thread-safety: a free function over a thread-safe backend.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "kcache/error.hpp"
#include "store/remote/remote_backend.hpp"
#include "store/remote/remote_codec.hpp"

namespace kcache::remote {

inline constexpr std::size_t k_probe_sample = 16;

struct ProbeReport {
  enum class Check { ok, failed, skipped };

  std::string server;     // describe()'s line
  double reach_ms = 0;    // describe()'s round trip
  Check reach = Check::skipped;
  Check read = Check::skipped;
  Check write = Check::skipped;     // skipped: read_only, or an earlier step failed
  Check team_key = Check::skipped;  // skipped: no signing key, or the write was not checked
  std::optional<Error> error;       // the first failure (the step that failed is `failed`)
  std::string probe_name;           // the name written and removed (empty when none was)
  std::string key_id;               // the signing key's id (empty: none)

  // Step 4. `listable` false: the backend cannot list (nothing sampled).
  bool listable = false;
  std::uint64_t sampled = 0;
  // Sampled objects by signer: a key id (16 hex), or "unsigned".
  std::map<std::string, std::uint64_t> signers;
  // Sampled objects this host would refuse for their signature (signed by a
  // key it does not hold, or unsigned while it holds team keys).
  std::uint64_t foreign = 0;

  // True when every step that ran passed and, when objects were sampled, at
  // least one of them is signed acceptably for this host.
  bool ok() const { return !error && (sampled == 0 || foreign < sampled); }
};

// Runs the steps above against `backend` (the remote `spec`), encoding and
// decoding with `codec`. Never fails as a whole: the report says which step
// failed and why.
ProbeReport probe_remote(RemoteBackend& backend, const RemoteSpec& spec, const CodecOptions& codec);

}  // namespace kcache::remote
