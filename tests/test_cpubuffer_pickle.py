"""Pickling and copying CPUBuffer (protocol 5 out of band, zero-copy), and
the device producers' refusal.

The device cases run in child interpreters against the stand-in CUDA
driver and VEO library (test doubles built here): no device is needed.
"""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
import textwrap
from typing import Any, List

import numpy as np
import pytest

import bufferext
from bufferext import CPUBuffer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "cuda_standin"))
sys.path.insert(0, os.path.join(HERE, "ve_standin"))
import standin  # noqa: E402
import standin_harness  # noqa: E402

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)
DTYPES = ["f8", "f4", "i1", "u2", "i8", "?", "c16", ">f8", ">i4", "<c8",
          "e", "Zf"]
SHAPES = [(), (0,), (3, 0), (5,), (2, 3), (2, 1, 3)]


def filled(shape: Any, dtype: str, readonly: bool = False) -> CPUBuffer:
    """A buffer whose items differ, made read-only after filling if asked."""
    buf = CPUBuffer(shape, dtype)
    a = np.asarray(buf)
    a[...] = (np.arange(a.size) % 7 + 1).reshape(a.shape).astype(a.dtype)
    del a
    if not readonly:
        return buf
    ro = CPUBuffer(shape, dtype, readonly=True)
    ro.copy_from_host(buf)
    return ro


def assert_equal(a: CPUBuffer, b: CPUBuffer) -> None:
    assert type(a) is type(b)
    assert (a.shape, a.dtype, a.format, a.readonly) == \
        (b.shape, b.dtype, b.format, b.readonly)
    assert a.strides == b.strides and a.nbytes == b.nbytes
    assert a.to_host().tobytes() == b.to_host().tobytes()
    assert a.ptr != b.ptr


# ---- round trips ------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_protocol_and_dtype(protocol: int, dtype: str) -> None:
    buf = filled((2, 3), dtype)
    back = pickle.loads(pickle.dumps(buf, protocol=protocol))
    assert_equal(back, buf)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(buf))
    assert buf.exports == 0 and back.exports == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip_every_shape(protocol: int, shape: Any) -> None:
    buf = filled(shape, "i2")
    back = pickle.loads(pickle.dumps(buf, protocol=protocol))
    assert_equal(back, buf)


def test_zero_dimensional_keeps_its_value() -> None:
    buf = filled((), ">f8")
    np.asarray(buf)[()] = 2.5
    back = pickle.loads(pickle.dumps(buf, protocol=5))
    assert back.shape == () and back.format == ">d"
    assert np.asarray(back)[()] == 2.5
    assert np.asarray(back).dtype.byteorder == ">"


def test_non_native_byte_order_keeps_values_and_bytes() -> None:
    buf = filled(4, ">i4")
    for protocol in (2, 5):
        back = pickle.loads(pickle.dumps(buf, protocol=protocol))
        assert back.dtype == np.dtype(">i4")
        assert np.asarray(back).tolist() == [1, 2, 3, 4]
        assert back.to_host().tobytes() == \
            np.array([1, 2, 3, 4], ">i4").tobytes()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_read_only_stays_read_only(protocol: int) -> None:
    buf = filled(4, "f4", readonly=True)
    back = pickle.loads(pickle.dumps(buf, protocol=protocol))
    assert_equal(back, buf)
    assert back.readonly and not np.asarray(back).flags.writeable
    with pytest.raises(BufferError):
        bufferext.get_buffer(back, bufferext.BufferFlags.WRITABLE)


@pytest.mark.thread_unsafe(reason="it binds a class to a module global for pickle to find")
def test_subclass_round_trips_as_itself() -> None:
    class Sub(CPUBuffer):
        pass
    globals()["Sub"] = Sub          # pickle finds classes by name
    Sub.__qualname__ = "Sub"
    try:
        buf = Sub(3, "i4")
        np.asarray(buf)[:] = [7, 8, 9]
        for protocol in PROTOCOLS:
            back = pickle.loads(pickle.dumps(buf, protocol=protocol))
            assert type(back) is Sub and np.asarray(back).tolist() == [7, 8, 9]
        # out of band: on 3.12+ a Python subclass exports through
        # __buffer__ (CPython's _buffer_wrapper), which PickleBuffer.raw()
        # cannot export again; the memory must still travel zero-copy
        buffers: List[pickle.PickleBuffer] = []
        data = pickle.dumps(buf, protocol=5, buffer_callback=buffers.append)
        raw = buffers[0].raw()
        assert address_of(raw) == buf.ptr and raw.nbytes == buf.nbytes
        back = pickle.loads(data, buffers=buffers)
        assert type(back) is Sub and np.asarray(back).tolist() == [7, 8, 9]
        raw.release()
        del buffers
        assert buf.exports == 0
        assert type(copy.copy(buf)) is Sub
    finally:
        del globals()["Sub"]


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ is 3.12's")
@pytest.mark.thread_unsafe(reason="it binds a class to a module global for pickle to find")
def test_subclass_exporting_other_bytes_pickles_its_own() -> None:
    # the pickle read the data through the subclass's __buffer__ and the
    # shape from the buffer: half the bytes (refused at load), or other
    # bytes of the same size (loaded, wrong)
    class Half(CPUBuffer):
        def __buffer__(self, flags: int) -> memoryview:
            return memoryview(super().__buffer__(flags)).cast("B")[:8]

    class Other(CPUBuffer):
        def __buffer__(self, flags: int) -> memoryview:
            return memoryview(bytearray(b"x" * self.nbytes))

    def own(buf: CPUBuffer, flags: int = 0x11c) -> memoryview:
        return CPUBuffer.__buffer__(buf, flags).cast("B")

    for cls in (Half, Other):
        globals()[cls.__name__] = cls
        cls.__qualname__ = cls.__name__
        try:
            buf = cls(2, "f8")
            own(buf, 0x11d)[:] = b"\x01" * 16
            for protocol in PROTOCOLS:
                back = pickle.loads(pickle.dumps(buf, protocol=protocol))
                assert type(back) is cls and own(back) == b"\x01" * 16
            buffers: List[pickle.PickleBuffer] = []
            data = pickle.dumps(buf, protocol=5, buffer_callback=buffers.append)
            back = pickle.loads(data, buffers=buffers)
            assert own(back) == b"\x01" * 16
            assert buf.exports == 0
        finally:
            del globals()[cls.__name__]


# ---- protocol 5: out of band, zero-copy -------------------------------------

def address_of(view: memoryview) -> int:
    """The address of a memoryview's first byte (writable or not)."""
    with bufferext.get_buffer(view, bufferext.BufferFlags.SIMPLE) as v:
        return v.ptr


def test_out_of_band_is_zero_copy() -> None:
    buf = filled((64, 64), "f8")
    buffers: List[pickle.PickleBuffer] = []
    data = pickle.dumps(buf, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1 and isinstance(buffers[0], pickle.PickleBuffer)
    raw = buffers[0].raw()
    # the PickleBuffer holds an export of the buffer's own memory
    assert address_of(raw) == buf.ptr and raw.nbytes == buf.nbytes
    assert buf.exports >= 1
    assert len(data) < buf.nbytes   # the contents are not in the stream
    back = pickle.loads(data, buffers=buffers)
    assert_equal(back, buf)
    raw.release()
    del buffers
    assert buf.exports == 0
    buf.close()                     # no export left behind


def test_out_of_band_read_only_gives_a_read_only_pickle_buffer() -> None:
    buf = filled(8, "u1", readonly=True)
    buffers: List[pickle.PickleBuffer] = []
    data = pickle.dumps(buf, protocol=5, buffer_callback=buffers.append)
    with buffers[0].raw() as raw:
        assert raw.readonly and address_of(raw) == buf.ptr
    back = pickle.loads(data, buffers=buffers)
    assert back.readonly and back.to_host().tolist() == list(range(1, 8)) + [1]


def test_out_of_band_data_may_come_back_as_bytes() -> None:
    buf = filled(3, "<f8")
    buffers: List[pickle.PickleBuffer] = []
    data = pickle.dumps(buf, protocol=5, buffer_callback=buffers.append)
    wire = [bytes(b.raw()) for b in buffers]     # as after a transfer
    back = pickle.loads(data, buffers=wire)
    assert_equal(back, buf)


def test_in_band_protocol_5_without_callback() -> None:
    buf = filled(16, "i8")
    data = pickle.dumps(buf, protocol=5)
    assert len(data) > buf.nbytes
    assert_equal(pickle.loads(data), buf)
    assert buf.exports == 0


def test_out_of_band_buffer_of_the_wrong_size_is_refused() -> None:
    buf = filled(4, "f8")
    data = pickle.dumps(buf, protocol=5, buffer_callback=lambda b: False)
    with pytest.raises(ValueError, match="source has 8 bytes, the buffer 32"):
        pickle.loads(data, buffers=[b"12345678"])


def test_reduce_ex_shape() -> None:
    buf = filled((2, 2), ">i2", readonly=True)
    rebuild, args = buf.__reduce_ex__(5)
    assert rebuild == CPUBuffer._from_pickle
    assert isinstance(args[0], pickle.PickleBuffer)
    assert args[1:] == ((2, 2), ">i2", True)
    rebuild, args = buf.__reduce_ex__(4)
    assert isinstance(args[0], bytes) and len(args[0]) == 8
    assert_equal(rebuild(*args), buf)


# ---- copies -----------------------------------------------------------------

@pytest.mark.parametrize("how", ["copy", "copy.copy", "copy.deepcopy"])
@pytest.mark.parametrize("readonly", [False, True])
def test_copies_are_independent(how: str, readonly: bool) -> None:
    buf = filled((3, 2), "c8", readonly=readonly)
    dup = {"copy": lambda b: b.copy(), "copy.copy": copy.copy,
           "copy.deepcopy": copy.deepcopy}[how](buf)
    assert_equal(dup, buf)
    assert dup.exports == 0 and buf.exports == 0
    if not readonly:
        np.asarray(dup)[0, 0] = 99
        assert np.asarray(buf)[0, 0] == 1
        np.asarray(buf)[1, 1] = 42
        assert np.asarray(dup)[1, 1] != 42
    dup.close()
    assert not buf.closed and buf.to_host().size == 6


def test_copy_readonly_keyword() -> None:
    ro = filled(3, "f8", readonly=True)
    rw = ro.copy(readonly=False)
    assert not rw.readonly and rw.to_host().tolist() == [1.0, 2.0, 3.0]
    np.asarray(rw)[0] = 5
    assert ro.copy().readonly and rw.copy(readonly=True).readonly
    with pytest.raises(TypeError):
        ro.copy(True)               # keyword-only


def test_deepcopy_in_a_container_shares_through_the_memo() -> None:
    buf = filled(2, "i4")
    pair = copy.deepcopy([buf, buf])
    assert pair[0] is pair[1] and pair[0] is not buf
    assert_equal(pair[0], buf)


def test_copy_of_empty_and_zero_dimensional() -> None:
    for shape in [(), (0,), (2, 0)]:
        buf = filled(shape, ">f4")
        assert_equal(buf.copy(), buf)


def test_copy_while_exported() -> None:
    buf = filled(4, "f8")
    view = memoryview(buf)
    assert_equal(copy.copy(buf), buf)
    assert buf.exports == 1
    view.release()


# ---- refusals ---------------------------------------------------------------

@pytest.mark.parametrize("action", [
    lambda b: pickle.dumps(b, protocol=5), lambda b: pickle.dumps(b, 0),
    lambda b: b.__reduce_ex__(5)])
def test_closed_buffer_refuses_to_pickle(action: Any) -> None:
    buf = filled(3, "f8")
    buf.close()
    with pytest.raises(ValueError, match=r"^CPUBuffer: cannot pickle a "
                       r"closed buffer \(close\(\) freed its memory\)$"):
        action(buf)


@pytest.mark.parametrize("action", [copy.copy, copy.deepcopy,
                                    lambda b: b.copy()])
def test_closed_buffer_refuses_to_copy(action: Any) -> None:
    buf = filled(3, "f8")
    buf.close()
    with pytest.raises(ValueError, match=r"^CPUBuffer: cannot copy a closed "
                       r"buffer \(close\(\) freed its memory\)$"):
        action(buf)


def test_the_protocol_argument_runs_before_the_shape_is_read() -> None:
    """The protocol's __index__ is Python code: it may resize the buffer.
    It runs first, so the shape travels with the data it describes."""
    buf = filled(4, "f8")

    class Protocol:
        def __index__(self) -> int:
            buf.resize(6)
            np.asarray(buf)[4:] = (40.0, 50.0)
            return 5

    rebuild, args = buf.__reduce_ex__(Protocol())
    data, shape = args[0], args[1]
    assert shape == (6,) and memoryview(data).nbytes == 6 * 8
    again = rebuild(*args)
    assert again.shape == (6,) and np.asarray(again).tolist() == \
        np.asarray(buf).tolist()
    del data, args
    buf.close()


def test_bad_protocol_argument() -> None:
    with pytest.raises(TypeError):
        CPUBuffer(1).__reduce_ex__("5")


DEVICE_REFUSAL = r"""
import copy, pickle
def expect(action, what):
    try:
        action()
    except TypeError as e:
        msg = str(e)
        assert msg == ("cannot pickle or copy a {name}: its memory is on a "
                       "device, which pickle and copy cannot carry; use "
                       "to_host() for a numpy copy on the host"), msg
    else:
        raise AssertionError(what + " did not raise")
buf = make()
for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
    expect(lambda: pickle.dumps(buf, protocol=protocol), f"pickle {{protocol}}")
expect(lambda: pickle.dumps(buf, 5, buffer_callback=lambda b: None), "oob")
expect(lambda: copy.copy(buf), "copy.copy")
expect(lambda: copy.deepcopy(buf), "copy.deepcopy")
expect(lambda: buf.__reduce_ex__(5), "__reduce_ex__")
assert hasattr(buf, "__reduce_ex__") and not hasattr(buf, "copy")
assert buf.exports == 0
buf.close()
print("REFUSED-OK")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="the stand-ins are built for Linux")
def test_cudabuffer_refuses_pickling_and_copying(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    driver = standin_harness.build(str(tmp_path_factory.mktemp("cuda")))
    out = standin_harness.check(driver, "import bufferext\n"
                                "make = lambda: bufferext.CUDABuffer((2, 2))\n"
                                + DEVICE_REFUSAL.format(name="CUDABuffer"))
    assert "REFUSED-OK" in out


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="the stand-ins are built for Linux")
def test_vebuffer_refuses_pickling_and_copying(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    library = standin.build(str(tmp_path_factory.mktemp("veo")))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("STANDIN_VEO_", "BUFFEREXT_VEO_"))}
    env["BUFFEREXT_VEO_LIBRARY"] = library
    code = ("import bufferext\n"
            "make = lambda: bufferext.VEBuffer((2, 2))\n" +
            DEVICE_REFUSAL.format(name="VEBuffer"))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "REFUSED-OK" in proc.stdout


def test_device_types_carry_the_refusal() -> None:
    # no driver needed to see it on the types; CPUBuffer has real methods
    for cls in (bufferext.CUDABuffer, bufferext.VEBuffer):
        descr = cls.__dict__["__reduce_ex__"]
        assert "cannot be pickled or copied" in descr.__doc__
        assert "copy" not in cls.__dict__
    assert callable(CPUBuffer.__dict__["__reduce_ex__"])
    assert "copy" in CPUBuffer.__dict__


# ---- subclass state (issue 21, item 5) --------------------------------------
# Before: pickling or copying a CPUBuffer subclass lost the instance's
# __dict__ (every protocol, copy.copy, copy.deepcopy).  The reduce tuple
# now carries the state pickle's BUILD step restores, and copies get it
# (shallow for copy/copy.copy, deep for copy.deepcopy).

class Tagged(CPUBuffer):
    pass


class Slotted(CPUBuffer):
    __slots__ = ("unit", "scale")


class Custom(CPUBuffer):
    def __getstate__(self) -> Any:
        return {"as_saved": self.tag * 2}

    def __setstate__(self, state: Any) -> None:
        self.restored = state


def test_subclass_dict_survives_pickle_and_copy() -> None:
    buf = Tagged(3, "i4")
    np.asarray(buf)[:] = [1, 2, 3]
    buf.tag, buf.meta = "t", {"k": [1]}
    for protocol in PROTOCOLS:
        back = pickle.loads(pickle.dumps(buf, protocol=protocol))
        assert type(back) is Tagged and (back.tag, back.meta) == ("t", {"k": [1]})
        assert np.asarray(back).tolist() == [1, 2, 3]
    for how in (copy.copy, CPUBuffer.copy):
        c = how(buf)
        assert c.tag == "t" and c.meta is buf.meta      # shallow
    d = copy.deepcopy(buf)
    assert d.meta == buf.meta and d.meta is not buf.meta
    assert buf.exports == 0


def test_subclass_slots_survive_pickle_and_copy() -> None:
    buf = Slotted(2, "f8")
    buf.unit = "m"                  # `scale` left unset: stays unset
    for protocol in PROTOCOLS:
        back = pickle.loads(pickle.dumps(buf, protocol=protocol))
        assert back.unit == "m" and not hasattr(back, "scale")
    assert copy.copy(buf).unit == "m" and copy.deepcopy(buf).unit == "m"


def test_subclass_getstate_and_setstate_are_used() -> None:
    buf = Custom(2, "u1")
    buf.tag = 21
    for protocol in PROTOCOLS:
        back = pickle.loads(pickle.dumps(buf, protocol=protocol))
        assert back.restored == {"as_saved": 42}
    assert copy.copy(buf).restored == {"as_saved": 42}


def test_deepcopy_state_may_refer_back_to_the_buffer() -> None:
    buf = Tagged(2, "u1")
    buf.me = buf
    buf.box = [buf]
    d = copy.deepcopy(buf)
    assert d.me is d and d.box[0] is d


def test_exact_cpubuffer_reduces_without_state() -> None:
    assert len(CPUBuffer(2).__reduce_ex__(5)) == 2
    assert len(Tagged(2).__reduce_ex__(5)) == 2          # nothing to carry
    t = Tagged(2)
    t.x = 1
    assert t.__reduce_ex__(5)[2] == {"x": 1}
