// describe.cpp -- a pybind11 consumer of bufferext.h: describe(obj) asks
// whether obj can export an N-d buffer with its format, acquires one that
// may be device memory (PyBUF_DEVICE), and reports where it lives and its
// layout without reading the data.  Built by setup.py beside it, with
// matrix.cpp (the producer recipe, Matrix) in the same module; tested by
// tests/test_recipes.py.
#include <pybind11/pybind11.h>

#include "extended_buffer.hpp"

namespace py = pybind11;

void add_matrix(py::module_ &m);    // matrix.cpp

static py::dict describe(py::handle obj) {
    const int flags = PyBUF_RECORDS_RO;     // strides + format, read-only
    if (!PyObject_CheckBufferSupports(obj.ptr(), flags)) {
        throw py::type_error(std::string(Py_TYPE(obj.ptr())->tp_name) +
                             ": need an N-d buffer with a format");
    }
    ExtendedBuffer buf(obj.ptr(), flags | PyBUF_DEVICE);
    if (!buf) {
        throw py::error_already_set();
    }
    const Py_buffer &view = buf.view();
    py::tuple shape(view.ndim);
    for (int i = 0; i < view.ndim; i++) {
        shape[i] = view.shape[i];
    }
    py::dict result;
    result["device"] = buf.device() ? py::object(py::str(buf.device()))
                                    : py::object(py::none());
    result["shape"] = shape;
    result["format"] = view.format;
    result["readonly"] = view.readonly != 0;
    return result;
}   // buf released here, also when a line above throws

// py::mod_gil_not_used(): the module is safe without the GIL (a
// free-threaded CPython keeps it off)
PYBIND11_MODULE(bufferext_pybind11, m, py::mod_gil_not_used()) {
    m.doc() = "A C++ consumer and producer of the extended buffer protocol "
              "(pybind11).";
    m.def("describe", &describe, py::arg("obj"),
          "Where obj's buffer lives (device: None for CPU memory) and its "
          "shape, format and read-only flag.");
    add_matrix(m);
}
