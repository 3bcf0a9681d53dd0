// python/src/py_requests.cpp: the request counters (kcache/request_stats.hpp)
// for Python: kcache.record_request() and the "requests" of Store.stats().
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "kcache/request_stats.hpp"

namespace kcache::python {

nb::object tier_object(const std::optional<Tier>& tier) {
  if (!tier) {
    return nb::none();
  }
  return nb::str(std::string(to_string(*tier)).c_str());
}

nb::dict counts_dict(const RequestCounts& c) {
  nb::dict served;
  served["total"] = c.served_total();
  served["failed"] = c.served_failed;  // of the total: failed compiles replayed
  for (unsigned t = 0; t < k_tier_count; ++t) {
    served[std::string(to_string(static_cast<Tier>(t))).c_str()] = c.served[t];
  }
  nb::dict d;
  d["total"] = c.total();
  d["served"] = served;
  d["compiled"] = c.compiled;
  d["uncached"] = c.uncached;
  d["failed"] = c.failed;
  d["compile_us_saved"] = c.compile_us_saved;
  d["compile_us"] = c.compile_us;
  return d;
}

nb::dict requests_dict(Store& store) {
  RequestStats* stats = store.request_stats();
  std::vector<RouteRequests> routes;
  if (stats != nullptr) {
    nb::gil_scoped_release release;
    routes = stats->routes();
  }
  RequestCounts all;
  nb::dict by_route;
  for (const auto& r : routes) {
    all += r.counts;
    by_route[r.route.c_str()] = counts_dict(r.counts);
  }
  nb::dict d = counts_dict(all);
  d["routes"] = by_route;
  return d;
}

void bind_requests(nb::module_& m) {
  m.def(
      "_record_request",
      [](std::optional<PyStore*> store, const std::string& route, const std::string& outcome,
         std::optional<std::string> tier, std::uint64_t compile_us) {
        if (!RequestStats::valid_route(route)) {
          raise(ErrorCode::invalid_argument, "route '" + route + "' is not 1 to 16 characters of [a-z0-9._-]");
        }
        const auto o = parse_request_outcome(outcome);
        if (!o) {
          raise(ErrorCode::invalid_argument,
                "outcome '" + outcome + "' is not one of served, compiled, uncached, failed, served_failure");
        }
        std::optional<Tier> t;
        if (tier) {
          t = parse_tier(*tier);
          if (!t) {
            raise(ErrorCode::invalid_argument, "tier '" + *tier + "' is not one of memory, disk, bundle, remote");
          }
        }
        if ((*o == RequestOutcome::served || *o == RequestOutcome::served_failure) && !t) {
          raise(ErrorCode::invalid_argument, "a served request needs its tier: memory, disk, bundle or remote");
        }
        std::shared_ptr<StoreHandle> h;
        if (store && *store != nullptr) {
          h = (*store)->handle();
        }
        nb::gil_scoped_release release;
        record_request(h ? h->store.get() : nullptr, route, *o, t, compile_us);
      },
      nb::arg("store").none(), nb::arg("route"), nb::arg("outcome"), nb::arg("tier").none(), nb::arg("compile_us"));
}

}  // namespace kcache::python
