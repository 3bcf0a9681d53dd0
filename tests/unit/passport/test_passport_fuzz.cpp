// Fuzzing of the passport reader (TESTING F08/F09, issue 9 item 1): thousands
// of deterministic mutations of real passports. Whatever a reader accepts
// (grammar, check_entry_identity, payload digest: what FileStore::get checks)
// must have been read faithfully, must name the same entry, and must come
// with exactly the bytes that were written.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kcache/artifact.hpp"
#include "kcache/blob.hpp"
#include "kcache/passport.hpp"
#include "support/passport_mutator.hpp"
#include "util/sha256.hpp"

namespace kcache {
namespace {

std::vector<Artifact> real_entries() {
  std::vector<Artifact> out;
  out.push_back(*make_blob("cubin", std::string("\x7f" "ELF\x02\x01\x01", 7) + std::string(300, '\x42'),
                           {{"model", "resnet"}, {"plan.entry", "a"}}));
  KeyBuilder kb("nvrtc");
  kb.add("backend.version", "13.0").add("target_kind", "ptx").add("name", "k.cu");
  kb.add_content("source", "template <int N> __global__ void k(int* p) { p[0] = N; }");
  kb.add("option", "--gpu-architecture=compute_90").add("name_expression", "k<1>");
  kb.add_content("header:a.h", "#pragma once\n");
  Artifact nvrtc = Artifact::make(kb, "ptx", ".version 8.8\n.target sm_90\n// k\n", {"nvrtc", "13.0"},
                                  {"compute_90", ""});
  nvrtc.passport.log = "k.cu(1): warning: something \"quoted\"\n";
  nvrtc.passport.symbols = {{"k<1>", "_Z1kILi1EEvPi"}};
  nvrtc.passport.compile_duration_us = 41234;
  out.push_back(std::move(nvrtc));
  return out;
}

TEST(PassportFuzz, AcceptedMutationsAreFaithfulNameTheSameEntryAndKeepItsBytes) {
  constexpr int k_per_entry = 6000;
  std::mt19937_64 rng(0x6b6361636865);  // fixed seed: the same mutations every run
  std::uint64_t tried = 0, rejected = 0, identical = 0, unkeyed_edit = 0, forged_compiled = 0;
  std::map<std::string, std::uint64_t> accepted_by_how;
  for (const Artifact& original : real_entries()) {
    ASSERT_TRUE(original.verify().has_value());
    const Key asked = original.passport.key;
    for (int i = 0; i < k_per_entry; ++i) {
      const test::MutatedEntry m = test::mutate_entry(original, rng);
      ++tried;
      // What a reader checks before it returns an entry.
      auto parsed = Passport::from_json(m.passport_text);
      bool accepted = parsed.has_value() && check_entry_identity(asked, *parsed).has_value();
      if (accepted) {
        accepted = Artifact{m.payload, *parsed}.verify().has_value();
      }
      if (!accepted) {
        ++rejected;
        continue;
      }
      ++accepted_by_how[m.how];
      if (m.payload != original.payload) {
        // Other bytes under a passport edited to match: the key of a compiled
        // entry is made from its inputs, so only a signature can catch this
        // (docs/passport.md). A content-addressed entry never gets here.
        ASSERT_NE(original.passport.key_record.domain, k_blob_domain) << m.how << ": " << m.passport_text;
        ASSERT_EQ(parsed->payload_sha256, util::sha256_hex(m.payload));
        ++forged_compiled;
        continue;
      }
      // ... under a passport that names the same entry (key, record, kind,
      // payload digest: everything but the members no key covers) ...
      ASSERT_EQ(test::with_unkeyed_members_of(*parsed, original.passport),
                test::with_unkeyed_members_of(original.passport, original.passport))
          << m.how << ": " << m.passport_text;
      // ... read faithfully: nothing in the document was skipped, defaulted
      // or coerced (no partial parse).
      ASSERT_EQ(nlohmann::json::parse(m.passport_text), nlohmann::json::parse(parsed->to_json()))
          << m.how << ": " << m.passport_text;
      if (*parsed == original.passport) {
        ++identical;
      } else {
        ++unkeyed_edit;
      }
    }
  }
  std::printf("passport fuzz: %llu mutations tried, %llu rejected, %llu accepted: %llu parse to the identical "
              "passport, %llu differ only in members no key covers (log, labels, symbols, producer, target, "
              "times), %llu are a compiled entry's payload swapped with payload.sha256 edited (needs a "
              "signature); a content-addressed entry never came with other bytes\n",
              static_cast<unsigned long long>(tried), static_cast<unsigned long long>(rejected),
              static_cast<unsigned long long>(identical + unkeyed_edit + forged_compiled),
              static_cast<unsigned long long>(identical), static_cast<unsigned long long>(unkeyed_edit),
              static_cast<unsigned long long>(forged_compiled));
  for (const auto& [how, n] : accepted_by_how) {
    std::printf("  accepted after '%s': %llu\n", how.c_str(), static_cast<unsigned long long>(n));
  }
  EXPECT_EQ(tried, 2U * k_per_entry);
  EXPECT_GT(rejected, tried / 2) << "the mutations should mostly break the passport";
}

}  // namespace
}  // namespace kcache
