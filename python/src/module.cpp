// python/src/module.cpp: the extension module kcache._kcache.
//
// The module holds the bindings only; kcache/__init__.py is the public face
// (exception classes, the default store, kcache.cuda_core). Importing it
// loads no CUDA library: the toolkit is dlopen'd by the first compile that
// misses.
#include <exception>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "kcache/request_stats.hpp"

namespace kcache::python {

std::string text_or_bytes(nb::handle value, const char* what) {
  if (nb::isinstance<nb::str>(value)) {
    return nb::cast<std::string>(value);
  }
  if (nb::isinstance<nb::bytes>(value)) {
    auto b = nb::borrow<nb::bytes>(value);
    return std::string(b.c_str(), b.size());
  }
  Py_buffer view;
  if (PyObject_GetBuffer(value.ptr(), &view, PyBUF_SIMPLE) == 0) {
    std::string out(static_cast<const char*>(view.buf), static_cast<std::size_t>(view.len));
    PyBuffer_Release(&view);
    return out;
  }
  PyErr_Clear();
  throw nb::type_error((std::string(what) + " must be str, bytes or a bytes-like object, not " +
                        nb::type_name(value.type()).c_str())
                           .c_str());
}

void refuse_nul(std::string_view text, const char* what) {
  if (text.find('\0') != std::string_view::npos) {
    raise(ErrorCode::invalid_argument,
          std::string(what) + " contains a NUL byte; pass it without one (a C string would end there)");
  }
}

namespace {

// Sets the Python exception for `error` through kcache._errors.from_code.
void set_python_error(const Error& error, const std::string& family) {
  try {
    nb::object errors = nb::module_::import_("kcache._errors");
    nb::object exc = errors.attr("from_code")(static_cast<int>(error.code), std::string(to_string(error.code)),
                                              error.message, error.log, family);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (nb::python_error& e) {
    e.restore();
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, error.describe().c_str());
  }
}

}  // namespace

}  // namespace kcache::python

NB_MODULE(_kcache, m) {
  using namespace kcache::python;
  m.doc() = "kcache's C++ library, bound with nanobind (use the kcache package, not this module)";
  m.attr("__version__") = KCACHE_VERSION;
  // Requests through kcache.compile, link and nvvm_compile count as Python's (`kcache stats`).
  kcache::set_default_request_route("python");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const PyKcacheError& e) {
      set_python_error(e.error, e.family);
    }
  });
  bind_artifact(m);
  bind_store(m);
  bind_compile(m);
  bind_options_memo(m);
  bind_plan(m);
  bind_requests(m);
  bind_flight(m);
  bind_bundle(m);
}
