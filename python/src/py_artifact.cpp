// python/src/py_artifact.cpp: kcache.Key and kcache.Artifact.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "kcache/blob.hpp"
#include "kcache/key.hpp"
#include "kcache/key_builder.hpp"
#include "kcache/passport.hpp"
#include "shared_bytes.hpp"

namespace kcache::python {

Key key_from(nb::handle value) {
  if (nb::isinstance<Key>(value)) {
    return nb::cast<Key>(value);
  }
  if (nb::isinstance<nb::str>(value)) {
    return unwrap(Key::parse(nb::cast<std::string>(value)));
  }
  throw nb::type_error(
      (std::string("a key must be a kcache.Key or its 64-character hex str, not ") + nb::type_name(value.type()).c_str())
          .c_str());
}

namespace {

const Artifact& get(const PyArtifact& a) { return *a.artifact; }

nb::bytes payload_bytes(const PyArtifact& a) {
  if (a.bytes.is_valid()) {
    return nb::borrow<nb::bytes>(a.bytes);
  }
  if (a.served_from == Tier::memory) {
    // The memory tier's buffer, shared from hit to hit: one bytes object for it.
    return SharedBytes::instance().bytes_of(get(a).payload);
  }
  return nb::bytes(get(a).payload.data(), get(a).payload.size());
}

nb::object passport_dict(const PyArtifact& a) {
  return nb::module_::import_("json").attr("loads")(get(a).passport.to_json());
}

}  // namespace

void bind_artifact(nb::module_& m) {
  // Keys and artifacts for a caller's own opaque key (kcache.cuda_core): the
  // kcache key is KeyBuilder(domain).add_content("key", key_bytes).
  m.def(
      "_domain_key",
      [](const std::string& domain, nb::handle key_bytes) {
        KeyBuilder kb(domain);
        kb.add_content("key", text_or_bytes(key_bytes, "key"));
        return kb.key();
      },
      nb::arg("domain"), nb::arg("key_bytes"));
  m.def(
      "_key_of_values",
      [](const std::string& domain, const std::vector<std::pair<std::string, std::string>>& fields) {
        KeyBuilder kb(domain);
        for (const auto& [name, value] : fields) {
          kb.add(name, value);
        }
        return kb.key();
      },
      nb::arg("domain"), nb::arg("fields"), "The key of literal (name, value) fields, in order.");
  m.def(
      "_domain_artifact",
      [](const std::string& domain, nb::handle key_bytes, const std::string& kind, nb::handle payload,
         const std::string& producer, const std::string& producer_version) {
        KeyBuilder kb(domain);
        kb.add_content("key", text_or_bytes(key_bytes, "key"));
        std::string bytes = text_or_bytes(payload, "value");
        if (!is_valid_kind(kind)) {
          raise(ErrorCode::invalid_argument, "kind '" + kind + "' is not [a-z0-9_-]{1,32}");
        }
        nb::gil_scoped_release release;
        auto a = Artifact::make(kb, kind, std::move(bytes), Producer{producer, producer_version});
        return PyArtifact{std::make_shared<const Artifact>(std::move(a)), "made"};
      },
      nb::arg("domain"), nb::arg("key_bytes"), nb::arg("kind"), nb::arg("payload"), nb::arg("producer"),
      nb::arg("producer_version"));
  // An artifact whose key is made of literal (name, value) fields, as
  // _key_of_values(domain, fields) gives it, with a target arch and labels in
  // its passport (kcache.triton: one Triton group per entry). A non-zero
  // `compile_duration_us` is what the compile took, measured by the caller
  // (kcache.jax: XLA's compile time as JAX measured it); 0 leaves it to the
  // cache (the time its compile step took) or none, for a direct put.
  m.def(
      "_record_artifact",
      [](const std::string& domain, const std::vector<std::pair<std::string, std::string>>& fields,
         const std::string& kind, nb::handle payload, const std::string& producer, const std::string& producer_version,
         const std::string& arch, std::map<std::string, std::string> labels, std::uint64_t compile_duration_us) {
        KeyBuilder kb(domain);
        for (const auto& [name, value] : fields) {
          kb.add(name, value);
        }
        std::string bytes = text_or_bytes(payload, "payload");
        if (!is_valid_kind(kind)) {
          raise(ErrorCode::invalid_argument, "kind '" + kind + "' is not [a-z0-9_-]{1,32}");
        }
        nb::gil_scoped_release release;
        auto a = Artifact::make(kb, kind, std::move(bytes), Producer{producer, producer_version}, Target{arch, ""});
        a.passport.labels = std::move(labels);
        a.passport.compile_duration_us = compile_duration_us;
        return PyArtifact{std::make_shared<const Artifact>(std::move(a)), "made"};
      },
      nb::arg("domain"), nb::arg("fields"), nb::arg("kind"), nb::arg("payload"), nb::arg("producer"),
      nb::arg("producer_version"), nb::arg("arch"), nb::arg("labels"), nb::arg("compile_duration_us") = 0);
  nb::class_<Key>(m, "Key",
                  "A content key: SHA-256 over every input that can change an artifact's bytes.\n\n"
                  "Key(hex) parses exactly 64 lowercase hex characters (InvalidArgument otherwise);\n"
                  "str(key) gives them back. Keys are immutable, hashable and ordered.")
      .def("__init__", [](Key* self, const std::string& hex) { new (self) Key(unwrap(Key::parse(hex))); },
           nb::arg("hex"))
      .def_prop_ro("hex", &Key::hex, "The 64 lowercase hex characters.")
      .def_prop_ro(
          "digest",
          [](const Key& k) { return nb::bytes(reinterpret_cast<const char*>(k.bytes().data()), k.bytes().size()); },
          "The 32 raw bytes.")
      .def("__str__", &Key::hex)
      .def("__repr__", [](const Key& k) { return "kcache.Key('" + k.hex() + "')"; })
      .def("__eq__", [](const Key& a, nb::handle b) { return nb::isinstance<Key>(b) && a == nb::cast<Key>(b); })
      .def("__lt__", [](const Key& a, const Key& b) { return a < b; })
      .def("__hash__", [](const Key& k) {
        std::int64_t h = 0;
        std::memcpy(&h, k.bytes().data(), sizeof h);
        return h == -1 ? -2 : h;
      });

  nb::class_<PyArtifact>(m, "Artifact",
                         "Compiled bytes plus their passport. Immutable; safe to share between threads.\n\n"
                         "Artifacts come from Store.get, kcache.compile, kcache.link and kcache.nvvm_compile,\n"
                         "or from Artifact.from_bytes for storing any file by content.")
      .def_static(
          "from_bytes",
          [](nb::handle payload, const std::string& kind, std::map<std::string, std::string> labels) {
            std::string bytes = text_or_bytes(payload, "payload");
            auto made = make_blob(kind, std::move(bytes), std::move(labels));
            return PyArtifact{std::make_shared<const Artifact>(unwrap(std::move(made))), "made"};
          },
          nb::arg("payload"), nb::arg("kind") = "blob", nb::arg("labels") = std::map<std::string, std::string>{},
          "An artifact holding `payload`, keyed like `kcache put`: SHA-256 over `kind` and the\n"
          "content, never a name. `kind` is [a-z0-9_-]{1,32}; `labels` go into the passport.")
      .def_prop_ro("key", [](const PyArtifact& a) { return get(a).passport.key; }, "The artifact's Key.")
      .def_prop_ro("kind", [](const PyArtifact& a) { return get(a).passport.kind; },
                   "\"cubin\", \"ptx\", \"ltoir\", \"blob\" ...")
      .def_prop_ro(
          "payload", &payload_bytes,
          "The bytes, as a bytes object (see `view` for no copy). A large payload that\n"
          "Store.get read from disk is already one, checked where it lies: no copy then.")
      .def_prop_ro(
          "view",
          [](nb::handle self) {
            const auto& a = nb::cast<const PyArtifact&>(self);
            // The view keeps the artifact alive, not the Python object.
            auto* owner = new std::shared_ptr<const Artifact>(a.artifact);
            nb::capsule keep(owner, [](void* p) noexcept { delete static_cast<std::shared_ptr<const Artifact>*>(p); });
            const std::size_t shape[1] = {(*owner)->payload.size()};
            return nb::ndarray<nb::memview, const std::uint8_t, nb::ndim<1>>(
                       reinterpret_cast<const std::uint8_t*>((*owner)->payload.data()), 1, shape, keep)
                .cast();
          },
          "A read-only memoryview of the bytes, without a copy.")
      .def_prop_ro("passport", &passport_dict, "The passport as a dict (docs/passport.md).")
      .def_prop_ro("passport_json", [](const PyArtifact& a) { return get(a).passport.to_json(); },
                   "The passport as compact JSON text.")
      .def_prop_ro("lowered_names", [](const PyArtifact& a) { return get(a).passport.symbols; },
                   "Name expression -> lowered (mangled) name, from NVRTC.")
      .def_prop_ro("log", [](const PyArtifact& a) { return get(a).passport.log; }, "The compiler's log.")
      .def_prop_ro("compile_duration_us", [](const PyArtifact& a) { return get(a).passport.compile_duration_us; },
                   "How long the compile that made it took, in microseconds (the passport's\n"
                   "compile_duration_us): what a hit saved.")
      .def_prop_ro("outcome", [](const PyArtifact& a) { return a.outcome; },
                   "What produced this object: \"hit\", \"hit_after_wait\", \"compiled\", \"compiled_only\"\n"
                   "(compiled, not stored), \"made\" (from_bytes).")
      .def_prop_ro("served_from", [](const PyArtifact& a) { return tier_object(a.served_from); },
                   "Where a hit came from: \"memory\", \"disk\", \"bundle\" or \"remote\"; None when it was\n"
                   "compiled here or made (kcache/request_stats.hpp).")
      .def("verify", [](const PyArtifact& a) { unwrap(get(a).verify()); },
           "Checks the payload against the passport (size, SHA-256); raises CorruptEntry.")
      .def("__len__", [](const PyArtifact& a) { return get(a).payload.size(); })
      .def("__bytes__", &payload_bytes)
      .def("__repr__", [](const PyArtifact& a) {
        return "kcache.Artifact(kind='" + get(a).passport.kind + "', key='" + get(a).passport.key.hex() +
               "', size=" + std::to_string(get(a).payload.size()) + ", outcome='" + a.outcome + "')";
      });
}

}  // namespace kcache::python
