// matrix.cpp -- the nanobind twin of ../pybind11/matrix.cpp: the same
// Matrix over the same HostMatrix (host_matrix.hpp), its buffer slots given
// to nb::class_ as nb::type_slots, its flags declared with its typed entry
// (BufferExt_SetExtendedGetBuffer).  Linked into the module of describe.cpp
// (add_matrix); checked by check_producer.py.
#include <nanobind/nanobind.h>

#include <bufferext.h>

#include "host_matrix.hpp"

namespace nb = nanobind;
using namespace nb::literals;

// [getbuffer]
// The one function of both doors: `ext` is NULL for a plain request (the
// type's bf_getbuffer) and the consumer's Py_buffer_extended for an
// extended one (the typed entry).  CPython calls both from C, so no C++
// exception may escape (noexcept: nothing below throws).
static int matrix_export(PyObject *self, Py_buffer *view, int flags,
                         Py_buffer_extended *ext) noexcept {
    view->obj = nullptr;
    // Where the memory is, first.  CPU memory (NULL) answers a PyBUF_DEVICE
    // request of the typed entry explicitly (flags gets PyBUF_DEVICE,
    // device stays NULL) and never fails.  A device exporter passes its
    // device name instead, and then this refuses every plain request
    // (BufferError), before anything is counted or referenced: keep the
    // check.
    if (BufferExt_SetDevice(ext, self, flags, nullptr, nullptr) < 0) {
        return -1;
    }
    // Matrix.__new__(Matrix) makes an instance __init__ never constructed
    if (!nb::inst_ready(self)) {
        PyErr_Format(PyExc_BufferError, "%.200s: not initialized",
                     Py_TYPE(self)->tp_name);
        return -1;
    }
    return nb::inst_ptr<HostMatrix>(self)->fill(self, view, flags);
}

// matrix_getbuffer (bf_getbuffer) and matrix_getbuffer_ex (the typed entry)
BUFFEREXT_DEFINE_GETBUFFER(matrix_getbuffer, matrix_export);

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
    // legacy one and PyBUF_DEVICE, and the typed entry that serves them.
    if (BufferExt_SetExtendedGetBuffer(
            reinterpret_cast<PyTypeObject *>(cls.ptr()),
            BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE, matrix_getbuffer_ex) < 0) {
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
