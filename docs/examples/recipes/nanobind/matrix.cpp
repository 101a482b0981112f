// matrix.cpp -- the nanobind twin of ../pybind11/matrix.cpp: the same
// Matrix over the same HostMatrix (host_matrix.hpp), its buffer slots given
// to nb::class_ as nb::type_slots, its flags declared with
// BufferExt_SetSupportedFlags.  Linked into the module of describe.cpp
// (add_matrix); checked by check_producer.py.
#include <nanobind/nanobind.h>

#include <bufferext.h>

#include "host_matrix.hpp"

namespace nb = nanobind;
using namespace nb::literals;

// [getbuffer]
// bf_getbuffer: CPython calls it from C, so no C++ exception may escape
// (noexcept: nothing below throws).
static int matrix_getbuffer(PyObject *self, Py_buffer *view,
                            int flags) noexcept {
    view->obj = nullptr;
    // First, before the object is read: CPU memory answers a PyBUF_DEVICE
    // request explicitly (flags gets PyBUF_DEVICE, device stays NULL);
    // without the request it does nothing.  Never fails for CPU memory.
    (void)BufferExt_SetDevice(self, view, flags, nullptr, nullptr);
    // Matrix.__new__(Matrix) makes an instance __init__ never constructed
    if (!nb::inst_ready(self)) {
        PyErr_Format(PyExc_BufferError, "%.200s: not initialized",
                     Py_TYPE(self)->tp_name);
        return -1;
    }
    return nb::inst_ptr<HostMatrix>(self)->fill(self, view, flags);
}

static void matrix_releasebuffer(PyObject *, Py_buffer *view) noexcept {
    // the object fill() exported, kept in the view: no lookup to fail here
    static_cast<HostMatrix *>(view->internal)->release();
}
// [getbuffer end]

// [type]
// nanobind creates the type from these (PyType_FromSpec)
static PyType_Slot matrix_slots[] = {
    {Py_bf_getbuffer, reinterpret_cast<void *>(matrix_getbuffer)},
    {Py_bf_releasebuffer, reinterpret_cast<void *>(matrix_releasebuffer)},
    {0, nullptr}};

void add_matrix(nb::module_ &m) {
    nb::class_<HostMatrix> cls(
        m, "Matrix", nb::type_slots(matrix_slots),
        "A 2-D float32 matrix in host memory, exported through the "
        "extended buffer protocol (C++, nanobind).");
    // Right after the type is created: the request flags it honours, every
    // legacy one and PyBUF_DEVICE (on 3.12+ this also guards __buffer__).
    if (BufferExt_SetSupportedFlags(
            reinterpret_cast<PyTypeObject *>(cls.ptr()),
            BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE) < 0) {
        throw nb::python_error();
    }
    // [type end]
    cls.def(nb::init<Py_ssize_t, Py_ssize_t>(), "rows"_a = 2, "cols"_a = 3,
            "rows x cols, item (i, j) = i * cols + j; ValueError unless "
            "both are positive.")
        .def_prop_ro("shape", [](const HostMatrix &self) {
            return nb::make_tuple(self.rows(), self.cols());
        })
        .def_prop_ro("exports", &HostMatrix::exports,
                     "Buffers exported and not yet released.");
}
