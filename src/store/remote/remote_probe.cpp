#include "store/remote/remote_probe.hpp"

#include <sys/random.h>

#include <array>
#include <chrono>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "kcache/artifact.hpp"
#include "kcache/key_builder.hpp"
#include "util/hex.hpp"

namespace kcache::remote {

namespace {

constexpr std::string_view k_object_prefix = "kcache:v1:";
constexpr std::size_t k_signer_offset = 64;  // magic 8, version 4, flags 4, key 32, lengths 16
constexpr std::uint64_t k_probe_ttl_s = 60;

std::string random_hex(std::size_t bytes) {
  std::array<std::uint8_t, 16> buf{};
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(buf.data() + got, bytes - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    }
  }
  return util::to_hex(buf.data(), bytes);
}

// An object name of an entry (not a lease, not a probe).
bool is_entry_name(std::string_view name) {
  return name.size() == k_object_prefix.size() + 64 && name.substr(0, k_object_prefix.size()) == k_object_prefix &&
         name.substr(k_object_prefix.size()).find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// Step 3: write, read back, verify, remove.
Result<void> write_probe(RemoteBackend& backend, const CodecOptions& codec, ProbeReport& report) {
  const std::string nonce = random_hex(8);
  report.probe_name = "kcache:probe:" + nonce;
  auto kb = KeyBuilder("kcache-ping").add("probe", nonce);
  const Artifact probe =
      Artifact::make(kb, "blob", Payload(std::string("kcache remote ping probe ") + nonce), Producer{"kcache", "ping"});
  const std::string object = encode_object(probe, codec);
  auto put = backend.put(report.probe_name, object, k_probe_ttl_s);
  if (!put) {
    report.probe_name.clear();
    return tl::unexpected(put.error());
  }
  auto got = backend.get(report.probe_name, codec.max_entry_size);
  Result<void> outcome;
  if (!got) {
    outcome = tl::unexpected(got.error());
  } else if (!got->has_value()) {
    outcome = make_error(ErrorCode::io, fmt::format("the probe {} was written but reads back as missing",
                                                    report.probe_name));
  } else if (**got != object) {
    outcome = make_error(ErrorCode::corrupt, fmt::format("the probe {} reads back with other bytes ({} of {})",
                                                         report.probe_name, (*got)->size(), object.size()));
  } else if (auto decoded = decode_object(**got, probe.passport.key, codec); !decoded) {
    report.team_key = ProbeReport::Check::failed;
    outcome = make_error(ErrorCode::corrupt, fmt::format("the probe does not verify on read back ({}: {})",
                                                         to_string(decoded.error().reason), decoded.error().message));
  } else if (codec.sign) {
    report.team_key = ProbeReport::Check::ok;
  }
  auto removed = backend.remove(report.probe_name);
  if (outcome && !removed) {
    outcome = make_error(removed.error().code,
                         fmt::format("the probe {} could not be removed: {}", report.probe_name,
                                     removed.error().describe()));
  } else if (outcome && !*removed) {
    outcome = make_error(ErrorCode::io, fmt::format("the probe {} was gone before it was removed", report.probe_name));
  }
  return outcome;
}

// Step 4: sample the signers of objects on the server.
void sample_signers(RemoteBackend& backend, const CodecOptions& codec, ProbeReport& report) {
  std::vector<std::string> names;
  auto listed = backend.list(k_object_prefix, [&](std::string_view name) {
    if (is_entry_name(name)) {
      names.emplace_back(name);
    }
    return names.size() < k_probe_sample;
  });
  if (!listed) {
    return;  // unsupported, or failed: nothing to tell, cheaply
  }
  report.listable = true;
  std::set<std::string> held;
  if (codec.sign) {
    held.insert(codec.sign->id_hex());
  }
  for (const auto& k : codec.read) {
    held.insert(k.id_hex());
  }
  for (const auto& name : names) {
    auto header = backend.get_prefix(name, k_remote_header_bytes);
    if (!header || !header->has_value() || (*header)->size() < k_remote_header_bytes) {
      continue;
    }
    const std::string& h = **header;
    const bool signed_object = (static_cast<std::uint8_t>(h[12]) & 2U) != 0;
    const std::string signer =
        signed_object ? util::to_hex(reinterpret_cast<const std::uint8_t*>(h.data() + k_signer_offset), 8)
                      : std::string("unsigned");
    ++report.sampled;
    ++report.signers[signer];
    if (!held.empty() && !held.contains(signer)) {
      ++report.foreign;
    }
  }
}

}  // namespace

ProbeReport probe_remote(RemoteBackend& backend, const RemoteSpec& spec, const CodecOptions& codec) {
  ProbeReport report;
  if (codec.sign) {
    report.key_id = codec.sign->id_hex();
  }
  const auto start = std::chrono::steady_clock::now();
  auto who = backend.describe();
  report.reach_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!who) {
    report.reach = ProbeReport::Check::failed;
    report.error = who.error();
    return report;
  }
  report.reach = ProbeReport::Check::ok;
  report.server = *who;
  auto read = backend.get("kcache:probe:" + random_hex(8), 64);
  if (!read) {
    report.read = ProbeReport::Check::failed;
    report.error = read.error();
    return report;
  }
  report.read = ProbeReport::Check::ok;
  if (!spec.read_only) {
    if (auto w = write_probe(backend, codec, report); !w) {
      report.write = ProbeReport::Check::failed;
      report.error = w.error();
      return report;
    }
    report.write = ProbeReport::Check::ok;
  }
  sample_signers(backend, codec, report);
  return report;
}

}  // namespace kcache::remote
