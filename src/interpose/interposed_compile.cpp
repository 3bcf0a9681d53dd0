#include "interpose/interposed_compile.hpp"

#include <map>
#include <optional>

#include "compile/name_evidence.hpp"
#include "interpose/session.hpp"
#include "kcache/compiler.hpp"

namespace kcache::interpose {

namespace {

// The passport label of a recorded failure: the return code, in decimal.
constexpr std::string_view k_failed_label = "failed";

// NVRTC_ERROR_COMPILATION (nvrtc.h): NVRTC rejected the program.
constexpr int k_nvrtc_error_compilation = 6;

// Whether `rc`, returned by a compile call of `jit`, is the library's verdict
// on the inputs (the same inputs get the same code and log again): NVRTC's
// NVRTC_ERROR_COMPILATION only. nvJitLink's and NVVM's failures are never
// stored (their codes do not tell a rejected input from an internal error).
bool deterministic_failure(Jit jit, int rc) { return jit == Jit::nvrtc && rc == k_nvrtc_error_compilation; }

// kcache's key for `request` (derive_key's fields) plus the real library's
// identity, with the entry kind as the target kind.
Result<KeyBuilder> interposed_key(const InterposedCall& call, const std::string& build_id) {
  auto base = derive_key(call.request);
  if (!base) {
    return tl::unexpected(base.error());
  }
  KeyBuilder kb(base->record().domain);
  for (const auto& f : base->record().fields) {
    if (f.digested) {
      const auto digest = Key::parse(f.value);  // a SHA-256 in lowercase hex, as add_digest wrote it
      if (!digest) {
        return make_error(ErrorCode::internal, "key field " + f.name + " holds no SHA-256");
      }
      kb.add_digest(f.name, digest->bytes());
    } else {
      kb.add(f.name, f.name == "target_kind" ? std::string_view(call.entry_kind) : std::string_view(f.value));
    }
  }
  kb.add("interposed.format", "1");
  kb.add("interposed.version", call.version);
  kb.add("interposed.build_id", build_id);
  return kb;
}

// The arch the options name (for the passport's target), or empty.
std::string arch_of(const KeyRecord& record) {
  for (const auto& f : record.fields) {
    if (f.name == "option" && f.value.rfind("--gpu-architecture=", 0) == 0) {
      return f.value.substr(19);
    }
    if (f.name == "option" && f.value.rfind("-arch=", 0) == 0) {
      return f.value.substr(6);
    }
  }
  return {};
}

// Whether the real compile of `call` under jit::probe_name() records what
// `recorded` holds (compile/name_evidence.hpp); false without a probe.
bool same_under_another_directory(const InterposedCall& call, const JitResult& recorded) {
  if (!call.probe) {
    return false;
  }
  const std::string& name = call.request.name;
  const std::string probe = jit::probe_name(name);
  const auto other = call.probe(probe);
  return other && other->compile_rc == recorded.compile_rc && other->outputs == recorded.outputs &&
         other->names == recorded.names && other->log.size_rc == recorded.log.size_rc &&
         other->log.get_rc == recorded.log.get_rc && jit::same_log(recorded.log.bytes, other->log.bytes, name, probe);
}

std::map<std::string, std::string> symbols_of(const JitResult& r) {
  std::map<std::string, std::string> m;
  for (const auto& n : r.names) {
    if (n.rc == 0) {
      m.emplace(n.expression, n.lowered);
    }
  }
  return m;
}

}  // namespace

ServedCall serve(const InterposedCall& call) {
  const Jit jit = call.jit;
  if (!call.keyable) {
    Session::log_event(jit, InterposedEvent::uncached, {});
    return {call.real(), nullptr};
  }
  Session::Use use;
  Session* session = use.session();
  if (session == nullptr) {
    Session::log_event(jit, InterposedEvent::uncached, {});
    return {call.real(), nullptr};
  }
  const RealIdentity identity = real_identity(jit);
  auto key = interposed_key(call, identity.build_id);
  if (!key) {
    // Not cacheable by design (a side-effect option, an unbounded computed
    // include) is no failure; anything else is warned about once.
    if (key.error().code != ErrorCode::unsupported) {
      Session::warn_once(jit, "cannot key a compile of " + call.request.name + ": " + key.error().describe());
      session->record(jit, InterposedEvent::fallback, {});
    } else {
      session->record(jit, InterposedEvent::uncached, {});
    }
    return {call.real(), nullptr};
  }
  const Key key_value = key->key();  // hashed once: a KeyBuilder recomputes it on every call
  const bool needs_evidence = jit::left_out_by_evidence(key->record());
  const std::string key_hex = key_value.hex();
  bool compiled_here = false;
  int compile_rc = 0;
  const auto produce = [&]() -> Result<CompileOutput> {
    compiled_here = true;
    JitResult recorded = call.compile();
    compile_rc = recorded.compile_rc;
    CompileOutput out;
    // A failed compile is passed through and stored only when the library
    // rejected the program (deterministic_failure: the same inputs fail the
    // same way), as a negative entry that replays the failure; never one whose
    // disk inputs changed while it ran (its key no longer names its inputs).
    out.cacheable = compile_rc == 0 || deterministic_failure(jit, compile_rc);
    // A failure's log names the program with its directory: never kept under
    // a key that leaves the directory out (compiler.cpp, keep_failure).
    if (out.cacheable && compile_rc != 0 && needs_evidence && call.request.name.find('/') != std::string::npos) {
      out.cacheable = false;
    }
    if (out.cacheable && needs_evidence) {
      out.cacheable = same_under_another_directory(call, recorded);
      if (!out.cacheable) {
        jit::name_directory_matters_for(call.request);
      }
    }
    if (out.cacheable) {
      auto again = interposed_key(call, identity.build_id);
      out.cacheable = again && again->key() == key_value;
    }
    const std::string log = recorded.log.bytes.substr(0, recorded.log.bytes.find('\0'));
    auto symbols = symbols_of(recorded);
    out.artifact = Artifact::make(*key, call.entry_kind, Payload(encode(recorded)),
                                  Producer{std::string(to_string(jit)), call.version},
                                  Target{arch_of(key->record()), ""});
    out.artifact.passport.log = log.substr(0, k_passport_max_log_bytes);
    out.artifact.passport.symbols = std::move(symbols);
    out.artifact.passport.labels["interposed"] = std::string(to_string(jit));
    if (compile_rc != 0) {
      out.artifact.passport.labels[std::string(k_failed_label)] = std::to_string(compile_rc);
    }
    return out;
  };
  CacheOutcome outcome{};
  auto artifact = session->cache().get_or_compile(key_value, produce, &outcome);
  if (compiled_here) {
    const bool stored = outcome == CacheOutcome::compiled;
    session->record(jit, stored ? InterposedEvent::compile : InterposedEvent::uncached, key_hex);
    return {compile_rc, nullptr};
  }
  std::optional<JitResult> result;
  if (artifact && artifact->passport.kind == call.entry_kind) {
    result = decode_jit_result(artifact->payload.view());
  }
  // A recorded failure is replayed only as what it says it is, twice: the
  // return code in the payload (covered by its digest) is one the library
  // rejects programs with, and the passport's label names that code.
  const auto failed = [&] {
    const auto label = artifact->passport.labels.find(std::string(k_failed_label));
    const bool labelled = label != artifact->passport.labels.end();
    if (result->compile_rc == 0) {
      return labelled ? std::optional<bool>() : std::optional<bool>(false);
    }
    const bool said = labelled && label->second == std::to_string(result->compile_rc);
    return deterministic_failure(jit, result->compile_rc) && said ? std::optional<bool>(true) : std::nullopt;
  };
  const std::optional<bool> replays_failure = result ? failed() : std::nullopt;
  if (!result || !replays_failure) {
    Session::warn_once(jit, artifact ? "entry " + key_hex + " does not hold a " + call.entry_kind
                                     : "cache lookup failed: " + artifact.error().describe());
    session->record(jit, InterposedEvent::fallback, key_hex);
    return {call.real(), nullptr};
  }
  session->record(jit, InterposedEvent::hit, key_hex, *replays_failure ? Session::Failure::yes : Session::Failure::no);
  const int rc = result->compile_rc;
  return {rc, std::make_shared<const JitResult>(std::move(*result))};
}

std::optional<std::vector<std::string>> copy_c_strings(std::int64_t count, const char* const* strings) {
  if (count < 0 || (count > 0 && strings == nullptr)) {
    return std::nullopt;
  }
  std::vector<std::string> out;
  for (std::int64_t i = 0; i < count; ++i) {
    if (strings[i] == nullptr) {
      return std::nullopt;
    }
    out.emplace_back(strings[i]);
  }
  return out;
}

InterposedCall start_call(Jit jit, std::string entry_kind, std::string version, std::string backend,
                          std::function<int()> real) {
  InterposedCall call;
  call.jit = jit;
  call.entry_kind = std::move(entry_kind);
  call.version = std::move(version);
  call.request.backend = std::move(backend);
  call.real = std::move(real);
  return call;
}

bool copy_options(std::vector<std::string>& out, std::int64_t count, const char* const* options) {
  auto copied = copy_c_strings(count, options);
  if (!copied) {
    return false;
  }
  out = std::move(*copied);
  return true;
}

}  // namespace kcache::interpose
