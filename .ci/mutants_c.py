"""Planted bugs in the C code that holds the re-entrancy rule and the owner
checks (docs/reentrancy.rst): each drops one pin, one
re-read, one owner check or one proof of the typed entry.  .ci/mutation_c.sh builds the tree
with each in turn and runs the tests that must notice; a mutant the suite
does not kill is reported as surviving.

Each entry: (name, file, old text, new text, interpreter minor, pytest
selection); the old text may be a list of (old, new) pairs instead (new is
then None), each old text occurring exactly once.  3.11 runs the garbage
collector inside an allocation (3.12+ only at the next bytecode), so the
finalizer hooks bite there; the PEP 688 doors need 3.12+.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

REENTRANCY = ["tests/test_hooks.py", "tests/test_cpubuffer.py",
              "tests/test_cpubuffer_pickle.py", "tests/test_view.py",
              "tests/test_bridges.py", "tests/test_gate.py",
              # the rest of what was tests/test_boundary_c.py
              "tests/test_dlpack_cpu.py::"
              "test_subclass_dlpack_reads_our_own_export",
              "tests/test_dlpack_exchange.py::"
              "test_exchange_api_refuses_a_foreign_object",
              "tests/test_flags.py::test_bare_read_write_values_name_themselves",
              "tests/test_cuda_standin.py::"
              "test_numpy_refuses_device_adapter_and_view",
              "tests/test_cuda_standin.py::"
              "test_copy_source_cannot_close_a_device_target"]
DEVICE = ["tests/test_cuda_standin.py", "tests/test_hooks.py"]
ENTRY = ["tests/test_typed_entry.py", "tests/test_pep688.py",
         "tests/test_capi_producer.py", "tests/test_limited_api.py",
         "tests/test_abi_mixing.py"]

Mutant = Tuple[str, str, Any, Optional[str], str, List[str]]

MUTANTS: List[Mutant] = [
    ("entry: no owner check", "Include/bufferext/internal/accel.h",
     "            !PyType_IsSubtype(type, owner) ||\n",
     "", "3.12", ENTRY),
    ("entry: not paired with the getbuffer", "Include/bufferext/internal/accel.h",
     "            BufferExtAccel_TypeSlot(type) != entry->getbuffer) {",
     "            0) {", "3.12", ENTRY),
    ("limited entry: no owner check", "Include/bufferext/internal/limited.h",
     "        !PyType_IsSubtype(type, owner) || slot != entry->getbuffer) {",
     "        slot != entry->getbuffer) {", "3.12", ENTRY),
    ("fast method: no owner check", "Modules/fastmethod.c",
     "    if (!PyObject_TypeCheck(obj, self->objclass)) {", "    if (0) {",
     "3.11", ["tests/test_view.py"]),
    ("exporter: the flag taken as proof", "Include/bufferext/core.h",
     "    if (ext != NULL && (flags & PyBUF_DEVICE)) {\n"
     "        ext->flags |= PyBUF_DEVICE;",
     "    if (ext != NULL) {\n        ext->flags |= PyBUF_DEVICE;",
     "3.12", ENTRY),
    ("producer fast path: the flag taken as proof", "Modules/producer.h",
     "        (device == NULL || (ext != NULL && (flags & PyBUF_DEVICE)))) {",
     "        (device == NULL || (flags & PyBUF_DEVICE))) {", "3.12", ENTRY),
    ("consumer: an undeclared extended flag passed on", "Include/bufferext/core.h",
     [("        flags &= ~(BUFFEREXT_EXTENDED_FLAGS & ~info.mask);\n"
       "        if (flags & BUFFEREXT_EXTENDED_FLAGS) {\n"
       "            BufferExtInternal_ClearExtension(view);",
       "        if (flags & BUFFEREXT_EXTENDED_FLAGS) {\n"
       "            BufferExtInternal_ClearExtension(view);")],
     None, "3.12", ENTRY),
    ("consumer: the type not read again after the lookup",
     "Include/bufferext/core.h",
     "        if (Py_TYPE(obj) != type) {\n"
     "            return BufferExtInternal_RaiseRetyped(obj);",
     "        if (0) {\n            return BufferExtInternal_RaiseRetyped(obj);",
     "3.12", ENTRY),
    ("consumer: a stripped PyBUF_READ taken for the caller's",
     "Include/bufferext/core.h",
     "    if (flags != asked && (flags == PyBUF_READ || flags == PyBUF_WRITE)) {",
     "    if (0) {", "3.13", ["tests/test_capi_consumer.py"]),
    ("resize: no re-check after the parse", "Modules/cpubuffer.c",
     "    rc = cpubuffer_check_resize(self);      /* what the parse may change */",
     "    rc = 0;", "3.11", REENTRANCY),
    ("copy: source not pinned", "Modules/cpubuffer.c",
     [("        bufferext_producer_pin(&self->head, \"CPUBuffer.copy\", 0) < 0) {",
       "        0) {"),
      ("    bufferext_producer_unpin(&self->head);\n"
       "    if (copy != NULL && cpubuffer_copy_state(", "    if (copy != NULL && cpubuffer_copy_state(")],
     None, "3.11", REENTRANCY),
    ("copy: the snapshot read after the allocation", "Modules/cpubuffer.c",
     "    copy = (CPUBufferObject *)cpubuffer_from_spec(Py_TYPE(op), &spec,\n"
     "                                                  readonly, 0);\n"
     "    if (copy != NULL) {",
     "    copy = (CPUBufferObject *)cpubuffer_from_spec(Py_TYPE(op), &spec,\n"
     "                                                  readonly, 0);\n"
     "    bufferext_producer_read(&self->head, &now);\n"
     "    if (copy != NULL && now.len == copy->head.layout.len) {",
     "3.11", REENTRANCY),
    ("pickle: not pinned", "Modules/cpubuffer.c",
     [("        bufferext_producer_pin(&self->head, \"CPUBuffer.__reduce_ex__\",\n"
       "                               0) < 0) {", "        0) {"),
      ("error:\n    bufferext_producer_unpin(&self->head);\n    Py_XDECREF(rebuild);",
       "error:\n    Py_XDECREF(rebuild);")],
     None, "3.11", REENTRANCY),
    ("pin: read-only written while exported", "Modules/producer.c",
     "    else if (write && p->layout.readonly && p->exports > 0) {",
     "    else if (0) {", "3.11", ["tests/test_cpubuffer.py",
                                  "tests/test_cuda_standin.py",
                                  "tests/test_ve.py"]),
    ("CUDA fill: not pinned after the value's conversion", "Modules/cudabuffer.c",
     [("    if (fill_pattern(self, value, pattern) < 0 ||\n"
       "        bufferext_producer_pin(&self->head, who, 1) < 0) {",
       "    if (fill_pattern(self, value, pattern) < 0 ||\n"
       "        bufferext_producer_check_open(&self->head) < 0) {"),
      ("                    : fill_staged(self, pattern, who);\n"
       "    bufferext_producer_unpin(&self->head);",
       "                    : fill_staged(self, pattern, who);")],
     None, "3.11", DEVICE),
    ("CUDA to_host: not pinned", "Modules/cudabuffer.c",
     [("    if (bufferext_producer_pin(&self->head, who, 0) < 0) {\n"
       "        return NULL;\n    }\n    array = bufferext_producer_host_array",
       "    array = bufferext_producer_host_array"),
      ("    if (array == NULL) {\n        bufferext_producer_unpin(&self->head);\n"
       "        return NULL;\n    }\n    if (self->head.layout.len > 0 && (rc = ctx_push",
       "    if (array == NULL) {\n        return NULL;\n    }\n"
       "    if (self->head.layout.len > 0 && (rc = ctx_push"),
      ("    PyBuffer_Release(&view);\n    bufferext_producer_unpin(&self->head);\n"
       "    if (rc < 0) {\n        Py_CLEAR(array);",
       "    PyBuffer_Release(&view);\n    if (rc < 0) {\n        Py_CLEAR(array);")],
     None, "3.11", DEVICE),
    ("view readers: not pinned", "Modules/view.c",
     "        if (view_pin(self) < 0) {                                       \\\n"
     "            return NULL;                                                \\\n"
     "        }                                                               \\\n"
     "        result = (expr);                                                \\\n"
     "        view_unpin(self);                                               \\",
     "        if (check_acquired(self) < 0) {                                 \\\n"
     "            return NULL;                                                \\\n"
     "        }                                                               \\\n"
     "        result = (expr);                                                \\",
     "3.11", REENTRANCY),
    ("view repr: not pinned", "Modules/view.c",
     [("    if (view_pin(self) < 0) {\n        PyErr_Clear();\n"
       "        return PyUnicode_FromString(\"<released BufferView>\");",
       "    if (check_acquired(self) < 0) {\n        PyErr_Clear();\n"
       "        return PyUnicode_FromString(\"<released BufferView>\");"),
      ("    view_unpin(self);\n    Py_XDECREF(shape);\n    Py_XDECREF(device);",
       "    Py_XDECREF(shape);\n    Py_XDECREF(device);")],
     None, "3.11", REENTRANCY),
    ("gate: release with the refusal pending", "Modules/gate.c",
     "    if (gate_export(exporter, ext, flags) < 0) {\n"
     "        bufferext_release_ext_raised(ext);",
     "    if (gate_export(exporter, ext, flags) < 0) {\n"
     "        BufferExt_Release(ext);", "3.11", REENTRANCY),
    ("copy source: release with the refusal pending", "Modules/producer.c",
     "    bufferext_release_raised(view);\n    bufferext_producer_unpin(p);",
     "    PyBuffer_Release(view);\n    bufferext_producer_unpin(p);",
     "3.11", REENTRANCY),
    ("tuple_from_ssize: no copy before the allocation", "Modules/export.c",
     "        PyObject *item = PyLong_FromSsize_t(copy[i]);",
     "        PyObject *item = PyLong_FromSsize_t(values[i]);",
     "3.11", REENTRANCY),
    ("producer getters: no snapshot", "Modules/producer.c",
     "PRODUCER_STATE_GETTER(shape, bufferext_tuple_from_ssize(now.ndim, now.shape))",
     "PRODUCER_GETTER(shape, bufferext_tuple_from_ssize(p->layout.ndim,\n"
     "                                                  p->layout.shape))",
     "3.11", REENTRANCY),
    ("dlpack import: Python code between checking the capsule and taking it",
     "Modules/dlpack.c",
     "    /* valid: neither call fails (the pointer is not NULL) */\n",
     "    PyGC_Collect();\n",
     "3.11", ["tests/test_bridges.py"]),
    # issue 31's planted bugs: each survived the whole suite before
    ("format reader: a byte-swapped [bfloat16] taken", "Modules/export.c",
     "    if (lowp_format(f, &code, &size)) {\n        goto sized;",
     "    if (lowp_format(f, &code, &size)) {\n        swapped = 0;\n"
     "        goto sized;", "3.11", ["tests/test_lowp.py"]),
    ("format reader: float4/float6 rounded up to a byte", "Modules/export.c",
     [("        if (lowp_floats[i].bits % 8 == 0 && f[0] == '[' &&",
       "        if (f[0] == '[' &&"),
      ("            *size = lowp_floats[i].bits / 8;",
       "            *size = (lowp_floats[i].bits + 7) / 8;")],
     None, "3.11", ["tests/test_lowp.py"]),
    ("pickle: the shape read before the protocol's __index__",
     "Modules/cpubuffer.c",
     [("    long protocol = PyLong_AsLong(protocol_arg);   /* __index__: first */\n"
       "\n    if ((protocol == -1 && PyErr_Occurred()) ||",
       "    long protocol;\n\n    bufferext_producer_read(&self->head, &now);\n"
       "    protocol = PyLong_AsLong(protocol_arg);\n"
       "    if ((protocol == -1 && PyErr_Occurred()) ||"),
      ("    bufferext_producer_read(&self->head, &now);\n"
       "    /* Both export this buffer",
       "    /* Both export this buffer")],
     None, "3.11", ["tests/test_cpubuffer_pickle.py"]),
    # issue 41 and the typed entry's round: planted in the code they changed
    ("format reader: a swapped one-byte item refused", "Modules/export.c",
     "    if (swapped && size > 1) {", "    if (swapped) {", "3.11",
     ["tests/test_lowp.py", "tests/test_dlpack_cpu.py", "tests/test_arrow.py"]),
    ("gate: every export taken for our own", "Modules/gate.c",
     "    if (!bufferext_own_export(exporter, &ext->view) &&",
     "    if (0 &&", "3.11", ["tests/test_hostile.py", "tests/test_gate.py"]),
    ("arrow import: the array copied out but its capsule's not marked moved",
     "Modules/arrow.c",
     "        a->release = NULL;                              /* moved */\n",
     "", "3.11", ["tests/test_arrow.py"]),
    ("arrow import: a refused array not given back", "Modules/arrow.c",
     "    a = capsule_struct(array);  /* alive: the caller holds it */\n"
     "    if (a != NULL) {",
     "    a = capsule_struct(array);  /* alive: the caller holds it */\n"
     "    if (0) {",
     "3.11", ["tests/test_arrow.py"]),
]
