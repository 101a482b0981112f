"""Python code that runs inside our operations: the re-entrancy harness.

Every public entry point that takes an object, parses a shape or resolves
a dtype runs user code somewhere inside: an ``__index__``, a ``__buffer__``,
a dtype-like's ``dtype``, an ``__array_interface__`` property, a
``__dlpack__`` method, and -- at every allocation of a GC object -- any
finalizer or ``gc.callbacks`` entry the collector fires (tests/_hooks.py).
Here hypothesis draws an entry point, a hook to put inside it and a
sequence of mutating operations for the hook to run on the objects the
entry point is working on (close, resize, release, export, copy,
copy_from_host, pickle, get_buffer on the same object, ...).

What must hold (docs/reentrancy.rst): never a crash; a
refusal is a Python exception of the kinds an operation raises for a
changed object (ValueError, TypeError, BufferError, OverflowError); a
success describes memory that is alive and of the right size (every open
buffer's and every held view's bytes are read back and measured); and once
everything is released, no export is left.

Under .ci/quality.sh the same harness runs with more examples in an
ASan+UBSan build and under valgrind (BUFFEREXT_HOOKS_EXAMPLES), where a
read of freed memory is a report even when it happens to survive.
Device memory (CUDABuffer, VEBuffer) takes part through the stand-in
drivers, in a child interpreter (the drivers load once per process).
"""

from __future__ import annotations

import copy
import gc
import json
import os
import pickle
import subprocess
import sys
from typing import Any, Callable, Dict, List

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bufferext
from bufferext import CPUBuffer, get_buffer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _hooks as hooks  # noqa: E402

EXAMPLES = int(os.environ.get("BUFFEREXT_HOOKS_EXAMPLES", "60"))
REFUSALS = (ValueError, TypeError, BufferError, OverflowError)
STATS: Dict[str, int] = {"examples": 0, "mutations": 0, "hooks_fired": 0}


@pytest.fixture(autouse=True, scope="module")
def _only_our_objects_collected() -> Any:
    """The harness collects at every second allocation: what the test run
    holds already (pytest, numpy, every module the suite imported) is moved
    out of the collector's sight first, so each collection walks only what
    the examples made, as in a small program.  The same hooks fire (1093
    in 630 examples); the module took 230 s inside the whole suite's heap
    and 20 s alone, and takes about 3 s now."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


# ---- the world a hook mutates ---------------------------------------------

class World:
    """The objects an entry point works on, and what hooks hold of them."""

    def __init__(self, device: Callable[[], List[Any]] = lambda: []) -> None:
        self.bufs: List[Any] = [CPUBuffer((8,), "u1"),
                                CPUBuffer((3, 4), "f8"),
                                CPUBuffer((5,), "i4", readonly=True)]
        self.bufs += device()
        self.views: List[Any] = []      # BufferViews
        self.held: List[Any] = []       # memoryviews, capsules' arrays
        self.results: List[Any] = []    # what entry points returned

    def pick(self, i: int) -> Any:
        return self.bufs[i % len(self.bufs)]

    # every mutating operation in reach of user code
    def mutate(self, op: str, i: int) -> None:
        STATS["mutations"] += 1
        b = self.pick(i)
        try:
            MUTATIONS[op](self, b)
        except REFUSALS:
            pass

    def check(self) -> None:
        """Everything alive describes memory of the size it says."""
        for b in self.bufs:
            if b.closed:
                continue
            nbytes = int(np.prod(b.shape, dtype=np.int64)) * b.itemsize
            assert b.nbytes == nbytes, (b, b.nbytes, nbytes)
            if isinstance(b, CPUBuffer):
                with memoryview(b) as m:
                    assert m.nbytes == nbytes and len(m.tobytes()) == nbytes
            else:
                assert b.to_host().nbytes == nbytes
        for v in self.views:
            if v.released:
                continue
            n = int(np.prod(v.shape, dtype=np.int64)) * v.itemsize
            assert v.nbytes == n
            if v.device is None:
                assert len(v.tobytes()) == n
        for m in self.held:
            if isinstance(m, memoryview):
                assert len(m.tobytes()) == m.nbytes
            elif isinstance(m, np.ndarray):
                assert m.tobytes() is not None

    def release_all(self) -> None:
        while self.held:
            m = self.held.pop()
            if isinstance(m, memoryview):
                m.release()
            del m
        while self.views:
            self.views.pop().release()
        self.results.clear()
        gc.collect()                    # adapters in reference cycles
        for b in self.bufs:
            assert b.exports == 0, f"{b!r} keeps {b.exports} export(s)"
            b.close()


def _resize(shape: Any) -> Callable[[World, Any], None]:
    def run(w: World, b: Any) -> None:
        if hasattr(b, "resize"):
            b.resize(shape)
    return run


def _release_one(w: World, b: Any) -> None:
    if w.views:
        w.views.pop().release()
    if w.held and isinstance(w.held[-1], memoryview):
        w.held.pop().release()


def _read_all(w: World, b: Any) -> None:
    repr(b)
    for name in ("shape", "strides", "ndim", "nbytes", "exports", "closed",
                 "ptr"):
        getattr(b, name)
    for v in w.views:
        repr(v)
        for name in ("shape", "strides", "format", "device_info", "nbytes",
                     "c_contiguous"):
            getattr(v, name)


def _copy_from_host(w: World, b: Any) -> None:
    b.copy_from_host(bytes(b.nbytes))


def _host(w: World, b: Any) -> None:
    w.held.append(b.to_host())


def dlpack_of(b: Any) -> Any:
    """numpy's import of ``b`` (CPU memory), else the capsule itself (numpy
    refuses other devices with a RuntimeError of its own)."""
    if b.__dlpack_device__()[0] == 1:
        return np.from_dlpack(b)
    return b.__dlpack__(max_version=(1, 0))


MUTATIONS: Dict[str, Callable[[World, Any], None]] = {
    "close": lambda w, b: b.close(),
    "shrink": _resize((1,)),
    "grow": _resize((512, 3)),
    "reshape": _resize((2, 1, 3)),
    "export": lambda w, b: w.held.append(memoryview(b)),
    "view": lambda w, b: w.views.append(get_buffer(b)),
    "release": _release_one,
    "release_all_views": lambda w, b: [v.release() for v in w.views],
    "copy": lambda w, b: w.results.append(b.copy() if hasattr(b, "copy")
                                          else None),
    "copy_from_host": _copy_from_host,
    "to_host": _host,
    "pickle": lambda w, b: w.results.append(pickle.loads(pickle.dumps(b, 5))),
    "read": _read_all,
    "dlpack": lambda w, b: w.held.append(dlpack_of(b)),
    "as_buffer": lambda w, b: w.results.append(bufferext.as_buffer(b)),
}


# ---- entry points, each with a hook inside --------------------------------

def _gc(action: Callable[[], None], kind: str) -> Any:
    return hooks.in_gc(action) if kind == "gc" else \
        hooks.in_gc_callback(action)


def e_new_shape(w: World, i: int, act: Callable[[], None], kind: str) -> Any:
    return CPUBuffer((hooks.Index(3, act), 2), "u2")


def e_empty_shape(w: World, i: int, act: Callable[[], None], kind: str) -> Any:
    return CPUBuffer.empty([2, hooks.Index(5, act)], "f4")


def e_new_dtype(w: World, i: int, act: Callable[[], None], kind: str) -> Any:
    return CPUBuffer((4, 2), hooks.DtypeLike("i8", act))


def e_resize(w: World, i: int, act: Callable[[], None], kind: str) -> Any:
    b = w.pick(i)
    if hasattr(b, "resize"):
        b.resize((hooks.Index(6, act), 2))
    return b


def e_copy(w: World, i: int, act: Callable[[], None], kind: str) -> Any:
    b = w.pick(i)
    with _gc(act, kind):
        return (b.copy(), copy.copy(b), copy.deepcopy(b)) \
            if isinstance(b, CPUBuffer) else b.to_host()


def e_getters(w: World, i: int, act: Callable[[], None], kind: str) -> Any:
    b = w.pick(i)
    with _gc(act, kind):
        return (b.shape, b.strides, repr(b), b.nbytes, b.ptr,
                getattr(b, "__array_interface__", None) or
                getattr(b, "__cuda_array_interface__", None) or
                getattr(b, "__ve_array_interface__", None))


def e_view_getters(w: World, i: int, act: Callable[[], None],
                   kind: str) -> Any:
    v = get_buffer(w.pick(i))
    w.views.append(v)
    with _gc(act, kind):
        return (v.shape, v.strides, v.suboffsets, repr(v), v.format,
                v.device_info, v._raw(), v.c_contiguous)


def e_view_tobytes(w: World, i: int, act: Callable[[], None],
                   kind: str) -> Any:
    v = get_buffer(w.pick(i))
    w.views.append(v)
    with _gc(act, kind):
        data = v.tobytes() if v.device is None else None
    assert data is None or len(data) == v.nbytes or v.released
    return data


def e_pickle(w: World, i: int, act: Callable[[], None], kind: str) -> Any:
    b = w.pick(i)
    with _gc(act, kind):
        for protocol in (2, 5):
            data = pickle.dumps(b, protocol)
    return pickle.loads(data)


def e_copy_from_host(w: World, i: int, act: Callable[[], None],
                     kind: str) -> Any:
    b = w.pick(i)
    source = bytearray(b.nbytes) if not b.closed else bytearray(8)
    if hooks.PEP688:
        b.copy_from_host(hooks.BufferHook(source, act))
    else:
        with _gc(act, kind):
            b.copy_from_host(source)
    return b


def e_get_buffer_hook(w: World, i: int, act: Callable[[], None],
                      kind: str) -> Any:
    if not hooks.PEP688:
        with _gc(act, kind):
            return get_buffer(w.pick(i))
    target = w.pick(i)
    with get_buffer(hooks.BufferHook(target, act)) as v:
        return v.nbytes, v.shape


def e_view_copy_to_host(w: World, i: int, act: Callable[[], None],
                        kind: str) -> Any:
    v = get_buffer(w.pick(i))
    w.views.append(v)
    target = bytearray(v.nbytes)
    if hooks.PEP688:
        v.copy_to_host(hooks.BufferHook(target, act))
    else:
        with _gc(act, kind):
            v.copy_to_host(target)
    return target


def e_as_buffer_interface(w: World, i: int, act: Callable[[], None],
                          kind: str) -> Any:
    a = bufferext.as_buffer(hooks.ArrayInterfaceHook(np.arange(6.0), act))
    with get_buffer(a) as v:
        assert v.nbytes == 48 and len(v.tobytes()) == 48
    return a


def e_as_buffer_dlpack(w: World, i: int, act: Callable[[], None],
                       kind: str) -> Any:
    b = w.pick(i)
    source = b if isinstance(b, CPUBuffer) and not b.closed \
        else np.arange(4)
    a = bufferext.as_buffer(hooks.DLPackHook(source, act))
    with get_buffer(a) as v:
        assert len(v.tobytes()) == v.nbytes
    return a


def e_dlpack_args(w: World, i: int, act: Callable[[], None],
                  kind: str) -> Any:
    b = w.pick(i)
    return b.__dlpack__(max_version=(1, 0),
                        dl_device=(hooks.Index(1, act), hooks.Index(0, act)))


def e_dlpack_in_gc(w: World, i: int, act: Callable[[], None],
                   kind: str) -> Any:
    b = w.pick(i)
    with _gc(act, kind):
        return dlpack_of(b)


def e_as_buffer_in_gc(w: World, i: int, act: Callable[[], None],
                      kind: str) -> Any:
    b = w.pick(i)
    with _gc(act, kind):
        a = bufferext.as_buffer(b, readonly=True)
        with get_buffer(a) as v:
            return v.shape


def e_check(w: World, i: int, act: Callable[[], None], kind: str) -> Any:
    b = w.pick(i)
    target = hooks.BufferHook(b, act) if hooks.PEP688 else b
    with _gc(act, kind):
        return (bufferext.check_buffer_supports(target, 0x1011C),
                bufferext.supported_flags(b))


def e_distarray(w: World, i: int, act: Callable[[], None], kind: str) -> Any:
    from bufferext.distarray import DistArray, validate
    b = w.pick(i)
    with _gc(act, kind):
        d = DistArray.from_global(np.arange(12.0).reshape(3, 4),
                                  dist=("b", "c"), grid_shape=(1, 1), rank=0)
        validate(d.__distarray__())
        again = DistArray.from_distarray(d)
        out = d.redistribute(dist=("n", "n"))
    assert again.local.shape == (3, 4) and out.local.shape == (3, 4)
    del b
    return out


def e_arrow_export_in_gc(w: World, i: int, act: Callable[[], None],
                        kind: str) -> Any:
    b = w.pick(i)
    export = getattr(b, "__arrow_c_device_array__", None)   # not VEBuffer
    capsules: List[Any] = []
    if export is None:
        return capsules
    with _gc(act, kind):
        for _ in range(3):      # the collector runs between the exports
            capsules.append(export())
    assert b.exports >= len(capsules)
    return capsules


def e_as_buffer_arrow(w: World, i: int, act: Callable[[], None],
                      kind: str) -> Any:
    b = w.pick(i)
    source = b if isinstance(b, CPUBuffer) and b.ndim == 1 and not b.closed \
        else CPUBuffer((4,), "i2")
    with _gc(act, kind):
        a = bufferext.as_buffer(hooks.ArrowHook(source, act))
        with get_buffer(a) as v:
            assert len(v.tobytes()) == v.nbytes
    return a


def e_new_lowp_dtype(w: World, i: int, act: Callable[[], None],
                     kind: str) -> Any:
    from bufferext._dtypes import lowp_dtype
    with _gc(act, kind):
        b = CPUBuffer((4, 2), hooks.DtypeLike(lowp_dtype("bfloat16"), act))
        return b, CPUBuffer((3,), "[float8_e4m3fn]").to_host()


ENTRIES = {name[2:]: fn for name, fn in globals().items()
           if name.startswith("e_")}
HOOK_KINDS = ["gc", "gc_callback"]


# ---- the property --------------------------------------------------------

def run_example(world: World, entry: str, kind: str, target: int,
                plan: List[Any]) -> None:
    STATS["examples"] += 1

    def action() -> None:
        STATS["hooks_fired"] += 1
        for op, j in plan:
            world.mutate(op, j)

    try:
        world.results.append(ENTRIES[entry](world, target, action, kind))
    except REFUSALS:
        pass
    world.check()
    world.release_all()


PLAN = st.lists(st.tuples(st.sampled_from(sorted(MUTATIONS)),
                          st.integers(0, 5)), min_size=1, max_size=4)


# The hooks are process-wide (a finalizer, a gc.callbacks entry): a
# collection on another thread fires them inside that thread's operation
# and mutates this thread's world meanwhile, so under pytest-run-parallel
# these run on one thread (a 3.13t run failed so, by timing).
HOOKS_ARE_PROCESS_WIDE = pytest.mark.thread_unsafe(
    reason="gc hooks fire on whichever thread collects")


@HOOKS_ARE_PROCESS_WIDE
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(entry=st.sampled_from(sorted(ENTRIES)),
       kind=st.sampled_from(HOOK_KINDS), target=st.integers(0, 5),
       plan=PLAN)
def test_hooks_inside_every_entry_point(entry: str, kind: str, target: int,
                                        plan: List[Any]) -> None:
    run_example(World(), entry, kind, target, plan)


@HOOKS_ARE_PROCESS_WIDE
@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("op", sorted(MUTATIONS))
def test_each_mutation_inside_each_entry_point(entry: str, op: str) -> None:
    # every pair once, with the hook on the object the entry point uses
    for kind in HOOK_KINDS:
        run_example(World(), entry, kind, 0, [(op, 0)])


def test_stats() -> None:
    """Write what ran to BUFFEREXT_HOOKS_STATS (for CI's report)."""
    path = os.environ.get("BUFFEREXT_HOOKS_STATS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(dict(STATS, pid=os.getpid())) + "\n")


# ---- device memory, through the stand-in drivers ----------------------------

DEVICE_CHILD = r'''
import os, sys
sys.path.insert(0, {tests!r})
import test_hooks as h
import bufferext
from hypothesis import given, settings, HealthCheck, strategies as st

def device():
    return [bufferext.CUDABuffer((6,), "f4"), bufferext.VEBuffer((2, 3), "u1")]

import gc
gc.collect()
gc.freeze()     # as _only_our_objects_collected does

@settings(max_examples={examples}, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(entry=st.sampled_from(sorted(h.ENTRIES)),
       kind=st.sampled_from(h.HOOK_KINDS), target=st.integers(3, 4),
       plan=h.PLAN)
def run(entry, kind, target, plan):
    h.run_example(h.World(device), entry, kind, target, plan)

run()
for entry in sorted(h.ENTRIES):
    for op in sorted(h.MUTATIONS):
        h.run_example(h.World(device), entry, "gc", 3, [(op, 3)])
        h.run_example(h.World(device), entry, "gc", 4, [(op, 4)])
print("STATS", h.STATS)
'''


def test_hooks_with_device_memory(tmp_path: Any) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "cuda_standin"))
    sys.path.insert(0, os.path.join(here, "ve_standin"))
    import standin as ve_standin
    import standin_harness as cuda_standin
    env = dict(os.environ,
               BUFFEREXT_CUDA_DRIVER=cuda_standin.build(str(tmp_path)),
               BUFFEREXT_VEO_LIBRARY=ve_standin.build(str(tmp_path)))
    code = DEVICE_CHILD.format(tests=here, examples=max(EXAMPLES // 3, 10))
    result = subprocess.run([sys.executable, "-c", code], env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert "STATS" in result.stdout
