// describe.cpp -- the nanobind twin of ../pybind11/describe.cpp: the same
// describe(obj) over the same ExtendedBuffer, with nanobind's types and
// exceptions, and matrix.cpp (the producer recipe, Matrix) in the same
// module.  nanobind builds through CMake (CMakeLists.txt beside it:
// nanobind_add_module); tests/test_recipes_cpp.py compiles it with g++
// instead, together with nanobind's own sources (nb_combined.cpp), as C++17.
#include <nanobind/nanobind.h>

#include <string>

#include "extended_buffer.hpp"

namespace nb = nanobind;

void add_matrix(nb::module_ &m);    // matrix.cpp

static nb::dict describe(nb::handle obj) {
    const int flags = PyBUF_RECORDS_RO;     // strides + format, read-only
    if (!PyObject_CheckBufferSupports(obj.ptr(), flags)) {
        throw nb::type_error((std::string(Py_TYPE(obj.ptr())->tp_name) +
                              ": need an N-d buffer with a format").c_str());
    }
    ExtendedBuffer buf(obj.ptr(), flags | PyBUF_DEVICE);
    if (!buf) {
        throw nb::python_error();
    }
    const Py_buffer &view = buf.view();
    nb::list shape;
    for (int i = 0; i < view.ndim; i++) {
        shape.append(view.shape[i]);
    }
    nb::dict result;
    result["device"] = buf.device() ? nb::object(nb::str(buf.device()))
                                    : nb::none();
    result["shape"] = nb::tuple(shape);
    result["format"] = view.format;
    result["readonly"] = view.readonly != 0;
    return result;
}   // buf released here, also when a line above throws

NB_MODULE(bufferext_nanobind, m) {
    m.doc() = "A C++ consumer and producer of the extended buffer protocol "
              "(nanobind).";
    m.def("describe", &describe, nb::arg("obj"),
          "Where obj's buffer lives (device: None for CPU memory) and its "
          "shape, format and read-only flag.");
    add_matrix(m);
}
