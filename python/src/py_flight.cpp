// python/src/py_flight.cpp: kcache._Flight, single-flight for a compile that
// Python runs between two calls (kcache.cuda_core.ProgramCache: cuda.core's
// Program.compile asks `cache.get(key)`, compiles on a miss, then sets
// `cache[key]`).
//
// A flight runs Cache::get_or_compile(key, compile) (kcache/cache.hpp: the
// local lease across threads and processes, then the remote lease across
// hosts, the second look, and the put that releases both once published) on a
// thread of its own. Its compile step hands control back to Python:
//
//   _Flight(store, key, hold_s, route)
//                                 starts the thread; wait() (GIL released)
//                                 returns the artifact when someone else
//                                 published it (a hit), or None when this
//                                 caller is the one to compile
//   deliver(artifact)             the compiled artifact: published through
//                                 get_or_compile, leases released after
//   abandon(uncached)             the compile failed or was skipped: nothing
//                                 stored, leases released, a waiter compiles
//
// A flight that is neither delivered nor abandoned within `hold_s` seconds of
// wait() returning None is abandoned by its thread, so a caller whose compile
// raised cannot hold a key longer than that. Store.close() abandons every
// flight of the store and waits for their threads before it lets go of the
// store (so the last reference, and the flush of queued puts, stays with it).
//
// The flight is one request, counted under `route` (kcache/request_stats.hpp)
// by how get_or_compile ended: served (a holder elsewhere published it),
// compiled (delivered), failed (abandoned: the compile raised or was given up),
// uncached (abandon(uncached=True): compiled, not stored).
#include "bindings.hpp"
#include "kcache/request_stats.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kcache::python {

struct FlightState {
  enum class Phase { waiting, compile, delivered, abandoned, finished };
  std::mutex mutex;
  std::condition_variable changed;
  Phase phase = Phase::waiting;
  std::optional<Artifact> compiled;       // set by deliver()
  std::optional<Result<Artifact>> result; // set when get_or_compile returned
  CacheOutcome outcome = CacheOutcome::compiled;
  std::optional<Tier> served_from;        // set with `result` when it was served
  bool not_stored = false; // abandoned by a caller that compiled without storing (abandon(true))
  bool reached = false;  // get_or_compile called the compile step
  bool released = false; // the thread has let go of the store

  // Ends a flight that was not delivered. Idempotent. `uncached`: the caller
  // compiled, and does not store the result (counted as uncached, not failed).
  void abandon(bool uncached = false) {
    std::lock_guard lock(mutex);
    if (phase == Phase::waiting || phase == Phase::compile) {
      phase = Phase::abandoned;
      not_stored = uncached;
      changed.notify_all();
    }
  }
  // True once the thread has let go of the store, or while it still waits
  // for a lease (then it never reaches the compile step quickly). REQUIRES: mutex.
  bool settled() const { return released || !reached; }
};

void FlightRegistry::add(const std::shared_ptr<FlightState>& flight) {
  std::lock_guard lock(m_mutex);
  std::erase_if(m_flights, [](const std::weak_ptr<FlightState>& w) { return w.expired(); });
  m_flights.push_back(flight);
}

void FlightRegistry::released(FlightState& flight) {
  std::lock_guard lock(m_mutex);
  {
    std::lock_guard state_lock(flight.mutex);
    flight.released = true;
  }
  m_idle.notify_all();
}

void FlightRegistry::abandon_all_and_wait() {
  std::unique_lock lock(m_mutex);
  std::vector<std::shared_ptr<FlightState>> live;
  for (auto& w : m_flights) {
    if (auto f = w.lock()) {
      f->abandon();
      live.push_back(std::move(f));
    }
  }
  // Abandoned flights end at once. One still waiting for another holder's
  // lease is not waited for (close() waits for no other call); it finds
  // itself abandoned when it gets the lease.
  m_idle.wait(lock, [&] {
    for (auto& f : live) {
      std::lock_guard state_lock(f->mutex);
      if (!f->settled()) {
        return false;
      }
    }
    return true;
  });
}

namespace {

class PyFlight {
public:
  PyFlight(const PyStore& store, nb::handle key, double hold_s, const std::string& route)
      : m_state(std::make_shared<FlightState>()), m_key(key_from(key)) {
    if (!route.empty() && !RequestStats::valid_route(route)) {
      raise(ErrorCode::invalid_argument, "route '" + route + "' is not 1 to 16 characters of [a-z0-9._-]");
    }
    if (!(hold_s > 0)) {
      raise(ErrorCode::invalid_argument, "hold_s must be > 0 seconds");
    }
    auto handle = store.handle();
    auto registry = handle->flights;
    registry->add(m_state);
    constexpr double k_max_hold_s =
        30.0 * 24 * 3600; // (a bound that the conversion below cannot overflow)
    const auto hold = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(std::min(hold_s, k_max_hold_s)));
    std::thread([state = m_state, handle = std::move(handle), registry, key = m_key,
                 hold, route]() mutable {
      CacheOutcome outcome = CacheOutcome::compiled;
      auto result = handle->cache->get_or_compile(
          key,
          [&]() -> Result<CompileOutput> {
            std::unique_lock lock(state->mutex);
            state->reached = true;
            if (state->phase == FlightState::Phase::waiting) {
              state->phase = FlightState::Phase::compile;
              state->changed.notify_all();
            }
            state->changed.wait_for(lock, hold,
                                    [&] { return state->phase != FlightState::Phase::compile; });
            if (state->phase != FlightState::Phase::delivered || !state->compiled) {
              state->phase = FlightState::Phase::abandoned;
              // `unsupported`: compiled without the cache, an uncached request (cache.hpp).
              return make_error(state->not_stored ? ErrorCode::unsupported : ErrorCode::busy,
                                "the compile of key " + key.hex() + " was abandoned");
            }
            return CompileOutput{std::move(*state->compiled), true};
          },
          &outcome, route);
      const auto counted = Cache::last_request();
      {
        std::lock_guard lock(state->mutex);
        state->result = std::move(result);
        state->outcome = outcome;
        state->served_from = counted ? counted->tier : std::nullopt;
        state->phase = FlightState::Phase::finished;
        state->changed.notify_all();
      }
      // Let go of the store before saying so: Store.close() waits for this,
      // so that its own reference is the last (and flushes queued puts).
      handle.reset();
      registry->released(*state);
    }).detach();
  }
  PyFlight(const PyFlight&) = delete;
  PyFlight& operator=(const PyFlight&) = delete;
  ~PyFlight() { m_state->abandon(); }

  // The artifact another holder (thread, process or host) published, or
  // std::nullopt when this caller must compile and then deliver() or abandon().
  // A lock or store failure that left no artifact is also std::nullopt (the
  // flight is then over; deliver() puts the artifact directly).
  std::optional<PyArtifact> wait() {
    std::optional<Artifact> got;
    std::string outcome;
    std::optional<Tier> served_from;
    {
      nb::gil_scoped_release release;
      std::unique_lock lock(m_state->mutex);
      m_state->changed.wait(lock, [&] { return m_state->phase != FlightState::Phase::waiting; });
      if (m_state->phase == FlightState::Phase::finished && m_state->result && *m_state->result) {
        got = std::move(**m_state->result);
        outcome = std::string(to_string(m_state->outcome));
        served_from = m_state->served_from;
      }
    }
    if (!got) {
      return std::nullopt;
    }
    return PyArtifact{std::make_shared<const Artifact>(std::move(*got)), std::move(outcome), {}, served_from};
  }

  // Publishes `artifact` (its passport must carry this flight's key) through
  // the flight and returns the outcome ("compiled", "compiled_only"); the
  // leases are released once it is published. When the flight is already over
  // (abandoned, held past hold_s, or it never reached the compile step), the
  // artifact is put into the store directly.
  std::string deliver(const PyStore& store, const PyArtifact& artifact) {
    if (artifact.artifact->passport.key != m_key) {
      raise(ErrorCode::invalid_argument, "the artifact's key " +
                                             artifact.artifact->passport.key.hex() +
                                             " is not the key of this flight, " + m_key.hex());
    }
    auto h = store.handle();
    auto a = artifact.artifact;
    nb::gil_scoped_release release;
    std::unique_lock lock(m_state->mutex);
    if (m_state->phase == FlightState::Phase::compile) {
      m_state->compiled = *a;
      m_state->phase = FlightState::Phase::delivered;
      m_state->changed.notify_all();
      m_state->changed.wait(lock, [&] { return m_state->phase == FlightState::Phase::finished; });
      return m_state->result && *m_state->result ? std::string(to_string(m_state->outcome))
                                                 : "compiled_only";
    }
    lock.unlock();
    return h->store->put(*a) ? "compiled" : "compiled_only";
  }

  // Gives up the compile: nothing is stored, the leases are released, and a
  // waiting holder elsewhere compiles itself. Idempotent. The request counts
  // as failed, or with `uncached` as compiled without the cache.
  void abandon(bool uncached) { m_state->abandon(uncached); }

private:
  std::shared_ptr<FlightState> m_state;
  Key m_key;
};

} // namespace

void bind_flight(nb::module_& m) {
  nb::class_<PyFlight>(
      m, "_Flight",
      "Single-flight for a compile Python runs between two calls (see py_flight.cpp).")
      .def(nb::init<const PyStore&, nb::handle, double, const std::string&>(), nb::arg("store"), nb::arg("key"),
           nb::arg("hold_s"), nb::arg("route") = "")
      .def("wait", &PyFlight::wait)
      .def("deliver", &PyFlight::deliver, nb::arg("store"), nb::arg("artifact"))
      .def("abandon", &PyFlight::abandon, nb::arg("uncached") = false);
}

} // namespace kcache::python
