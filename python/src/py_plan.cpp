// python/src/py_plan.cpp: kcache.plan.build (as `kcache plan build`).
#include <mutex>
#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "kcache/builder.hpp"
#include "kcache/host_fingerprint.hpp"
#include "kcache/orchestrator.hpp"
#include "kcache/plan.hpp"
#include "kcache/plan_report.hpp"

namespace kcache::python {

namespace {

nb::dict entry_dict(const EntryResult& e) {
  nb::dict d;
  d["name"] = e.name;
  d["outcome"] = std::string(to_string(e.outcome));
  d["path"] = e.path;
  d["sidecar"] = e.sidecar;
  d["key"] = e.key;
  d["sha256"] = e.sha256;
  d["size"] = e.size;
  d["seconds"] = e.build_seconds ? nb::cast(*e.build_seconds) : nb::none();
  d["saved_seconds"] = e.saved_seconds;
  d["reason"] = e.reason;
  d["error"] = e.error;
  d["log"] = e.log;
  return d;
}

}  // namespace

void bind_plan(nb::module_& m) {
  m.def(
      "_plan_build",
      [](const std::string& path, std::optional<std::string> host_spec, unsigned jobs, bool keep_going,
         std::optional<PyStore*> store, nb::object on_event) {
        refuse_nul(path, "path");
        if (host_spec) {
          refuse_nul(*host_spec, "host");
        }
        std::shared_ptr<StoreHandle> h;
        if (store && *store != nullptr) {
          h = (*store)->handle();
        }
        nb::list results;
        std::optional<nb::python_error> callback_error;
        {
          nb::gil_scoped_release release;
          const BuilderRegistry registry = BuilderRegistry::with_shipped_builders();
          PlanLoadOptions load_options;
          load_options.builders = registry.names();
          Plan plan = unwrap(Plan::load(path, load_options));
          for (const auto& e : plan.entries) {
            if (e.kind == "onnx") {
              raise(ErrorCode::unsupported, "plan entry '" + e.name +
                                                "' is an ONNX model: build plans with ONNX entries with the kcache "
                                                "command (`kcache plan build " + path + "`)");
            }
          }
          HostFingerprint host = host_spec ? unwrap(HostFingerprint::parse(*host_spec)) : probe_host();
          OrchestratorOptions options;
          options.builders = &registry;
          options.cache = h ? h->store.get() : nullptr;
          options.jobs = jobs == 0 ? 1 : jobs;
          options.keep_going = keep_going ? KeepGoing::yes : KeepGoing::no;
          std::mutex error_mutex;
          if (!on_event.is_none()) {
            // Called one at a time by the orchestrator's threads; a callback that
            // raises is remembered and re-raised once the build has finished.
            options.on_event = [&on_event, &callback_error, &error_mutex](std::string_view line) {
              nb::gil_scoped_acquire acquire;
              {
                std::lock_guard lock(error_mutex);
                if (callback_error) {
                  return;
                }
              }
              try {
                on_event(nb::module_::import_("json").attr("loads")(std::string(line)));
              } catch (nb::python_error& e) {
                std::lock_guard lock(error_mutex);
                callback_error.emplace(std::move(e));
              }
            };
          }
          Orchestrator orchestrator(std::move(options));
          PlanReport report = unwrap(orchestrator.run(plan, host));
          nb::gil_scoped_acquire acquire;
          for (const auto& e : report.entries) {
            results.append(entry_dict(e));
          }
        }
        if (callback_error) {
          callback_error->restore();
          throw nb::python_error();
        }
        return results;
      },
      nb::arg("path"), nb::arg("host").none(), nb::arg("jobs"), nb::arg("keep_going"), nb::arg("store").none(),
      nb::arg("on_event").none());
}

}  // namespace kcache::python
