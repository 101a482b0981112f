// extended_buffer.hpp -- an extended buffer held for one C++ scope, for the
// C++ consumers in pybind11/ and nanobind/ (any binding library will do).
//
// The constructor acquires (BufferExt_GetBuffer), the destructor releases
// (BufferExt_Release): however the scope is left, a return or a C++
// exception, the exporter gets its buffer back exactly once.  On failure the
// Python error is set and the object is false; the binding turns that into
// its own exception type.  Use it with the GIL held, like any Py_buffer.
#ifndef BUFFEREXT_RECIPES_EXTENDED_BUFFER_HPP
#define BUFFEREXT_RECIPES_EXTENDED_BUFFER_HPP

#include <Python.h>
#include <bufferext.h>

class ExtendedBuffer {
public:
    ExtendedBuffer(PyObject *obj, int flags) noexcept
        : held_(BufferExt_GetBuffer(obj, &ext_, flags) == 0) {}
    ~ExtendedBuffer() {
        if (held_) {
            BufferExt_Release(&ext_);
        }
    }
    ExtendedBuffer(const ExtendedBuffer &) = delete;
    ExtendedBuffer &operator=(const ExtendedBuffer &) = delete;

    explicit operator bool() const noexcept { return held_; }
    const Py_buffer &view() const noexcept { return ext_.view; }
    // The exporter's device name ("bufferext.cuda", ...), NULL for CPU memory.
    const char *device() const noexcept {
        return BufferExt_IsDevice(&ext_) ? ext_.device : nullptr;
    }

private:
    Py_buffer_extended ext_;    // declared first: held_ is set from it
    bool held_;
};

#endif
