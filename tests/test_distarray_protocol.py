"""validate(): process-local rules of 0.10.0, legacy 0.9.x, and fuzzing."""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Dict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bufferext
from bufferext.distarray import DistArray, ProtocolError, validate
from bufferext.distarray._protocol import check

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "cuda_standin"))
import standin_harness as harness  # noqa: E402


def _exp(buffer, *dims, version="0.10.0"):
    return {"__version__": version, "buffer": buffer, "dim_data": tuple(dims)}


def B(size=4, grid=1, rank=0, start=0, stop=4, **kw):
    d = {"dist_type": "b", "size": size, "proc_grid_size": grid,
         "proc_grid_rank": rank, "start": start, "stop": stop}
    d.update(kw)
    return d


def C(size=10, grid=3, rank=1, start=1, **kw):
    d = {"dist_type": "c", "size": size, "proc_grid_size": grid,
         "proc_grid_rank": rank, "start": start}
    d.update(kw)
    return d


def U(indices, size=10, grid=2, rank=0, **kw):
    d = {"dist_type": "u", "size": size, "proc_grid_size": grid,
         "proc_grid_rank": rank, "indices": np.asarray(indices)}
    d.update(kw)
    return d


def rejects(data, *fragments):
    with pytest.raises(ProtocolError) as info:
        validate(data)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)
    return info.value


def test_valid_forms():
    validate(_exp(np.zeros(4), B()))
    validate(_exp(np.zeros(3), C()))                       # ranks own 4, 3, 3
    validate(_exp(np.zeros(2), C(size=10, grid=3, rank=2, start=8, block_size=4)))
    validate(_exp(np.zeros(3), U([5, -1, 2])))             # negative indices allowed
    validate(_exp(np.zeros(()),))                          # 0-d
    validate(_exp(np.zeros((0, 3)), B(size=0, stop=0), {}))
    validate(_exp(np.zeros(0), B(size=6, grid=2, rank=1, start=6, stop=6)))
    validate(_exp(np.zeros(0), C(size=2, grid=3, rank=2, start=2)))   # clamped start
    validate(_exp(np.zeros(0), C(size=2, grid=3, rank=2, start=4, block_size=2)))
    validate(_exp(np.zeros(10), B(size=10, stop=10, padding=(2, 2), periodic=True)))
    validate(_exp(memoryview(bytearray(4)), B()))
    validate(bufferext.CPUBuffer((4,)) and _exp(bufferext.CPUBuffer((4,)), B()))


def test_rejects_major_version_2_and_bad_versions():
    rejects(_exp(np.zeros(4), B(), version="2.0.0"), "'__version__' = '2.0.0'")
    rejects(_exp(np.zeros(4), B(), version="0.8.0"), "unsupported")
    rejects(_exp(np.zeros(4), B(), version="0.10"), "major.minor.patch")
    rejects(_exp(np.zeros(4), B(), version=(0, 10, 0)), "major.minor.patch")
    for tail in ("\n", " ", "\n\n"):               # `$` would match before a last \n
        rejects(_exp(np.zeros(4), B(), version="0.10.1" + tail), "major.minor.patch")
    validate(_exp(np.zeros(4), B(), version="0.10.3"))
    validate(_exp(np.zeros(4), B(), version="0.9.1"))


def test_rejects_n_in_010_and_imports_it_from_09():
    dim = {"dist_type": "n", "size": 4}
    rejects(_exp(np.zeros(4), dim), "dim_data[0]['dist_type'] = 'n'", "use {}")
    d = DistArray.from_distarray(_exp(np.zeros(4), dim, version="0.9.0"))
    assert d.dim_data == ({},)


def test_rejects_lists_where_tuples_are_required():
    rejects({"__version__": "0.10.0", "buffer": np.zeros(4), "dim_data": [B()]},
            "'dim_data'", "tuple")
    rejects(_exp(np.zeros(4), B(padding=[0, 0])), "dim_data[0]['padding'] = [0, 0]")
    rejects(_exp(np.zeros(3), U([1, 2, 3]) | {"indices": [1, 2, 3]}),
            "dim_data[0]['indices'] = [1, 2, 3]")


def test_rejects_duplicate_unstructured_indices():
    rejects(_exp(np.zeros(3), U([4, 1, 4])), "dim_data[0]['indices']", "4 repeats")


def test_top_level_problems():
    rejects([], "not a dict")
    rejects({"buffer": np.zeros(1), "dim_data": ()}, "missing key '__version__'")
    rejects(dict(_exp(np.zeros(4), B()), extra=1), "unknown key 'extra'")
    validate(dict(_exp(np.zeros(4), B(), version="0.11.0"), extra=1))  # later minor
    rejects(_exp([1, 2, 3], B()), "'buffer'", "does not export a buffer")
    rejects(_exp(np.zeros((4, 2)), B()), "1 entries", "2 dimensions")
    rejects(_exp(np.zeros(4), [B()]), "dim_data[0]", "must be a dict")


def test_every_problem_of_a_dim_data_is_reported_together():
    err = rejects(_exp(np.zeros((4, 3)),
                       B(size=True, stop=5, padding=(-1, 0), periodic="yes"),
                       C(size=10, grid=3, rank=1, start=np.int64(1))),
                  "dim_data[0]['size'] = True", "dim_data[0]['padding'] = (-1, 0)",
                  "dim_data[0]['periodic'] = 'yes'", "dim_data[1]['start'] = ",
                  "not int64")
    assert len(err.problems) >= 4
    assert isinstance(err, ValueError)


@pytest.mark.parametrize("dims,buffer,fragment", [
    ([{"size": 4}], np.zeros(4), "required key 'dist_type'"),
    ([B(rank=-1)], np.zeros(4), "['proc_grid_rank'] = -1"),
    ([B(grid=2, rank=2)], np.zeros(4), "must be < proc_grid_size"),
    ([B(grid=0)], np.zeros(4), "['proc_grid_size'] = 0"),
    ([B(start=-1, stop=3)], np.zeros(4), "['start'] = -1"),
    ([B(size=4, grid=2, rank=1, start=3, stop=2)], np.zeros(0), "must be >= start"),
    ([B(size=4, stop=5)], np.zeros(5), "must be <= size"),
    ([B(size=8, grid=2, rank=0, stop=3)], np.zeros(4), "stop - start"),
    ([B(size=8, grid=2, rank=0, start=1, stop=5)], np.zeros(4), "proc_grid_rank 0"),
    ([B(size=8, grid=2, rank=1, start=4, stop=7)], np.zeros(3), "last grid rank"),
    ([B(padding=(3, 2))], np.zeros(4), "wider than the section"),
    ([B(padding=(1, 1, 1))], np.zeros(4), "2-tuple"),
    ([B(extra=1)], np.zeros(4), "unknown key for dist_type 'b'"),
    ([C(start=3)], np.zeros(3), "proc_grid_rank * block_size (1)"),
    ([C(size=11)], np.zeros(3), "owns 4 indices"),
    ([C(block_size=0)], np.zeros(3), "['block_size'] = 0"),
    ([C(size=3, grid=2, rank=1, start=2, block_size=2)], np.zeros(0), "owns 1"),
    ([{"dist_type": "c", "proc_grid_size": 1, "proc_grid_rank": 0, "start": 0}],
     np.zeros(3), "required key 'size'"),
    ([U([1, 2])], np.zeros(3), "has 2 entries"),
    ([U([1.0, 2.0])], np.zeros(2), "1-D buffer of integers"),
    ([U([1, 2], one_to_one=1)], np.zeros(2), "['one_to_one'] = 1"),
    ([{"dist_type": "u", "size": 2, "proc_grid_size": 1, "proc_grid_rank": 0}],
     np.zeros(2), "required key 'indices'"),
    ([{"dist_type": "x"}], np.zeros(2), "must be 'b', 'c' or 'u'"),
])
def test_each_local_rule(dims, buffer, fragment):
    rejects(_exp(buffer, *dims), fragment)


def test_09_periodic_edge_padding_cannot_be_expressed():
    dd = B(size=10, grid=2, rank=0, start=0, stop=5, padding=(1, 1), periodic=True)
    rejects(_exp(np.zeros(7), dd, version="0.9.0"), "wraps around")


@pytest.mark.parametrize("dim", [C(size=4, grid=1, rank=0, start=0),
                                 U([3, 0, 2, 1], size=4, grid=1)],
                         ids=["cyclic", "unstructured"])
def test_09_any_dimension_may_say_it_is_periodic(dim):
    # 0.9.x lists 'periodic' among every dimension's optional keys (0.10.0
    # among a block one's only): read, checked to be a bool, and dropped
    for periodic in (False, True):
        dd = dict(dim, periodic=periodic)
        assert "periodic" not in check(_exp(np.zeros(4), dd,
                                            version="0.9.0")).dims[0]
        rejects(_exp(np.zeros(4), dd), "['periodic'] = ")
    rejects(_exp(np.zeros(4), dict(dim, periodic=1), version="0.9.0"),
            "dim_data[0]['periodic'] = 1: must be a bool")


def test_legacy_draft_label_reads_as_09():
    dim = {"dist_type": "n", "size": 3}
    d = DistArray.from_distarray(_exp(np.zeros(3), dim, version="1.0.0"))
    assert d.global_shape == (3,)


# -- fuzzing: invalid dim_data always gives ProtocolError, nothing else ---------------

junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.floats(allow_nan=False),
                 st.text(max_size=2), st.sampled_from(["b", "c", "u", "n"]),
                 st.tuples(st.integers(-2, 5), st.integers(-2, 5)),
                 st.lists(st.integers(-3, 12), max_size=5),
                 st.builds(lambda xs: np.array(xs, dtype=np.int64),
                           st.lists(st.integers(-3, 12), max_size=5)),
                 st.just(np.int64(2)), st.just(object()))
KEYS = ["dist_type", "size", "proc_grid_size", "proc_grid_rank", "start", "stop",
        "padding", "periodic", "block_size", "indices", "one_to_one", "other"]
dim_dicts = st.dictionaries(st.sampled_from(KEYS), junk, max_size=8)
top = st.one_of(st.tuples(dim_dicts), st.tuples(dim_dicts, dim_dicts), junk)


# derandomize: the same examples on every run (a seed from the test's
# name), so the verdict does not change from one CI run to the next
@settings(max_examples=500, deadline=None, derandomize=True)
@given(dims=top, shape=st.lists(st.integers(0, 5), min_size=0, max_size=2),
       version=st.sampled_from(["0.10.0", "0.9.0", "0.10.1", "2.0.0"]))
def test_fuzz_never_raises_anything_but_protocolerror(dims, shape, version):
    data = {"__version__": version, "buffer": np.zeros(shape), "dim_data": dims}
    try:
        validate(data)
    except ProtocolError:
        return
    # accepted: then import must work and agree on the shape
    d = DistArray.from_distarray(data)
    assert d.local_shape == tuple(shape)


# -- what later steps could not use: ProtocolError up front ---------------------------

BIG = 2**63                                 # one past the largest int64


@pytest.mark.parametrize("dim, buffer, key, value", [
    (B(size=BIG, grid=2, rank=0, stop=4), np.zeros(4), "size", BIG),
    (B(size=BIG, grid=2, rank=1, start=BIG - 4, stop=BIG), np.zeros(4), "stop", BIG),
    (B(grid=2**64, rank=0), np.zeros(4), "proc_grid_size", 2**64),
    (B(grid=2**64, rank=BIG), np.zeros(4), "proc_grid_rank", BIG),
    (B(padding=(BIG, 0)), np.zeros(4), "padding", (BIG, 0)),
    (C(size=10, grid=3, rank=1, start=BIG, block_size=BIG), np.zeros(0), "start", BIG),
    (C(size=10, grid=3, rank=1, start=BIG, block_size=BIG), np.zeros(0),
     "block_size", BIG),
    (C(size=BIG, grid=3, rank=1, start=1), np.zeros(3), "size", BIG),
    (U([1, 2], size=BIG), np.zeros(2), "size", BIG),
], ids=["b-size", "b-stop", "b-proc_grid_size", "b-proc_grid_rank", "b-padding",
        "c-start", "c-block_size", "c-size", "u-size"])
def test_integers_past_int64_are_refused(dim, buffer, key, value):
    # before: size 2**63 passed validation (and failed later with
    # OverflowError); padding 2**63 was only "wider than the section"
    rejects(_exp(buffer, dim), f"dim_data[0][{key!r}] = {value!r}: must fit an "
            "int64 (at most 2**63 - 1)")


def test_indices_whose_buffer_cannot_be_read_are_protocol_errors():
    # before: the BufferError or ValueError of the export escaped
    closed = bufferext.CPUBuffer(2, "i8")
    closed.close()
    released = memoryview(np.array([1, 2]))
    released.release()
    rejects(_exp(np.zeros(2), U([0, 1]) | {"indices": closed}),
            "dim_data[0]['indices'] = CPUBuffer((2,), dtype='int64', closed): its "
            "buffer cannot be read (BufferError: ", "closed); must be a 1-D buffer "
            "of integers")
    rejects(_exp(np.zeros(2), U([0, 1]) | {"indices": released}),
            "dim_data[0]['indices'] = <released memory at ", ">: its buffer cannot "
            "be read (ValueError: operation forbidden on released memoryview object)")


def test_indices_on_a_device_or_failing_their_export_are_protocol_errors(c99):
    on_device = c99.ExporterFull(2, device="bufferext.cuda")
    rejects(_exp(np.zeros(2), U([0, 1]) | {"indices": on_device}),
            "dim_data[0]['indices'] = ", ": memory on device 'bufferext.cuda': "
            "indices must be a 1-D buffer of integers in CPU memory")
    failing = c99.ExporterFull(2, fail=True)
    rejects(_exp(np.zeros(2), U([0, 1]) | {"indices": failing}),
            "dim_data[0]['indices'] = ", ": its buffer cannot be read "
            "(BufferError: ", "forced getbuffer failure")


# ---- edge rules a mutation run found unguarded (from test_edges.py) ---------

def test_block_stop_is_bounded_by_size() -> None:
    # rank 0 of 2, so only "stop <= size" can object to [0, 5) of size 4
    assert rejects(_exp(np.zeros(5), B(grid=2, stop=5))).problems == \
        ["dim_data[0]['stop'] = 5: must be <= size (4)"]


def test_empty_cyclic_section_starts_at_size() -> None:
    # rank 3 of 4 over 2 indices owns nothing: its start is rank * block (3)
    # or, clipped, the size (2)
    for start in (2, 3):
        validate(_exp(np.zeros(0), C(size=2, grid=4, rank=3, start=start)))
    assert rejects(_exp(np.zeros(0),
                        C(size=2, grid=4, rank=3, start=1))).problems == \
        ["dim_data[0]['start'] = 1: must be proc_grid_rank * block_size (3)"]


def test_09_import_keeps_padding_and_periodic() -> None:
    n = {"dist_type": "n", "size": 4, "padding": (1, 1), "periodic": True}
    dims = check(_exp(np.zeros(4), n, version="0.9.0"))[4]
    assert dims[0]["dist_type"] == "b"
    assert dims[0]["padding"] == (1, 1) and dims[0]["periodic"] is True
    b = B(size=6, grid=2, stop=4, padding=(0, 1), periodic=True)
    dims = check(_exp(np.zeros(4), b, version="0.9.2"))[4]
    assert dims[0]["padding"] == (0, 1) and dims[0]["periodic"] is True


@pytest.mark.parametrize("n,problems", [
    ({"dist_type": "n"}, ["dim_data[0]: required key 'size' is missing"]),
    ({"dist_type": "n", "size": "4"},
     ["dim_data[0]['size'] = '4': must be a Python int >= 0"]),
    ({"dist_type": "n", "size": 5},
     ["dim_data[0]['size'] = 5: an undistributed dimension's size must equal "
      "the buffer's extent 4"]),
    ({"dist_type": "n", "size": 4, "stop": 4, "proc_grid_size": 2},
     ["dim_data[0]['stop'] = 4: unknown key for dist_type 'n'",
      "dim_data[0]['proc_grid_size'] = 2: must be 1 for dist_type 'n' "
      "(undistributed)"]),
    ({"dist_type": "n", "size": 4, "proc_grid_rank": True},
     ["dim_data[0]['proc_grid_rank'] = True: must be 0 for dist_type 'n' "
      "(undistributed)"]),
])
def test_09_undistributed_problems_name_the_keys_the_producer_wrote(n, problems):
    # 'n' is read as a block dimension of one process, whose start and stop
    # the producer never wrote: no problem may name them, none may be lost
    assert rejects(_exp(np.zeros(4), n, version="0.9.0")).problems == problems


def test_09_undistributed_may_carry_the_grid_of_one_process() -> None:
    n = {"dist_type": "n", "size": 4, "proc_grid_size": 1, "proc_grid_rank": 0}
    assert check(_exp(np.zeros(4), n, version="0.9.0")).dims[0]["stop"] == 4


def test_09_widened_block_problems_say_what_was_read() -> None:
    # 0.9's start/stop leave the padding out; the reader widens them, and a
    # problem with the widened values says which the producer wrote
    dd = B(size=7, grid=3, rank=1, start=3, stop=7, padding=(1, 1))
    assert rejects(_exp(np.zeros(6), dd, version="0.9.0")).problems == [
        "dim_data[0]['stop'] = 8: must be <= size (7)",
        "dim_data[0]: read as 0.9.x, whose 'start' and 'stop' leave out the "
        "padding: 3 and 7 were widened to 2 and 8"]


# ---- versions, int64, device formats (from test_boundary_python.py) --------

@pytest.mark.parametrize("version", [np.array(["0.10.0"]),
                                     np.array([1, 2]), b"0.10.0", 0.1])
def test_version_of_the_wrong_type_is_a_protocol_error(version: Any) -> None:
    with pytest.raises(ProtocolError, match="'__version__' = .*must be a "
                                            "'major.minor.patch' string"):
        validate(_exp(np.zeros(4), B(), version=version))


@pytest.mark.parametrize("key", ["size", "stop", "start"])
def test_sizes_beyond_int64_are_a_protocol_error(key: str) -> None:
    dim = B()
    dim[key] = 2**63
    with pytest.raises(ProtocolError, match=rf"\['{key}'\] = 9223372036854775808: "
                                            "must fit an int64"):
        validate(_exp(np.zeros(4), dim))


def test_indices_beyond_int64_are_a_protocol_error() -> None:
    dd = {"dist_type": "u", "size": 4, "proc_grid_size": 1,
          "proc_grid_rank": 0, "indices": [0, 1, 2, 2**64]}
    with pytest.raises(ProtocolError, match="indices"):
        validate(_exp(np.zeros(4), dd))


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> str:
    return harness.build(str(tmp_path_factory.mktemp("standin_cuda")))


def test_device_buffer_of_a_non_numeric_type_is_a_protocol_error(
        driver: str) -> None:
    # device memory described by the CUDA Array Interface alone (the pointer
    # is never read on the CPU: validation only looks).  Before: validation
    # passed and the MPI layer failed later with a non-ProtocolError
    harness.check(driver, """
from bufferext.distarray import ProtocolError, validate
class DeviceArray:
    def __init__(self, typestr, ptr):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (4,), "typestr": typestr,
            "data": (ptr, False), "strides": None, "stream": None}
def distbuffer(buffer):
    return {"__version__": "0.10.0", "buffer": buffer,
            "dim_data": ({"dist_type": "b", "size": 4, "proc_grid_size": 1,
                          "proc_grid_rank": 0, "start": 0, "stop": 4},)}
memory = bufferext.CUDABuffer(32, "u1")
ptr = memory.__cuda_array_interface__["data"][0]
for typestr in ("<U2", "|S4", "|V8"):
    adapter = bufferext.as_buffer(DeviceArray(typestr, ptr))
    assert adapter.device == "bufferext.cuda"
    try:
        validate(distbuffer(adapter))
    except ProtocolError as e:
        assert "memory on device 'bufferext.cuda' with format" in str(e), e
    else:
        raise AssertionError(typestr)
validate(distbuffer(bufferext.as_buffer(DeviceArray("<f8", ptr))))
del adapter
memory.close()
""")


def test_device_buffer_format_is_read_as_a_buffer_format(c99: Any) -> None:
    # the format of device memory is read by struct's rules, as every
    # export's is: a numpy spelling ('f4', '<i4') names no buffer type and
    # is a ProtocolError here, not a TypeError of the MPI layer later
    def distbuffer(fmt: str, itemsize: int) -> Dict[str, Any]:
        buffer = c99.Configurable(block_size=16, len=16, itemsize=itemsize,
                                  ndim=1, format=fmt,
                                  shape=(16 // itemsize,),
                                  device="bufferext.cuda")
        return {"__version__": "0.10.0", "buffer": buffer,
                "dim_data": ({"dist_type": "b", "size": 16 // itemsize,
                              "proc_grid_size": 1, "proc_grid_rank": 0,
                              "start": 0, "stop": 16 // itemsize},)}

    validate(distbuffer("=l", 4))       # four 4-byte ints
    for fmt, itemsize in [("f4", 4), ("<i4", 4), ("c", 1)]:
        with pytest.raises(ProtocolError, match=re.escape(
                f"memory on device 'bufferext.cuda' with format {fmt!r}")):
            validate(distbuffer(fmt, itemsize))


# The import keeps what it validated, not the provider's objects: a
# provider reusing its dim dicts or index array after the export (or
# changing them from a re-entrant ``__buffer__`` during the import) changed
# the array's layout (review r1/r2/r3/r6).
def test_import_is_unchanged_by_the_provider_reusing_its_dim_dict() -> None:
    dd = B(size=6, stop=6, padding=(0, 0), periodic=False)     # complete already
    d = DistArray.from_distarray(_exp(np.arange(6.0), dd))
    dd.update(size=10**6, stop=3, padding=(5, 5))
    assert d.global_shape == (6,) and d.global_to_local(4) == (4,)
    assert d.owned.tolist() == list(range(6))
    validate(d.__distarray__())


def test_import_is_unchanged_by_the_provider_reusing_its_indices() -> None:
    idx = np.array([0, 1, 2, 3])                # the provider's own int64 array
    dd = U(idx, size=4, grid=1, one_to_one=True)
    d = DistArray.from_distarray(_exp(np.arange(4.0), dd))
    idx[:] = 7
    assert d.dim_data[0]["indices"].tolist() == [0, 1, 2, 3]
    assert d.local_to_global(np.arange(4))[0].tolist() == [0, 1, 2, 3]
    assert d.global_to_local(0) == (0,)
    idx[:] = [3, 2, 1, 0]
    kept = check(_exp(np.arange(4.0), U(idx, size=4, grid=1))).dims[0]["indices"]
    assert kept is not idx and not kept.flags.writeable


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ is 3.12's")
def test_import_is_unchanged_by_a_buffer_rewriting_the_dim_dict() -> None:
    data = np.arange(6.0)
    dd = B(size=6, stop=6, padding=(0, 0), periodic=False)

    class Rewriting:                # validated as it is, changed by later exports
        calls = 0

        def __buffer__(self, flags: int) -> memoryview:
            Rewriting.calls += 1
            if Rewriting.calls > 1:
                dd.update(start=2, stop=8, size=8, padding=(2, 0))
            return memoryview(data)

        def __release_buffer__(self, view: memoryview) -> None:
            view.release()

    d = DistArray.from_distarray(_exp(Rewriting(), dd))
    assert d.owned.tolist() == list(range(6))  # exports the buffer again
    assert Rewriting.calls > 1
    assert d.global_shape == (6,) and d.local_to_global(0) == (0,)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ is 3.12's")
def test_import_keeps_the_buffer_it_validated() -> None:
    exported: Dict[str, Any] = {"__version__": "0.10.0", "dim_data": ({},)}

    class Swapping:
        def __buffer__(self, flags: int) -> memoryview:
            exported["buffer"] = np.zeros((3, 4), np.int8)
            return memoryview(np.arange(12.0))

        def __release_buffer__(self, view: memoryview) -> None:
            view.release()

    first = exported["buffer"] = Swapping()
    d = DistArray.from_distarray(exported)
    assert d.buffer is first and d.local_shape == (12,)
    assert d.dtype == np.float64
