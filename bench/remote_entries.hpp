// bench/remote_entries.hpp: the entries the remote benchmarks store, as a
// team's remote holds them: cubin-like payloads (half random, half
// structured, so zstd has some work), zstd level 1, signed with a fixed team
// key (remote_key_file).
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "kcache/artifact.hpp"
#include "kcache/key_builder.hpp"
#include "store/remote/remote_codec.hpp"
#include "store/remote/remote_store.hpp"

namespace kcache::bench {

// Entry `index` of `size` payload bytes: its own key and its own bytes.
inline Artifact make_remote_entry(std::size_t size, std::int64_t index = 0) {
  std::string payload(size, '\0');
  std::mt19937_64 rng(size + static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ULL);
  for (std::size_t i = 0; i < size; ++i) {
    payload[i] = (i / 64) % 2 == 0 ? static_cast<char>(rng()) : static_cast<char>(i & 0x0f);
  }
  KeyBuilder key("bench");
  key.add("size", static_cast<std::int64_t>(size));
  if (index != 0) {
    key.add("index", index);
  }
  return Artifact::make(key, "cubin", std::move(payload));
}

// Writers sign and readers verify with this team key.
inline remote::CodecOptions remote_codec() {
  remote::CodecOptions o;
  o.sign = *remote::make_team_key(std::string(32, 'b'));
  return o;
}

// One entry of a size on one remote, for the hit-against-raw-GET benchmarks:
// the entry, its encoded object, a raw backend of type `Backend` and a
// RemoteStore through which it was published.
template <class Backend>
struct RemoteFixture {
  Artifact artifact;
  std::string object;
  std::unique_ptr<Backend> raw;
  std::unique_ptr<remote::RemoteStore> store;
  bool ok = false;  // published: the remote answers
};

// The fixture for `size` on `url`, made (and the entry published) on first use.
template <class Backend>
RemoteFixture<Backend>& remote_fixture(std::size_t size, const std::string& url) {
  static std::map<std::size_t, RemoteFixture<Backend>> all;
  RemoteFixture<Backend>& f = all[size];
  if (f.raw) {
    return f;
  }
  auto spec = remote::parse_remote_url(url);
  if (!spec) {
    return f;
  }
  f.artifact = make_remote_entry(size);
  f.object = remote::encode_object(f.artifact, remote_codec());
  f.raw = std::make_unique<Backend>(*spec);
  remote::RemoteStoreOptions o;
  o.spec = *spec;
  o.codec = remote_codec();
  o.warn = [](const std::string&) {};
  f.store = std::move(*remote::RemoteStore::open(o));
  (void)f.raw->remove(remote::object_name(f.artifact.passport.key));
  f.ok = f.store->put(f.artifact).has_value();
  return f;
}

// The local decode + full verify of the fixture's object, no network.
template <class Backend>
void bench_local_verify(benchmark::State& state, const RemoteFixture<Backend>& f) {
  const remote::CodecOptions o = remote_codec();
  for (auto _ : state) {
    auto a = remote::decode_object(f.object, f.artifact.passport.key, o);
    benchmark::DoNotOptimize(a);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

// A remote hit through the fixture's RemoteStore (get, decode, full verify).
template <class Backend>
void bench_remote_hit(benchmark::State& state, RemoteFixture<Backend>& f, const std::string& unavailable) {
  if (!f.ok) {
    state.SkipWithError(unavailable.c_str());
    return;
  }
  for (auto _ : state) {
    auto a = f.store->get(f.artifact.passport.key);
    if (!a || !a->has_value()) {
      state.SkipWithError("remote hit failed");
      return;
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

}  // namespace kcache::bench
