// python/src/py_options_memo.cpp: kcache.cuda_core's memo of cuda.core's
// `ProgramOptions.as_bytes(backend, target_type)`.
//
// A JIT passes the same ProgramOptions object on every launch; formatting it
// (55 fields, in Python) is about 2.5 us, a third of a warm in-process hit of
// a CUB kernel. The memo keeps, per options object (a few at a time), what
// as_bytes returned and every object its answer could depend on, and gives
// that answer again only while each is the same object:
//   - the options' type and the type's `as_bytes` (a patched method is asked);
//   - the instance dictionary's keys and values, in order (a dataclass holds
//     every field there: an assigned field is another object, an added or
//     removed attribute another size or order);
//   - the items of each list value (`include_path.append(...)` changes a
//     list in place), one level deep.
// A value kcache cannot tell is unchanged by its identity (a dict, a set, a
// nested list or tuple, an object of another kind, a str subclass) makes the options
// unremembered: as_bytes is asked on every call, as without the memo. So is
// an object with no instance dictionary (cuda.core's internals moved:
// nothing breaks, only the saving is lost) and one whose `arch` is None. The
// memo holds a reference to each options object it remembers (its id cannot
// be reused meanwhile) and to every object it compared.
//
// Thread-safety: every call holds the GIL.
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"

namespace kcache::python {

namespace {

constexpr std::size_t k_slots = 8;

struct Remembered {
  nb::object options;      // null: an empty slot
  nb::object method;       // type(options).as_bytes when remembered
  std::string backend;
  std::string target;
  std::vector<nb::object> state;  // per dict item: key, value, then a list value's items
  nb::object answer;       // a tuple of the bytes as_bytes returned
};

// Never destroyed: the references it holds must not be dropped after the
// interpreter has finalised (at exit the memory goes with the process).
std::array<Remembered, k_slots>& slots() {
  static auto* s = new std::array<Remembered, k_slots>();  // NOLINT: process lifetime
  return *s;
}
std::size_t g_next = 0;  // the slot the next new options object takes

bool is_path(nb::handle value) {
  static PyObject* pure_path = nb::object(nb::module_::import_("pathlib").attr("PurePath")).release().ptr();  // process lifetime
  return PyObject_IsInstance(value.ptr(), pure_path) == 1;
}

// A value whose meaning its identity fixes: an immutable builtin, a path, or
// (`tuples`) a tuple of those (a macro's (name, value)).
bool immutable(nb::handle v, bool tuples = true) {
  PyObject* p = v.ptr();
  if (p == Py_None || PyBool_Check(p) || PyLong_CheckExact(p) || PyFloat_CheckExact(p) || PyUnicode_CheckExact(p) ||
      PyBytes_CheckExact(p)) {
    return true;
  }
  if (PyTuple_CheckExact(p)) {
    if (!tuples) {
      return false;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(p); ++i) {
      if (!immutable(PyTuple_GET_ITEM(p, i), false)) {
        return false;
      }
    }
    return true;
  }
  return is_path(v);
}

// The objects the answer for `dict` depends on (see the top of this file);
// false when some value is not one kcache can compare by identity.
bool snapshot(PyObject* dict, std::vector<nb::object>& out) {
  out.clear();
  Py_ssize_t pos = 0;
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    out.push_back(nb::borrow(key));
    out.push_back(nb::borrow(value));
    if (PyList_CheckExact(value)) {
      out.push_back(nb::steal(PyLong_FromSsize_t(PyList_GET_SIZE(value))));
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); ++i) {
        if (!immutable(PyList_GET_ITEM(value, i))) {
          return false;
        }
        out.push_back(nb::borrow(PyList_GET_ITEM(value, i)));
      }
    } else if (!immutable(value)) {
      return false;
    }
  }
  return true;
}

// Whether `dict` holds the very objects `state` recorded.
bool unchanged(PyObject* dict, const std::vector<nb::object>& state) {
  std::size_t at = 0;
  Py_ssize_t pos = 0;
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    if (at + 2 > state.size() || state[at].ptr() != key || state[at + 1].ptr() != value) {
      return false;
    }
    at += 2;
    if (PyList_CheckExact(value)) {
      const Py_ssize_t n = PyList_GET_SIZE(value);
      if (at + 1 + static_cast<std::size_t>(n) > state.size() || PyLong_AsSsize_t(state[at].ptr()) != n) {
        return false;
      }
      ++at;
      for (Py_ssize_t i = 0; i < n; ++i, ++at) {
        if (state[at].ptr() != PyList_GET_ITEM(value, i)) {
          return false;
        }
      }
    }
  }
  return at == state.size();
}

nb::object options_bytes(nb::handle options, const std::string& backend, const std::string& target) {
  nb::object method = nb::borrow(reinterpret_cast<PyObject*>(Py_TYPE(options.ptr()))).attr("as_bytes");
  // The instance dictionary (a new reference); none for an object without one.
  nb::object held_dict = nb::steal(PyObject_GenericGetDict(options.ptr(), nullptr));
  if (!held_dict.is_valid()) {
    PyErr_Clear();
  }
  PyObject* dict = held_dict.is_valid() ? held_dict.ptr() : nullptr;
  const bool rememberable = dict != nullptr && PyDict_CheckExact(dict) && [&] {
    PyObject* arch = PyDict_GetItemString(dict, "arch");  // borrowed; null when absent
    return arch != nullptr && arch != Py_None;
  }();
  Remembered* slot = nullptr;
  if (rememberable) {
    for (auto& r : slots()) {
      if (r.options.ptr() == options.ptr()) {
        slot = &r;
        break;
      }
    }
    if (slot != nullptr && slot->method.ptr() == method.ptr() && slot->backend == backend && slot->target == target &&
        unchanged(dict, slot->state)) {
      return slot->answer;
    }
  }
  nb::object got = method(options, backend, target);
  if (!rememberable) {
    return got;
  }
  nb::tuple answer = nb::steal<nb::tuple>(PySequence_Tuple(got.ptr()));
  if (!answer.is_valid()) {
    throw nb::python_error();
  }
  if (slot == nullptr) {
    slot = &slots()[g_next];
    g_next = (g_next + 1) % k_slots;
  }
  std::vector<nb::object> state;
  if (!snapshot(dict, state)) {
    *slot = Remembered{};  // not comparable by identity: asked every time
    return std::move(answer);
  }
  *slot = Remembered{nb::borrow(options), std::move(method), backend, target, std::move(state), answer};
  return std::move(answer);
}

}  // namespace

void bind_options_memo(nb::module_& m) {
  m.def("_cuda_core_options", &options_bytes, nb::arg("options"), nb::arg("backend"), nb::arg("target"),
        "cuda.core's options.as_bytes(backend, target) as a tuple, remembered per options object while "
        "nothing it depends on changed (python/src/py_options_memo.cpp).");
  m.def("_forget_cuda_core_options", [] {
    for (auto& r : slots()) {
      r = Remembered{};
    }
  });
}

}  // namespace kcache::python
