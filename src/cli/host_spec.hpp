// cli/host_spec.hpp: a host fingerprint from the probed host and a host-spec.
#pragma once

#include "kcache/host_fingerprint.hpp"

#include <string>
#include <string_view>

namespace kcache::cli {

// Puts the fields that `spec` (host-spec syntax, host_fingerprint.hpp) names
// over `host`: `sm=90` keeps the other fields of `host`, `cuda=na` says
// "none" explicitly. Returns the names of the fields put ("sm,jp"), or
// invalid_argument when `spec` does not parse.
Result<std::string> overlay_host(HostFingerprint& host, std::string_view spec);

} // namespace kcache::cli
