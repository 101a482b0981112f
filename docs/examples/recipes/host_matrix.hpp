// host_matrix.hpp -- the C++ object behind the producer recipes in
// pybind11/matrix.cpp and nanobind/matrix.cpp: a 2-D float32 matrix in
// host memory, C order, writable, exported through the buffer protocol.
//
// HostMatrix::fill serves one request, in the shape of CPython's own
// getbuffer (memoryview's): refuse what the layout cannot meet with
// BufferError "Type: reason", fill the fields the flags asked for, count
// the export, take the reference last.  It allocates nothing (shape and
// strides point into the object) and never throws.  What each binding adds
// is the glue: find the HostMatrix of a Python object, and install the two
// slot functions on its type.  Use it with the GIL held, like any Py_buffer.
#ifndef BUFFEREXT_RECIPES_HOST_MATRIX_HPP
#define BUFFEREXT_RECIPES_HOST_MATRIX_HPP

#include <Python.h>

#include <atomic>
#include <cstddef>
#include <stdexcept>
#include <vector>

class HostMatrix {
public:
    // rows x cols, item (i, j) = i * cols + j: a pattern a test can check.
    // std::invalid_argument (ValueError in both bindings) for a size that
    // is not positive or whose byte count does not fit a Py_ssize_t.
    HostMatrix(Py_ssize_t rows = 2, Py_ssize_t cols = 3)
        : data_(checked_items(rows, cols)), exports_(0) {
        shape_[0] = rows;
        shape_[1] = cols;
        strides_[0] = cols * static_cast<Py_ssize_t>(sizeof(float));
        strides_[1] = static_cast<Py_ssize_t>(sizeof(float));
        for (std::size_t k = 0; k < data_.size(); k++) {
            data_[k] = static_cast<float>(k);
        }
    }
    // Exported memory must outlive every export: a Python object holding a
    // HostMatrix is kept alive by view->obj, and nothing here resizes.
    HostMatrix(const HostMatrix &) = delete;
    HostMatrix &operator=(const HostMatrix &) = delete;

    Py_ssize_t rows() const noexcept { return shape_[0]; }
    Py_ssize_t cols() const noexcept { return shape_[1]; }
    // Buffers exported and not yet released.
    Py_ssize_t exports() const noexcept { return exports_.load(); }

    // [fill]
    // The body of the binding's export function once it found this object
    // behind `self`; the binding has called BufferExt_SetDevice already.
    // 0, or -1 with BufferError.
    int fill(PyObject *self, Py_buffer *view, int flags) noexcept {
        // C order: Fortran order too only when one dimension is 1 (or 0).
        const bool fortran = shape_[0] <= 1 || shape_[1] <= 1;
        if (has(flags, PyBUF_F_CONTIGUOUS) && !fortran) {
            return refuse(self, "matrix is not Fortran contiguous");
        }
        // WRITABLE, C_CONTIGUOUS, ANY_CONTIGUOUS and INDIRECT are met as
        // they are: writable memory, C order, no suboffsets.
        view->buf = data_.data();
        view->len = static_cast<Py_ssize_t>(data_.size() * sizeof(float));
        view->readonly = 0;
        view->itemsize = static_cast<Py_ssize_t>(sizeof(float));
        // NULL means unsigned bytes; itemsize stays the item's (CPython's
        // convention for a request without PyBUF_FORMAT)
        view->format = has(flags, PyBUF_FORMAT) ? const_cast<char *>("f")
                                                : nullptr;
        view->ndim = 2;
        view->shape = shape_;
        // NULL strides mean C order, which this is
        view->strides = has(flags, PyBUF_STRIDES) ? strides_ : nullptr;
        view->suboffsets = nullptr;
        view->internal = this;  // for release(): the binding's glue
        if (!has(flags, PyBUF_ND)) {
            // PyBUF_SIMPLE: the bytes as one dimension, no shape
            view->ndim = 1;
            view->shape = nullptr;
        }
        exports_++;
        Py_INCREF(self);
        view->obj = self;       // last: nothing to undo after a refusal
        return 0;
    }

    // The bf_releasebuffer body, for the HostMatrix in view->internal.
    void release() noexcept { exports_--; }
    // [fill end]

private:
    static bool has(int flags, int request) noexcept {
        return (flags & request) == request;    // compound flags: every bit
    }
    static int refuse(PyObject *self, const char *reason) noexcept {
        PyErr_Format(PyExc_BufferError, "%.200s: %s", Py_TYPE(self)->tp_name,
                     reason);
        return -1;
    }
    static std::size_t checked_items(Py_ssize_t rows, Py_ssize_t cols) {
        if (rows <= 0 || cols <= 0) {
            throw std::invalid_argument("Matrix: rows and cols must be "
                                        "positive");
        }
        // len and strides are Py_ssize_t byte counts: they must not wrap
        if (cols > PY_SSIZE_T_MAX / static_cast<Py_ssize_t>(sizeof(float)) /
                       rows) {
            throw std::invalid_argument("Matrix: too large");
        }
        return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
    }

    std::vector<float> data_;
    Py_ssize_t shape_[2];
    Py_ssize_t strides_[2];
    // atomic: the pybind11 module declares itself safe without the GIL
    std::atomic<Py_ssize_t> exports_;
};

#endif
