// check_entry_identity: an entry is what its key says (see kcache/passport.hpp).
#include <string>

#include "kcache/key_builder.hpp"
#include "kcache/passport.hpp"
#include "passport/failed_compile.hpp"

namespace kcache {

namespace {

Result<void> mismatch(const std::string& why) { return make_error(ErrorCode::corrupt, why); }

}  // namespace

Result<void> check_entry_identity(const Key& asked, const Passport& passport) {
  if (passport.key != asked) {
    return mismatch("the passport is for key " + passport.key.hex() + ", not " + asked.hex());
  }
  auto recomputed = recompute_key(passport.key_record);
  if (!recomputed) {
    return mismatch("the key record cannot be hashed: " + recomputed.error().message);
  }
  if (*recomputed != asked) {
    return mismatch("the key record hashes to " + recomputed->hex() + ", not to the entry's key");
  }
  // The kind a record names (compiles: "target_kind", plans and blobs:
  // "kind") is the passport's: a cubin is never served as PTX. A compile's
  // negative entry (passport/failed_compile.hpp) has the kind failed-compile
  // under the key a success would have had: never served as that success.
  const bool failed_compile = passport.kind == k_failed_compile_kind && passport.key_record.domain != k_blob_domain;
  for (const KeyField& f : passport.key_record.fields) {
    if (!f.digested && (f.name == "kind" || f.name == "target_kind")) {
      if (f.value != passport.kind && !(failed_compile && f.name == "target_kind")) {
        return mismatch("the key record says " + f.name + " '" + f.value + "', the passport kind '" + passport.kind +
                        "'");
      }
      break;
    }
  }
  if (passport.key_record.domain == k_blob_domain) {
    const auto& f = passport.key_record.fields;
    const bool shaped = f.size() == 2 && f[0].name == "kind" && !f[0].digested && f[1].name == "content" &&
                        f[1].digested;
    if (!shaped) {
      return mismatch("the key record of a content-addressed entry is not [kind, content]");
    }
    if (f[1].value != passport.payload_sha256) {
      return mismatch("the key record's content digest differs from payload.sha256 (the payload is not the one "
                      "the key was made from)");
    }
  }
  return {};
}

}  // namespace kcache
