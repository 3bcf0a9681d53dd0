// overlay_host: the probed host with the fields a host-spec names put over it.
#include "cli/host_spec.hpp"

#include <algorithm>

namespace kcache::cli {

Result<std::string> overlay_host(HostFingerprint& host, std::string_view spec) {
  auto given = HostFingerprint::parse(spec);
  if (!given) {
    return tl::unexpected(given.error());
  }
  std::string given_fields;
  while (!spec.empty()) {
    const std::string_view pair = spec.substr(0, spec.find(','));
    spec.remove_prefix(std::min(spec.size(), pair.size() + 1));
    const std::string_view field = pair.substr(0, pair.find('='));
    std::string* to = field == "sm"       ? &host.sm
                      : field == "driver" ? &host.driver
                      : field == "cuda"   ? &host.cuda
                      : field == "trt"    ? &host.trt
                      : field == "jp"     ? &host.jetpack
                                          : nullptr;
    const std::string* from = field == "sm"       ? &given->sm
                              : field == "driver" ? &given->driver
                              : field == "cuda"   ? &given->cuda
                              : field == "trt"    ? &given->trt
                              : field == "jp"     ? &given->jetpack
                                                  : nullptr;
    if (to != nullptr && from != nullptr) {
      *to = *from;
      given_fields += (given_fields.empty() ? "" : ",") + std::string(field);
    }
  }
  return given_fields;
}

} // namespace kcache::cli
