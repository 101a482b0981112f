"""Shared helpers of the Python test suite (no fixtures with side effects).

* ``plain_get_buffer(obj, flags)``: a plain ``PyObject_GetBuffer`` made
  through ``ctypes.pythonapi`` with a ctypes ``Py_buffer``, so the tests
  can compare ``bufferext.get_buffer`` with what CPython itself does.
* ctypes mirrors of the DLPack 1.x structs, to read capsules.
* ``run_installed(*argv, **env)``: ``python *argv`` in a fresh interpreter
  outside the source tree, so it imports the installed package.
* ``mpiexec()``: the mpiexec next to the interpreter, else on PATH (skips
  the test when there is none).
* ``editable_source()``: the source folder of an editable install
  (``pip install -e``) of bufferext, else None.
* ``run_child(code)``: ``code`` in a child interpreter that can import
  tests/_hooks.py; its stdout, or an AssertionError with all it printed
  (for cases that crashed the interpreter before their fix).
* ``PARSES_PYTHON``: the mark of a test that calls ``ast.parse``.
* ``COLLECTING_EXAMPLES``: how many times a test that calls ``gc.collect``
  per example runs its example.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import itertools
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from typing import Any, Dict, List, Optional, Tuple

import pytest

import bufferext

F = bufferext.BufferFlags

#: A test that calls ast.parse runs in one thread under pytest-run-parallel:
#: two threads parsing at once raised "SystemError: AST constructor recursion
#: depth mismatch" on CPython 3.11.7, whose AST builder counts its recursion
#: in the interpreter's state, not the thread's (Python/Python-ast.c,
#: PyAST_mod2obj; gh-106905 is its neighbour).  Re-check when 3.11 goes.
PARSES_PYTHON = pytest.mark.thread_unsafe(
    reason="ast.parse from two threads at once fails on CPython 3.11")

#: Examples of a test that calls gc.collect(1) per example: a fifth on a
#: free-threaded build, which has no generations, so that each call walks
#: the whole heap (300 of them took 25 s per test under pytest-run-parallel);
#: its CI job is about threads, and every other interpreter runs them all.
COLLECTING_EXAMPLES = 60 if sysconfig.get_config_var("Py_GIL_DISABLED") else 300

# ---- which implementation of the draft runs ------------------------------------

def _native_interpreter() -> bool:
    import inspect
    flags = getattr(inspect, "BufferFlags", None)
    return flags is not None and "DEVICE" in flags.__members__


#: The interpreter implements the draft itself (the patched CPython of
#: cpython/): the slots bf_supported_flags and bf_getbuffer_ex,
#: PyObject_GetBufferEx, PyObject_GetBuffer's gate, and the doors where a
#: flags int chosen in Python meets a bare Py_buffer refusing extended
#: requests (inspect.BufferFlags.DEVICE is the sign).
NATIVE_INTERPRETER = _native_interpreter()
#: bufferext's own module was built in native mode (header deferring to it).
MODULE_NATIVE = bool(bufferext._bufferext.NATIVE)
#: The extensions the tests build (tests/capi, tests/cython) are in native
#: mode: the interpreter implements the draft, and CFLAGS do not force the
#: backport.
HEADER_NATIVE = NATIVE_INTERPRETER and "-DBUFFEREXT_FORCE_BACKPORT" not in \
    os.environ.get("CFLAGS", "")
#: The type attribute ``__buffer_supported_flags__`` declares: in backport
#: mode, where it is the header's spelling of a declaration.  In native mode
#: the declaration is the interpreter's slot, which no Python code writes
#: (the draft specifies no Python-level declaration), and the attribute is
#: an ordinary one.
ATTRIBUTE_DECLARES = not (MODULE_NATIVE or HEADER_NATIVE)
#: The reason of the tests that need it.
NEEDS_ATTRIBUTE = "native mode: a class declares through the interpreter's " \
    "slot, not the type attribute"
#: How CPython itself refuses an extended request at a door (obj.__buffer__,
#: memoryview._from_flags, PickleBuffer.__buffer__) where it implements the
#: draft; elsewhere the header's guard and mark answer.
NATIVE_DOOR_REFUSAL = "a memoryview cannot be made for a request with extended flags"


def build_native(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the test's own C builds be native: the suite may run with
    ``CFLAGS=-DBUFFEREXT_FORCE_BACKPORT`` (the backport forced on an
    interpreter that implements the draft), which would force them too."""
    monkeypatch.setenv("CFLAGS", os.environ.get("CFLAGS", "").replace(
        "-DBUFFEREXT_FORCE_BACKPORT", ""))


# ---- how the package is installed ---------------------------------------------

def editable_source() -> Optional[str]:
    """The folder an editable install (PEP 660, ``pip install -e``) of
    bufferext points at, from its ``direct_url.json`` (PEP 610); None for a
    normal install."""
    try:
        text = importlib.metadata.distribution("bufferext").read_text(
            "direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    info = json.loads(text) if text else {}
    url = info.get("url", "")
    if not info.get("dir_info", {}).get("editable") or not url.startswith("file://"):
        return None
    return os.path.realpath(url[len("file://"):])


# ---- a fresh interpreter on the installed package ---------------------------

_ABOVE_SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def run_installed(*argv: str,
                  **env_overrides: str) -> subprocess.CompletedProcess:
    """``python *argv`` run from the folder above the source tree, without
    PYTHONPATH and with ``env_overrides`` set; output captured as text."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.update(env_overrides)
    return subprocess.run([sys.executable, *argv], env=env,
                          cwd=_ABOVE_SOURCE_ROOT,
                          capture_output=True, text=True, timeout=120)


def run_child(code: str, env: Optional[Dict[str, str]] = None,
              timeout: float = 300) -> str:
    """Run ``code`` (dedented) in a child interpreter with tests/ on its
    path, for at most ``timeout`` seconds; its stdout, or an AssertionError
    with everything it printed if it did not exit 0."""
    import textwrap
    child_env = dict(os.environ, **(env or {}))
    here = os.path.dirname(os.path.abspath(__file__))
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (here, child_env.get("PYTHONPATH")) if p)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=child_env,
        capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"child rc={result.returncode}\n{result.stdout}"
                             f"\n{result.stderr}")
    return result.stdout


def cuda_status() -> Dict[str, Any]:
    """bufferext.devices()'s CUDA entry, read in a child interpreter: the
    first look loads the driver (or fails to) for the whole process, and a
    test collected later may point BUFFEREXT_CUDA_DRIVER at a stand-in
    before its first look."""
    out = run_child("""
        import json, bufferext
        print(json.dumps(next(d for d in bufferext.devices()
                              if d["device"] == "bufferext.cuda"),
                         default=str))
        """)
    status: Dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return status


def mpiexec() -> str:
    """The mpiexec next to ``sys.executable`` (a venv's mpich), else the one
    on PATH; the calling test is skipped when there is none."""
    exe = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or \
        shutil.which("mpiexec")
    if exe is None:
        pytest.skip("mpiexec not found")
    return exe


# ---- Py_buffer through ctypes ---------------------------------------------

_ssize_p = ctypes.POINTER(ctypes.c_ssize_t)


class Py_buffer(ctypes.Structure):
    """CPython's ``Py_buffer`` (frozen in the stable ABI)."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),      # borrowed view of the PyObject *
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", _ssize_p),
        ("strides", _ssize_p),
        ("suboffsets", _ssize_p),
        ("internal", ctypes.c_void_p),
    ]


class Py_buffer_extended(ctypes.Structure):
    """``Py_buffer_extended``: what a request with PyBUF_DEVICE must point
    at (where CPython implements the draft, PyObject_GetBuffer zeroes the
    extension of such a request)."""

    _fields_ = [
        ("view", Py_buffer),
        ("flags", ctypes.c_int),
        ("ext_flags", ctypes.c_int),
        ("device", ctypes.c_char_p),
        ("device_info", ctypes.c_void_p),
    ]


_GetBuffer = ctypes.pythonapi.PyObject_GetBuffer
_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(Py_buffer),
                       ctypes.c_int]
_GetBuffer.restype = ctypes.c_int
_Release = ctypes.pythonapi.PyBuffer_Release
_Release.argtypes = [ctypes.POINTER(Py_buffer)]
_Release.restype = None


def _array(ptr: Any, n: int) -> Optional[Tuple[int, ...]]:
    if not ptr:
        return None
    return tuple(ptr[i] for i in range(n))


def plain_get_buffer(obj: Any, flags: int) -> Dict[str, Any]:
    """The raw fields of ``PyObject_GetBuffer(obj, flags)``, released again.

    Raises whatever the exporter raised (ctypes.pythonapi re-raises the
    Python exception when the call fails).
    """
    ext = Py_buffer_extended()      # room for the extension, whatever flags
    view = ext.view
    rc = _GetBuffer(obj, ctypes.byref(view), int(flags))
    assert rc == 0
    try:
        # a NULL shape means one dimension of len bytes (PEP 3118)
        n = view.ndim if view.shape else 0
        return {
            "buf": view.buf or 0,
            "obj_is": view.obj == id(obj),
            "len": view.len,
            "itemsize": view.itemsize,
            "readonly": bool(view.readonly),
            "ndim": view.ndim,
            "format": None if view.format is None
            else view.format.decode("ascii"),
            "shape": _array(view.shape, n),
            "strides": _array(view.strides, n),
            "suboffsets": _array(view.suboffsets, n),
        }
    finally:
        _Release(ctypes.byref(view))


# ---- request flags ---------------------------------------------------------

LEGACY_NAMES = ("WRITABLE", "FORMAT", "ND", "STRIDES", "C_CONTIGUOUS",
                "F_CONTIGUOUS", "ANY_CONTIGUOUS", "INDIRECT")


def legacy_requests() -> List[int]:
    """Every distinct request value built from the PEP 3118 request flags.

    Each subset of {WRITABLE, FORMAT, ND, STRIDES, C/F/ANY_CONTIGUOUS,
    INDIRECT} OR-ed together (the compound flags include ND/STRIDES, as
    CPython defines them); the empty subset is PyBUF_SIMPLE.
    """
    values = set()
    members = [int(F[name]) for name in LEGACY_NAMES]
    for r in range(len(members) + 1):
        for combo in itertools.combinations(members, r):
            value = 0
            for m in combo:
                value |= m
            values.add(value)
    return sorted(values)


def flag_name(flags: int) -> str:
    """A readable test id for a request value."""
    if flags == 0:
        return "SIMPLE"
    names = []
    rest = flags
    for name in ("DEVICE", "INDIRECT", "C_CONTIGUOUS", "F_CONTIGUOUS",
                 "ANY_CONTIGUOUS", "STRIDES", "ND", "FORMAT", "WRITABLE"):
        value = int(F[name])
        if rest & value == value:
            names.append(name)
            rest &= ~value
    if rest:
        names.append(hex(rest))
    return "|".join(names)


# ---- DLPack through ctypes -------------------------------------------------

from _dlpack_ctypes import (DLManagedTensor,  # noqa: E402 (one reading)
                            DLManagedTensorVersioned)

DLPACK_FLAG_READ_ONLY = 1 << 0
DLPACK_FLAG_IS_COPIED = 1 << 1
kDLCPU = 1
kDLInt, kDLUInt, kDLFloat, kDLComplex, kDLBool = 0, 1, 2, 5, 6

_IsValid = ctypes.pythonapi.PyCapsule_IsValid
_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_IsValid.restype = ctypes.c_int
_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_GetPointer.restype = ctypes.c_void_p
_GetName = ctypes.pythonapi.PyCapsule_GetName
_GetName.argtypes = [ctypes.py_object]
_GetName.restype = ctypes.c_char_p


def capsule_name(capsule: Any) -> Optional[str]:
    """The current name of a capsule (consumers rename it on consume)."""
    name = _GetName(capsule)
    return None if name is None else name.decode("ascii")


def read_capsule(capsule: Any) -> Dict[str, Any]:
    """The fields of an unconsumed DLPack capsule, read through ctypes.

    Works for ``dltensor_versioned`` and ``dltensor`` capsules; versioned
    ones add ``version`` and ``flags``.
    """
    name = capsule_name(capsule)
    assert name in ("dltensor", "dltensor_versioned"), name
    assert _IsValid(capsule, name.encode()) == 1
    address = _GetPointer(capsule, name.encode())
    result: Dict[str, Any] = {"name": name}
    if name == "dltensor_versioned":
        managed = DLManagedTensorVersioned.from_address(address)
        result["version"] = (managed.version.major, managed.version.minor)
        result["flags"] = managed.flags
    else:
        managed = DLManagedTensor.from_address(address)  # type: ignore
    t = managed.dl_tensor
    result.update(
        data=t.data or 0,
        device=(t.device.device_type, t.device.device_id),
        ndim=t.ndim,
        dtype=(t.dtype.code, t.dtype.bits, t.dtype.lanes),
        shape=tuple(t.shape[i] for i in range(t.ndim)),
        strides=None if not t.strides
        else tuple(t.strides[i] for i in range(t.ndim)),
        byte_offset=t.byte_offset,
        deleter=managed.deleter,
    )
    return result


class DLPackOnly:
    """No buffer exporter: speaks only DLPack, over a numpy array."""

    def __init__(self) -> None:
        import numpy as np
        self.array = np.arange(4.0)

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self.array.__dlpack_device__()


class ArrayInterfaceOnly:
    """No buffer exporter: speaks only the NumPy array interface."""

    def __init__(self) -> None:
        import numpy as np
        self.array = np.arange(4.0)

    @property
    def __array_interface__(self) -> Any:
        return self.array.__array_interface__


class ArrowOnly:
    """No buffer exporter: speaks only the Arrow C Data interface (through
    a bufferext adapter's export, so no pyarrow is needed)."""

    def __init__(self) -> None:
        import numpy as np
        import bufferext
        self.array = np.arange(4.0)
        self._adapter = bufferext.as_buffer(self.array, readonly=True)

    def __arrow_c_array__(self, requested_schema: Any = None) -> Any:
        return self._adapter.__arrow_c_array__(requested_schema)


#: the three above, with how as_buffer's hints name what they speak
BRIDGED_ONLY = [(DLPackOnly, "DLPack (__dlpack__)"),
                (ArrayInterfaceOnly,
                 "the NumPy array interface (__array_interface__)"),
                (ArrowOnly, "the Arrow C Data interface (__arrow_c_array__)")]



def device_local(d: Any) -> Any:
    """A device DistArray's local section, copied to the host, in its shape."""
    import numpy as np
    return np.asarray(d.buffer.to_host()).reshape(d.local_shape)


def check_staged_operations(g: Any, device: str, comm: Any,
                            block_size: int) -> None:
    """Scatter ``g`` (2-D) over ``comm`` on ``device`` with one-wide halos,
    and check gather, redistribute (to device and to host memory) and the
    halo exchange against the same operations on CPU memory.  Every
    operation takes the staged path (device -> host, MPI, host -> device)."""
    import numpy as np
    from bufferext.distarray import DistArray, cuda_aware
    assert not cuda_aware()
    rank, size = comm.Get_rank(), comm.Get_size()
    pads = [[(1, 1)] * size, None]
    d = DistArray.scatter(g if rank == 0 else None, dist="bn", device=device,
                          comm=comm, padding=pads)
    ref = DistArray.from_global(g, dist="bn", comm=comm, padding=pads)
    assert d.device == device and np.array_equal(device_local(d), ref.local)
    out = d.gather(0)
    assert (out is None) if rank else np.array_equal(out, g)
    e = d.redistribute(dist="cb", block_size=block_size)
    assert e.device == device and np.array_equal(e.allgather(), g)
    # halos: spoil the padding on the device, exchange, compare
    spoiled = device_local(d).copy()
    m = d.maps[0]
    spoiled[:m.owned_slice.start] = -1
    spoiled[m.owned_slice.stop:] = -1
    d.buffer.copy_from_host(spoiled)
    d.update_halos()
    assert np.array_equal(device_local(d), ref.local)
    f = e.redistribute(dist="bn", device="cpu")       # device -> host distribution
    assert f.device == "cpu" and np.array_equal(
        f.local, DistArray.from_global(g, dist="bn", comm=comm).local)


def halos_after_fill(d: Any, rank: int, size: int) -> Any:
    """What a DistArray distributed over its first dimension with one-wide
    halos holds after each rank filled its whole local section with
    ``rank + 1`` and ``update_halos()`` ran: its own value where it owns,
    its neighbours' in the halos."""
    import numpy as np
    m = d.maps[0]
    want = np.full(d.local_shape, rank + 1, dtype=d.dtype)
    if rank > 0:
        want[:m.owned_slice.start] = rank
    if rank < size - 1:
        want[m.owned_slice.stop:] = rank + 2
    return want
