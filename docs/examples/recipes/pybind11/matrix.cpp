// matrix.cpp -- a pybind11 producer of the extended buffer protocol:
// Matrix, a HostMatrix (host_matrix.hpp) whose Python type gets its buffer
// slots through py::custom_type_setup and declares PyBUF_DEVICE with its
// typed entry (BufferExt_SetExtendedGetBuffer).  Linked into the module of
// describe.cpp (add_matrix); built by setup.py beside it; checked by
// check_producer.py.
#include <pybind11/pybind11.h>

#include <bufferext.h>

#include "host_matrix.hpp"

namespace py = pybind11;

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
    // Matrix.__new__(Matrix) makes an instance whose __init__ never ran:
    // no C++ object (a null value pointer).  One that __init__ made (or
    // that C++ returned by value) owns its object through a holder; one
    // that C++ returned by reference (return_value_policy::reference,
    // reference_internal) has an object and no holder (it does not own
    // it), and exports like the others.  Neither call throws; a Python
    // subclass may have other pybind11 bases, hence the lookup by type.
    // py::detail is pybind11's internal namespace (no public API gives an
    // instance's state); check it again when pybind11 changes its major
    // version.
    auto *inst = reinterpret_cast<py::detail::instance *>(self);
    py::detail::value_and_holder held = inst->get_value_and_holder(
        py::detail::get_type_info(typeid(HostMatrix)), false);
    if (held.inst == nullptr || held.value_ptr() == nullptr ||
        (inst->owned && !held.holder_constructed())) {
        PyErr_Format(PyExc_BufferError, "%.200s: not initialized",
                     Py_TYPE(self)->tp_name);
        return -1;
    }
    HostMatrix *matrix = held.value_ptr<HostMatrix>();
    return matrix->fill(self, view, flags);
}

// matrix_getbuffer (bf_getbuffer) and matrix_getbuffer_ex (the typed entry)
BUFFEREXT_DEFINE_GETBUFFER(matrix_getbuffer, matrix_export);

static void matrix_releasebuffer(PyObject *, Py_buffer *view) noexcept {
    // the object fill() exported, kept in the view: no lookup to fail here
    static_cast<HostMatrix *>(view->internal)->release();
}
// [getbuffer end]

void add_matrix(py::module_ &m) {
    // [type]
    py::class_<HostMatrix> cls(
        m, "Matrix", py::custom_type_setup([](PyHeapTypeObject *heap_type) {
            // before PyType_Ready: set the slots, call no Python API
            heap_type->ht_type.tp_as_buffer = &heap_type->as_buffer;
            heap_type->as_buffer.bf_getbuffer = matrix_getbuffer;
            heap_type->as_buffer.bf_releasebuffer = matrix_releasebuffer;
        }),
        "A 2-D float32 matrix in host memory, exported through the "
        "extended buffer protocol (C++, pybind11).");
    // Right after the type is created: the request flags it honours, every
    // legacy one and PyBUF_DEVICE, and the typed entry that serves them.
    if (BufferExt_SetExtendedGetBuffer(
            reinterpret_cast<PyTypeObject *>(cls.ptr()),
            BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE, matrix_getbuffer_ex) < 0) {
        throw py::error_already_set();
    }
    // [type end]
    cls.def(py::init<Py_ssize_t, Py_ssize_t>(), py::arg("rows") = 2,
            py::arg("cols") = 3,
            "rows x cols, item (i, j) = i * cols + j; ValueError unless "
            "both are positive.")
        .def_property_readonly("shape", [](const HostMatrix &self) {
            return py::make_tuple(self.rows(), self.cols());
        })
        .def_property_readonly("exports", &HostMatrix::exports,
                               "Buffers exported and not yet released.");
}
