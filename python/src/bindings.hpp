// python/src/bindings.hpp: what the binding files of kcache._kcache share.
//
// Errors: a failed kcache call throws PyKcacheError (C++ side); the module's
// translator turns it into the Python exception class of its error family
// (kcache._errors). Nothing else crosses into Python as a C++ exception.
//
// The GIL is released around every call that compiles or touches the disk;
// Python objects are converted to C++ values before, and back after.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>

#include "kcache/artifact.hpp"
#include "kcache/cache.hpp"
#include "kcache/config.hpp"
#include "kcache/error.hpp"
#include "kcache/store.hpp"

namespace kcache::python {

namespace nb = nanobind;

// A kcache::Error on its way to Python.
struct PyKcacheError {
  Error error;
  std::string family;  // "config" for settings errors; empty: by the error code
};

[[noreturn]] inline void raise(Error error) { throw PyKcacheError{std::move(error)}; }
[[noreturn]] inline void raise(ErrorCode code, std::string message) { raise(Error{code, std::move(message), {}}); }

template <class T>
T unwrap(Result<T>&& result) {
  if (!result) {
    raise(std::move(result.error()));
  }
  return std::move(*result);
}
inline void unwrap(Result<void>&& result) {
  if (!result) {
    raise(std::move(result.error()));
  }
}

// An artifact as Python sees it: immutable, shared (the zero-copy view keeps
// it alive), plus what produced it ("hit", "compiled", ...).
struct PyArtifact {
  std::shared_ptr<const Artifact> artifact;
  std::string outcome;
  // The payload as a Python bytes object when the store read it into one
  // (BytesLender): Artifact.payload returns it without a copy. Else unset.
  nb::object bytes{};
  // The tier that served it (a hit from Store.get, a compile's hit); unset
  // when it was compiled or made.
  std::optional<Tier> served_from{};
};

// Lends Python bytes objects to Store::get_into as memory for payloads, so a
// large payload read from disk lands, checked, in the bytes object that
// Artifact.payload returns (one copy from the page cache, none after).
// The allocator runs without the GIL and takes it to allocate; a bytes object
// is released with the GIL, from whichever thread lets go of it last.
class BytesLender {
 public:
  // For Store::get_into; valid while this lender lives.
  PayloadAllocator allocator();
  // The bytes object whose buffer `payload` is, or an unset object.
  // REQUIRES: the GIL.
  nb::object bytes_of(const Payload& payload) const;

 private:
  std::shared_ptr<const void> m_last;  // the last one lent, alive until bytes_of looks
};

struct FlightState;

// The single-flight compiles run by Python (kcache._Flight, py_flight.cpp) on
// one store. Thread-safe.
class FlightRegistry {
 public:
  void add(const std::shared_ptr<FlightState>& flight);
  // Called by a flight's thread once it has let go of the store.
  void released(FlightState& flight);
  // Abandons every flight and waits until each has let go of the store,
  // except those still waiting for another holder's lease. REQUIRES: no GIL.
  void abandon_all_and_wait();

 private:
  std::mutex m_mutex;
  std::condition_variable m_idle;
  std::vector<std::weak_ptr<FlightState>> m_flights;
};

// A store and its single-flight cache. Destroyed (the cache first, then the
// store, which flushes queued puts) when the last user lets go.
struct StoreHandle {
  std::unique_ptr<Store> store;
  std::unique_ptr<Cache> cache;
  // Shared with the flights' threads, which outlive their hold on the store.
  std::shared_ptr<FlightRegistry> flights = std::make_shared<FlightRegistry>();
  ~StoreHandle() {
    cache.reset();
    store.reset();
  }
};

// kcache.Store: thread-safe; close() waits for no one, the handle lives until
// the calls in flight on other threads have returned.
class PyStore {
 public:
  PyStore(std::shared_ptr<StoreHandle> handle, Config config)
      : m_handle(std::move(handle)), m_config(std::move(config)) {}
  // The open handle; raises CacheError when closed.
  std::shared_ptr<StoreHandle> handle() const;
  // Drops this object's reference; the caller destroys the returned handle
  // (with the GIL released: destroying flushes queued puts).
  std::shared_ptr<StoreHandle> take();
  const Config& config() const noexcept { return m_config; }
  // True once close() was called.
  bool is_closed() const {
    std::lock_guard lock(m_mutex);
    return !m_handle;
  }

 private:
  mutable std::mutex m_mutex;
  std::shared_ptr<StoreHandle> m_handle;
  Config m_config;
};

// Text of a str, bytes or buffer argument.
std::string text_or_bytes(nb::handle value, const char* what);
// Raises InvalidArgument (a ValueError) naming `what` when `text` holds a NUL
// byte: the C++ side would cut the text there (options, paths, names).
void refuse_nul(std::string_view text, const char* what);
// A Key from a kcache.Key or its hex str.
Key key_from(nb::handle value);

void bind_artifact(nb::module_& m);
void bind_store(nb::module_& m);
void bind_compile(nb::module_& m);
void bind_options_memo(nb::module_& m);
void bind_plan(nb::module_& m);
void bind_flight(nb::module_& m);
void bind_bundle(nb::module_& m);

void bind_requests(nb::module_& m);

// The tier a served request came from, as text ("memory", "disk", ...), or None.
nb::object tier_object(const std::optional<Tier>& tier);
// The request counters of `store`'s cache directory (all routes, and per
// route) as Store.stats()["requests"] gives them. REQUIRES: the GIL.
nb::dict requests_dict(Store& store);

}  // namespace kcache::python
