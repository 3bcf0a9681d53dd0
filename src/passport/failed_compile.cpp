// The negative entry of a failed compile (passport/failed_compile.hpp).
#include "passport/failed_compile.hpp"

#include <string>
#include <utility>

#include "util/wire_codec.hpp"

namespace kcache {

namespace {

constexpr std::string_view k_magic = "KCFAIL01";
constexpr std::uint64_t k_max_text = std::uint64_t{4} << 20;

}  // namespace

bool is_failed_compile(const Passport& passport) noexcept { return passport.kind == k_failed_compile_kind; }

bool holds_failed_compile(std::string_view payload) noexcept { return payload.starts_with(k_magic); }

Artifact make_failed_compile(const KeyBuilder& key, const Error& error, Producer producer, Target target,
                             std::uint64_t compile_us) {
  wire::Writer w;
  w.raw(k_magic);
  w.u32(static_cast<std::uint32_t>(error.code));
  w.bytes(std::string_view(error.message).substr(0, k_max_text));
  w.bytes(std::string_view(error.log).substr(0, k_max_text));
  Artifact a = Artifact::make(key, std::string(k_failed_compile_kind), Payload(w.take()), std::move(producer),
                              std::move(target));
  a.passport.log = error.log.substr(0, k_passport_max_log_bytes);
  a.passport.compile_duration_us = compile_us;
  return a;
}

Result<Error> failed_compile_error(const Artifact& artifact) {
  if (!is_failed_compile(artifact.passport)) {
    return make_error(ErrorCode::corrupt, "entry " + artifact.passport.key.hex() + " is of kind '" +
                                              artifact.passport.kind + "', not a failed compile");
  }
  wire::Reader r(artifact.payload.view());
  std::string_view magic;
  std::uint32_t code = 0;
  Error e;
  r.raw(magic, k_magic.size());
  r.u32(code);
  r.bytes(e.message, k_max_text);
  r.bytes(e.log, k_max_text);
  if (!r.at_end() || magic != k_magic) {
    return make_error(ErrorCode::corrupt,
                      "the failed compile in entry " + artifact.passport.key.hex() + " does not decode");
  }
  if (code != static_cast<std::uint32_t>(ErrorCode::compile_failed)) {
    return make_error(ErrorCode::corrupt, "the failed compile in entry " + artifact.passport.key.hex() +
                                              " holds error code " + std::to_string(code) +
                                              ", not compile_failed");
  }
  e.code = ErrorCode::compile_failed;
  return e;
}

Result<Artifact> served_or_failed(Artifact artifact) {
  if (!is_failed_compile(artifact.passport)) {
    return artifact;
  }
  auto e = failed_compile_error(artifact);
  if (!e) {
    return tl::unexpected(e.error());
  }
  return tl::unexpected(std::move(*e));
}

}  // namespace kcache
