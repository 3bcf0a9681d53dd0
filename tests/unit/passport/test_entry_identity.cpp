// check_entry_identity and Artifact::verify: an entry is valid only if it is
// what a writer of its key would have written (issue 9 item 1).
#include <gtest/gtest.h>

#include "kcache/artifact.hpp"
#include "kcache/blob.hpp"
#include "kcache/passport.hpp"
#include "util/sha256.hpp"

namespace kcache {
namespace {

Artifact compiled() {
  KeyBuilder kb("nvrtc");
  kb.add("target_kind", "cubin").add_content("source", "__global__ void k() {}").add("option", "-O3");
  return Artifact::make(kb, "cubin", "\x7f" "ELF cubin bytes", {"nvrtc", "13.0"}, {"sm_90", "h"});
}

TEST(EntryIdentity, AcceptsWhatAWriterStamps) {
  const Artifact a = compiled();
  EXPECT_TRUE(check_entry_identity(a.passport.key, a.passport).has_value());
  EXPECT_TRUE(a.verify().has_value());
  const Artifact b = *make_blob("ptx", "some ptx text", {{"label", "x"}});
  EXPECT_TRUE(check_entry_identity(b.passport.key, b.passport).has_value());
  EXPECT_TRUE(b.verify().has_value());
}

TEST(EntryIdentity, RefusesThePassportOfAnotherKey) {
  const Artifact a = compiled();
  const Artifact other = *make_blob("ptx", "other");
  auto r = check_entry_identity(other.passport.key, a.passport);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::corrupt);
  EXPECT_NE(r.error().message.find("not " + other.passport.key.hex()), std::string::npos) << r.error().message;
}

// The key record is edited (a digest, a literal, the domain, a field dropped
// or added): the record no longer hashes to the key.
TEST(EntryIdentity, RefusesAnEditedKeyRecord) {
  const Artifact a = compiled();
  std::vector<Passport> edited(6, a.passport);
  edited[0].key_record.fields[1].value = util::sha256_hex("__global__ void evil() {}");
  edited[1].key_record.fields[2].value = "-O0";
  edited[2].key_record.domain = "nvvm";
  edited[3].key_record.fields.pop_back();
  edited[4].key_record.fields.push_back({"extra", "1", false});
  edited[5].key_record.fields[2].digested = true;  // a literal claimed as a digest
  for (const Passport& p : edited) {
    auto r = check_entry_identity(a.passport.key, p);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::corrupt);
    Artifact forged{a.payload, p};
    EXPECT_FALSE(forged.verify().has_value());
  }
}

// Issue 9: the payload of a `kcache put` entry is replaced and payload.sha256
// (and size) edited to match. The blob's record names the old content, so the
// entry is refused; editing the record's content digest too changes the key.
TEST(EntryIdentity, RefusesABlobWhosePayloadWasSwappedWithAnEditedSha256) {
  const Artifact a = *make_blob("cubin", "the real cubin");
  Artifact forged = a;
  forged.payload = "an attacker's cubin";
  forged.passport.payload_size = forged.payload.size();
  forged.passport.payload_sha256 = util::sha256_hex(forged.payload);
  auto r = check_entry_identity(a.passport.key, forged.passport);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("content digest differs from payload.sha256"), std::string::npos)
      << r.error().message;
  EXPECT_FALSE(forged.verify().has_value());

  forged.passport.key_record.fields[1].value = forged.passport.payload_sha256;
  r = check_entry_identity(a.passport.key, forged.passport);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("key record hashes to"), std::string::npos) << r.error().message;
  EXPECT_FALSE(forged.verify().has_value());
}

TEST(EntryIdentity, RefusesABlobRecordOfAnotherShapeOrKind) {
  const Artifact a = *make_blob("cubin", "bytes");
  // A well-hashed blob record that does not name the payload: the same key
  // made with another field name, an extra field, or another kind.
  auto rekey = [](Passport p) {
    p.key = *recompute_key(p.key_record);
    return p;
  };
  Passport renamed = a.passport;
  renamed.key_record.fields[1].name = "data";
  Passport extra = a.passport;
  extra.key_record.fields.push_back({"note", "x", false});
  Passport kind = a.passport;
  kind.kind = "ptx";  // the record still says cubin
  for (const Passport& p : {rekey(renamed), rekey(extra), rekey(kind)}) {
    auto r = check_entry_identity(p.key, p);
    EXPECT_FALSE(r.has_value()) << p.to_json();
  }
}

}  // namespace
}  // namespace kcache
