// python/src/py_compile.cpp: kcache.compile, link, nvvm_compile, compile_key
// and why_miss. The Python wrappers in kcache/__init__.py choose the store.
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "kcache/compiler.hpp"
#include "kcache/key_builder.hpp"
#include "kcache/passport.hpp"

namespace kcache::python {

namespace {

std::vector<std::string> strings(nb::handle seq, const char* what) {
  if (nb::isinstance<nb::str>(seq) || nb::isinstance<nb::bytes>(seq)) {
    throw nb::type_error((std::string(what) + " must be a sequence of str, not a single str").c_str());
  }
  std::vector<std::string> out;
  for (nb::handle item : seq) {
    // A str or bytes first: asking a str for __fspath__ raises (and clears)
    // an AttributeError, about 0.3 us an option on every warm compile.
    if (!nb::isinstance<nb::str>(item) && !nb::isinstance<nb::bytes>(item) && nb::hasattr(item, "__fspath__")) {
      out.push_back(nb::cast<std::string>(nb::module_::import_("os").attr("fspath")(item)));
    } else {
      out.push_back(text_or_bytes(item, what));
    }
    refuse_nul(out.back(), what);
  }
  return out;
}

// Runs `request` through the store's single-flight cache, or, without a
// store, compiles it directly. The GIL is released throughout.
PyArtifact run(std::optional<PyStore*> store, const CompileRequest& request, const std::string& route = {}) {
  std::shared_ptr<StoreHandle> h;
  if (store && *store != nullptr) {
    h = (*store)->handle();
  }
  nb::gil_scoped_release release;
  if (!h) {
    CompileInfo info;
    auto artifact = unwrap(compile(request, nullptr, &info));
    return PyArtifact{std::make_shared<const Artifact>(std::move(artifact)), "compiled_only"};
  }
  CacheOutcome outcome = CacheOutcome::compiled;
  // Shared: a hit from the memory tier copies nothing.
  auto artifact = unwrap(h->cache->get_or_compile_shared(request, &outcome, route));
  const auto counted = Cache::last_request();
  return PyArtifact{std::move(artifact), std::string(to_string(outcome)), {}, counted ? counted->tier : std::nullopt};
}

CompileRequest nvrtc_request(nb::handle source, const std::string& target, const std::string& arch,
                             nb::handle options, nb::handle name_expressions, nb::handle headers,
                             nb::handle include_paths, const std::string& name, std::optional<std::string> source_path) {
  refuse_nul(arch, "arch");
  refuse_nul(name, "name");
  if (source_path) {
    refuse_nul(*source_path, "source_path");
  }
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = name;
  r.source = text_or_bytes(source, "source");
  r.target_kind = target;
  if (!arch.empty()) {
    r.options.push_back("--gpu-architecture=" + arch);
  }
  for (auto& p : strings(include_paths, "include_paths")) {
    r.options.push_back("--include-path=" + p);
  }
  for (auto& o : strings(options, "options")) {
    r.options.push_back(std::move(o));
  }
  r.name_expressions = strings(name_expressions, "name_expressions");
  if (!headers.is_none()) {
    nb::object items = headers.attr("items")();
    for (nb::handle kv : items) {
      auto t = nb::borrow<nb::tuple>(kv);
      std::string header_name = text_or_bytes(t[0], "header name");
      refuse_nul(header_name, "header name");
      r.headers.push_back({std::move(header_name), "header", text_or_bytes(t[1], "header content")});
    }
  }
  if (source_path) {
    r.source_path = *source_path;
  }
  return r;
}

std::optional<std::string> present(const std::string& value, bool is_present) {
  if (!is_present) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

void bind_compile(nb::module_& m) {
  m.def(
      "_compile",
      [](std::optional<PyStore*> store, nb::handle source, const std::string& target, const std::string& arch,
         nb::handle options, nb::handle name_expressions, nb::handle headers, nb::handle include_paths,
         const std::string& name, std::optional<std::string> source_path, const std::string& route) {
        auto request = nvrtc_request(source, target, arch, options, name_expressions, headers, include_paths, name,
                                     std::move(source_path));
        return run(store, request, route);
      },
      nb::arg("store").none(), nb::arg("source"), nb::arg("target"), nb::arg("arch"), nb::arg("options"),
      nb::arg("name_expressions"), nb::arg("headers").none(), nb::arg("include_paths"), nb::arg("name"),
      nb::arg("source_path").none(), nb::arg("route") = "");
  m.def(
      "_compile_key",
      [](nb::handle source, const std::string& target, const std::string& arch, nb::handle options,
         nb::handle name_expressions, nb::handle headers, nb::handle include_paths, const std::string& name,
         std::optional<std::string> source_path) {
        auto request = nvrtc_request(source, target, arch, options, name_expressions, headers, include_paths, name,
                                     std::move(source_path));
        nb::gil_scoped_release release;
        return unwrap(derive_request_key(request));
      },
      nb::arg("source"), nb::arg("target"), nb::arg("arch"), nb::arg("options"), nb::arg("name_expressions"),
      nb::arg("headers").none(), nb::arg("include_paths"), nb::arg("name"), nb::arg("source_path").none());
  m.def(
      "_link",
      [](std::optional<PyStore*> store, nb::handle inputs, nb::handle options) {
        CompileRequest r;
        r.backend = "nvjitlink";
        r.name = "link";
        r.target_kind = "cubin";
        r.options = strings(options, "options");
        for (nb::handle item : inputs) {
          auto t = nb::borrow<nb::tuple>(item);
          if (t.size() != 3) {
            throw nb::type_error("each link input must be (name, kind, bytes)");
          }
          std::string input_name = text_or_bytes(t[0], "input name");
          std::string input_kind = text_or_bytes(t[1], "input kind");
          refuse_nul(input_name, "input name");
          refuse_nul(input_kind, "input kind");
          r.inputs.push_back({std::move(input_name), std::move(input_kind), text_or_bytes(t[2], "input bytes")});
        }
        return run(store, r);
      },
      nb::arg("store").none(), nb::arg("inputs"), nb::arg("options"));
  m.def(
      "_nvvm_compile",
      [](std::optional<PyStore*> store, nb::handle ir, const std::string& name, nb::handle modules,
         nb::handle options) {
        refuse_nul(name, "name");
        CompileRequest r;
        r.backend = "nvvm";
        r.name = name;
        r.source = text_or_bytes(ir, "ir");
        r.target_kind = "ptx";
        r.options = strings(options, "options");
        for (nb::handle item : modules) {
          auto t = nb::borrow<nb::tuple>(item);
          if (t.size() != 2) {
            throw nb::type_error("each extra module must be (name, bytes)");
          }
          std::string module_name = text_or_bytes(t[0], "module name");
          refuse_nul(module_name, "module name");
          r.inputs.push_back({std::move(module_name), "nvvm", text_or_bytes(t[1], "module bytes")});
        }
        return run(store, r);
      },
      nb::arg("store").none(), nb::arg("ir"), nb::arg("name"), nb::arg("modules"), nb::arg("options"));
  m.def(
      "_why_miss",
      [](const std::string& a, const std::string& b) {
        auto pa = unwrap(Passport::from_json(a));
        auto pb = unwrap(Passport::from_json(b));
        std::vector<std::tuple<std::string, std::optional<std::string>, std::optional<std::string>>> out;
        for (const auto& d : diff(pa.key_record, pb.key_record)) {
          out.emplace_back(d.name, present(d.left, d.left_present), present(d.right, d.right_present));
        }
        return out;
      },
      nb::arg("a"), nb::arg("b"));
}

}  // namespace kcache::python
