"""Thread stress: many threads acquiring and releasing extended buffers of
the same exporters, and the per-type capability cache under concurrent
first use.

The acquire/release stress runs in a child interpreter with the stand-in
CUDA driver and stand-in VEO library (test doubles built by the tests, no
device needed) so that CPUBuffer, CUDABuffer, VEBuffer and BufferAdapter
share one process.  ``BUFFEREXT_STRESS_ACQUIRES`` sets the total number of
acquisitions over all threads and exporters (small by default; the quality
script runs 10**6).  The switch interval is set to 10 microseconds so the
threads interleave as often as the GIL allows.
"""

from __future__ import annotations

import gc
import json
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Dict, List

import numpy as np
import pytest

import bufferext
from bufferext import BufferFlags

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "cuda_standin"))
sys.path.insert(0, os.path.join(HERE, "ve_standin"))
import standin  # noqa: E402
import standin_harness  # noqa: E402
from _helpers import (  # noqa: E402
    ATTRIBUTE_DECLARES, NEEDS_ATTRIBUTE, run_child)

THREADS = 8
TOTAL = int(os.environ.get("BUFFEREXT_STRESS_ACQUIRES", "40000"))

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the stand-in libraries are built "
                                       "for Linux")


@pytest.fixture(scope="module")
def standins(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """Paths of the stand-in CUDA driver and VEO library."""
    out = str(tmp_path_factory.mktemp("thread_standins"))
    return {"BUFFEREXT_CUDA_DRIVER": standin_harness.build(out),
            "BUFFEREXT_VEO_LIBRARY": standin.build(out)}


STRESS = r'''
import ctypes, gc, json, os, sys, threading, time
import numpy as np
import bufferext
from bufferext import BufferFlags

TOTAL = int(sys.argv[1])
THREADS = int(sys.argv[2])
sys.setswitchinterval(1e-5)
FLAGS = BufferFlags.FULL_RO | BufferFlags.DEVICE

cuda = bufferext.CUDABuffer((16, 8), "float32")
cuda.copy_from_host(np.arange(128, dtype=np.float32).reshape(16, 8))
ve = bufferext.VEBuffer((16, 8), "float64")
cpu = bufferext.CPUBuffer((16, 8), "int32")
adapter = bufferext.as_buffer(cpu, readonly=True)
cuda_adapter = bufferext.as_buffer(cuda, readonly=True)
exporters = {"CPUBuffer": cpu, "CUDABuffer": cuda, "VEBuffer": ve,
             "BufferAdapter(cpu)": adapter, "BufferAdapter(cuda)": cuda_adapter}
expected = {name: (obj.shape, bufferext.get_buffer(obj).device)
            for name, obj in exporters.items()}
gc.collect()
# the adapters hold one export each of cpu and cuda, for their lifetime
baseline = {name: obj.exports for name, obj in exporters.items()}
names = sorted(exporters)
per_thread = TOTAL // THREADS
barrier = threading.Barrier(THREADS)
done = [0] * THREADS
capsules = [0] * THREADS
errors = []

def work(index):
    try:
        barrier.wait()
        n = 0
        for i in range(per_thread):
            name = names[(i + index) % len(names)]
            obj = exporters[name]
            if i % 64 == 63 and name != "VEBuffer":
                # a DLPack capsule holds one export until it is freed
                cap = obj.__dlpack__(max_version=(1, 0))
                del cap
                capsules[index] += 1
            view = bufferext.get_buffer(obj, FLAGS)
            if (view.shape, view.device) != expected[name]:
                raise AssertionError((name, view.shape, view.device))
            if i % 3 == 0:
                nested = bufferext.get_buffer(view, FLAGS)
                nested.release()
            view.release()
            n += 1
        done[index] = n
    except BaseException as exc:   # reported, never lost
        errors.append(repr(exc))

start = time.perf_counter()
threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
elapsed = time.perf_counter() - start
gc.collect()
exports = {name: obj.exports - baseline[name]
           for name, obj in exporters.items()}
del adapter, cuda_adapter, exporters
gc.collect()
assert cpu.exports == cuda.exports == ve.exports == 0
cpu.close(); cuda.close(); ve.close()
print(json.dumps({"done": sum(done), "capsules": sum(capsules),
                  "errors": errors, "exports": exports,
                  "elapsed": elapsed}))
'''


def test_acquire_release_stress(standins: Dict[str, str]) -> None:
    """8 threads, the same five exporters, TOTAL acquisitions in all: no
    crash, every acquisition succeeds, export counts exactly zero after,
    and the stand-ins have no device memory left once the buffers close."""
    env = dict(os.environ, **standins)
    proc = subprocess.run(
        [sys.executable, "-c", STRESS, str(TOTAL), str(THREADS)],
        env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stderr == "", proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["errors"] == []
    assert result["done"] == TOTAL // THREADS * THREADS
    assert result["capsules"] > 0
    assert set(result["exports"].values()) == {0}, result["exports"]
    print(f"\n{result['done']} acquisitions in {result['elapsed']:.1f} s "
          f"({THREADS} threads, 5 exporters)")


def test_stress_leaves_no_device_state(standins: Dict[str, str]) -> None:
    """The same workload, shorter, checked against the stand-ins' live
    counters: every allocation, stream and context is gone at the end."""
    code = STRESS + textwrap.dedent('''
        gc.collect()
        sd = ctypes.CDLL(os.environ["BUFFEREXT_CUDA_DRIVER"])
        sv = ctypes.CDLL(os.environ["BUFFEREXT_VEO_LIBRARY"])
        sv.standin_live_hmem.restype = ctypes.c_long
        print(json.dumps({"cuda_allocations": sd.standin_live_allocations(),
                          "cuda_events": sd.standin_live_events(),
                          "ve_hmem": sv.standin_live_hmem()}))
    ''')
    env = dict(os.environ, **standins)
    proc = subprocess.run([sys.executable, "-c", code, "4000", str(THREADS)],
                          env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    live = json.loads(proc.stdout.strip().splitlines()[-1])
    assert live == {"cuda_allocations": 0, "cuda_events": 0, "ve_hmem": 0}


# ---- the per-type capability cache under concurrent first use -------------

DEVICE = int(BufferFlags.DEVICE)
FORMAT = int(BufferFlags.FORMAT)
EXTENDED = 0x7FFF0000
DECLARATIONS = [None, 0, -1, 0x1FD | DEVICE, 0x1FD, 0x1C | DEVICE,
                0x1, "bad", 2**40, True]


def _expected_mask(declared: Any) -> int:
    if declared is None or declared == 0 and not isinstance(declared, bool):
        return 0x1FD
    if (isinstance(declared, bool) or not isinstance(declared, int)
            or declared < -1 or declared > 2**31 - 1 or declared == -1):
        return 0
    return declared & ~EXTENDED       # no typed entry: a Python class


def _make_types(count: int) -> List[type]:
    types = []
    for i in range(count):
        declared = DECLARATIONS[i % len(DECLARATIONS)]
        namespace: Dict[str, Any] = {}
        if declared is not None:
            namespace["__buffer_supported_flags__"] = declared
        types.append(type(f"Fresh{i}", (bytearray,), namespace))
    return types


@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_cache_concurrent_first_use() -> None:
    """Many types seen for the first time by many threads at once, more
    types than cache entries: every answer of check_buffer_supports and
    every get_buffer outcome is the one the declaration implies."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        types = _make_types(400)
        objects = [tp(b"abcd") for tp in types]
        masks = [_expected_mask(tp.__dict__.get("__buffer_supported_flags__"))
                 for tp in types]
        probes = [0x1, 0x4, 0x8, 0x1C, DEVICE, 0x1C | DEVICE, 0x100]
        barrier = threading.Barrier(THREADS)
        wrong: List[Any] = []

        def work(seed: int) -> None:
            order = list(range(len(objects)))
            random.Random(seed).shuffle(order)
            barrier.wait()
            for k in order:
                obj, mask = objects[k], masks[k]
                for flags in probes:
                    got = bufferext.check_buffer_supports(obj, flags)
                    if got != ((flags & ~mask) == 0):
                        wrong.append((type(obj).__name__, flags, got))
                request = int(BufferFlags.FULL_RO | BufferFlags.DEVICE)
                try:
                    bufferext.get_buffer(obj, request).release()
                    ok = (request & 0xFD & ~mask) == 0
                except BufferError:
                    ok = (request & 0xFD & ~mask) != 0
                if not ok:
                    wrong.append((type(obj).__name__, "get_buffer"))

        threads = [threading.Thread(target=work, args=(s,))
                   for s in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert wrong == []
    finally:
        sys.setswitchinterval(old)


@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_cache_never_keeps_a_declaration_changed_during_its_lookup() -> None:
    """One thread changes a type's declaration while others look it up: a
    value read before the change must never be cached under the type's new
    version tag (the answer after the last change must be the new one).
    The lookup itself runs no Python code (the declaration is read from the
    MRO's dictionaries), so the switches come between bytecodes of the
    readers, as often as a 1 us switch interval allows.  FORMAT tells the
    two declarations apart."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for round_ in range(20):
            Declared = type(f"Declared{round_}", (bytearray,),
                            {"__buffer_supported_flags__": 0x1F9})
            obj = Declared(b"xy")
            stop = threading.Event()

            def readers() -> None:
                while not stop.is_set():
                    bufferext.check_buffer_supports(obj, FORMAT)

            pool = [threading.Thread(target=readers) for _ in range(4)]
            for t in pool:
                t.start()
            for value in [0x1FD, 0x1F9] * 25:
                Declared.__buffer_supported_flags__ = value   # a new tag
                time.sleep(0)
            Declared.__buffer_supported_flags__ = 0x1FD
            stop.set()
            for t in pool:
                t.join()
            assert bufferext.check_buffer_supports(obj, FORMAT), round_
            Declared.__buffer_supported_flags__ = 0x1F9
            assert not bufferext.check_buffer_supports(obj, FORMAT), round_
    finally:
        sys.setswitchinterval(old)


# ---- the serialisation rules of docs/platforms.rst ---------------------------
# With the GIL these hold by construction; they are the tests a free-threaded
# run must pass before the module may declare Py_MOD_GIL_NOT_USED.

def _race(target: Any, count: int = THREADS) -> List[Any]:
    """Run target(i) in `count` threads started together; their results or
    exceptions, in order."""
    results: List[Any] = [None] * count
    barrier = threading.Barrier(count)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = target(i)
        except Exception as exc:           # the outcome under test
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# The freelists of dead views, bound methods and DLPack holders
# (Modules/freelist.h): one per kind and thread without the GIL, freed with
# the thread's state, under this key of its dict; one per kind with it.
FREELISTS_KEY = "bufferext._bufferext.freelists"
FREE_THREADED = not getattr(sys, "_is_gil_enabled", lambda: True)()
# What the freelists' child scripts share: the key, whether the GIL is off,
# this thread's state dict (a borrowed reference: read through a pointer,
# not taken as py_object), and the memory that n threads running `target`
# one after another leave behind (traced from then on).
FREELISTS_CHILD = f"""
import ctypes, sys, threading, tracemalloc
import numpy as np
import bufferext

KEY = {FREELISTS_KEY!r}
ft = not getattr(sys, "_is_gil_enabled", lambda: True)()
a = np.zeros(4)
get_dict = ctypes.pythonapi.PyThreadState_GetDict
get_dict.restype = ctypes.c_void_p

def state():
    return ctypes.cast(get_dict(), ctypes.py_object).value

def leaves(target, n):
    def threads(k):
        for _ in range(k):
            t = threading.Thread(target=target)
            t.start()
            t.join()

    threads(5)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    threads(n)
    return tracemalloc.get_traced_memory()[0] - before
"""
FREELISTS = FREELISTS_CHILD + r"""
cpu = bufferext.CPUBuffer(4)

def work():
    # 40 of each kind alive at once, then dead: the lists keep 16 each
    views = [bufferext.get_buffer(a) for _ in range(40)]
    for v in views:
        with v:
            pass
    capsules = [cpu.__dlpack__() for _ in range(40)]
    del views, capsules

print("threads", leaves(work, 100))

# another library takes the key out of this thread's state dict
work()
print("kept under the state", (KEY in state()) == ft)
before = tracemalloc.get_traced_memory()[0]
state().pop(KEY, None)
print("freed", before - tracemalloc.get_traced_memory()[0])
work()
print("kept again", (KEY in state()) == ft)
state().clear()
work()
with bufferext.get_buffer(a) as v:
    print("works", v.shape)
"""


def test_threads_leave_no_kept_objects_behind() -> None:
    """Each thread's freelists (without the GIL) go with its state: a
    hundred threads that each leave 16 dead objects of each kind behind
    leave no memory; another library removing the lists' key from the
    state's dict (or clearing it) frees them at once, and the next
    allocation makes new ones."""
    out = run_child(FREELISTS)
    lines = dict(line.rsplit(" ", 1) for line in out.splitlines())
    # kept and not freed, a hundred threads would leave about 1 MB
    assert int(lines["threads"]) < 64 * 1024, out
    assert lines["kept under the state"] == "True"
    assert lines["kept again"] == "True"
    assert lines["works"] == "(4,)"
    if FREE_THREADED:
        # 16 views, 16 bound methods and 16 holders freed at once
        assert int(lines["freed"]) > 16 * 200, out


REENTERED = FREELISTS_CHILD + r"""
import contextvars

class Planted:
    # put under the lists' key by another library: dropped when bufferext
    # stores its lists there, and allocating from them as it goes
    def __init__(self, remove):
        self.remove = remove
    def __del__(self):
        if self.remove:
            state().pop(KEY, None)
        with bufferext.get_buffer(a):
            pass

def planted(remove):
    state()[KEY] = Planted(remove)
    for _ in range(1000):
        with bufferext.get_buffer(a):
            pass

for remove in (False, True):
    t = threading.Thread(target=planted, args=(remove,))
    t.start()
    t.join()
print("planted ok")

# a finalizer the thread state's clearing runs after its dict went
cv = contextvars.ContextVar("cv")

class Late:
    def __del__(self):
        with bufferext.get_buffer(a):
            pass

def late():
    with bufferext.get_buffer(a):
        pass
    cv.set(Late())

print("late", leaves(late, 300) // 300)
"""


def test_code_run_inside_the_lists_making_and_the_states_end() -> None:
    """Python code that runs while a thread's freelists are made (an object
    another library put under their key, dropped when they are stored
    there, allocating from them or removing the key as it goes) and after
    the thread state's dict went (a context variable's finalizer, which
    PyThreadState_Clear runs later): no use after free, and no state
    dict made again that nothing frees (about 1.2 KB per thread before)."""
    out = run_child(REENTERED)
    lines = out.splitlines()
    assert lines[0] == "planted ok", out
    per_thread = int(lines[1].split()[1])
    assert per_thread < 200, out


TOGETHER = FREELISTS_CHILD + r"""
THREADS = 16
get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
get_pointer.restype = ctypes.c_void_p
get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
start, end = threading.Barrier(THREADS), threading.Barrier(THREADS)
lists = [None] * THREADS
interned = [False] * THREADS
sys.intern(KEY)                         # the interned copy, made first

def first(i):
    start.wait()
    with bufferext.get_buffer(a):       # this thread's first allocation
        pass
    if KEY in state():
        lists[i] = get_pointer(state()[KEY], KEY.encode())
        # the key bufferext stored: interned, it would be the copy above
        interned[i] = any(k is sys.intern(k) for k in state() if k == KEY)
    end.wait()                          # all alive: no lists freed yet

threads = [threading.Thread(target=first, args=(i,)) for i in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
made = [p for p in lists if p is not None]
print("made", len(made), "distinct", len(set(made)), "interned",
      sum(interned), "ft", ft)
"""


def test_threads_started_together_make_their_lists_together() -> None:
    """Sixteen threads released at once, each making its first object in a
    fresh process: without the GIL each makes lists of its own, under the
    thread state's dict, at the same moment as the others, under a key
    that is not interned (interning one new str from many threads at once
    races in 3.13's intern_common, python/cpython#129701, which the CI's
    ThreadSanitizer step met); with the GIL none are made."""
    out = run_child(TOGETHER)
    made = 16 if FREE_THREADED else 0
    assert out.split() == [
        "made", str(made), "distinct", str(made), "interned", "0",
        "ft", str(FREE_THREADED)], out


def test_daemon_threads_with_kept_objects_at_exit() -> None:
    """Daemon threads still making views while the interpreter exits: their
    states are cleared by the exiting thread, which may not touch their
    lists (marked let go instead); the process exits cleanly."""
    out = run_child(FREELISTS_CHILD + r"""
import time

def spin():
    while True:
        views = [bufferext.get_buffer(a) for _ in range(20)]
        for v in views:
            with v:
                pass

for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
time.sleep(0.3)
print("exit")
""", timeout=120)
    assert out == "exit\n", out


def test_view_release_from_many_threads_releases_once() -> None:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for _ in range(200):
            buf = bufferext.CPUBuffer(16)
            view = bufferext.get_buffer(buf)
            assert buf.exports == 1
            results = _race(lambda i: view.release())
            assert results == [None] * THREADS
            assert view.released and buf.exports == 0
    finally:
        sys.setswitchinterval(old)


def test_close_against_exports_never_frees_exported_memory() -> None:
    """Threads export while one closes: every export either happened
    before the close (which then refuses) or is refused as closed."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for _ in range(100):
            buf = bufferext.CPUBuffer(1024)

            def act(i: int) -> Any:
                if i == 0:
                    return buf.close()
                with bufferext.get_buffer(buf) as view:
                    return view.ptr

            results = _race(act)
            closed = results[0] is None
            for r in results[1:]:
                assert isinstance(r, int) or (
                    isinstance(r, BufferError) and "closed" in str(r)), r
            if not closed:
                assert isinstance(results[0], BufferError)
                assert "export" in str(results[0])
                buf.close()
            assert buf.exports == 0 and buf.closed
    finally:
        sys.setswitchinterval(old)


def test_exports_counted_on_one_thread_released_on_another() -> None:
    """The thread that made a buffer counts its own exports apart from the
    others' (exports.h, free-threaded builds): an export counted by one
    and released by the other still adds up, and close sees every one."""
    buf = bufferext.CPUBuffer(16)            # made here: this thread owns it
    mine = [bufferext.get_buffer(buf) for _ in range(3)]
    theirs: List[Any] = []
    t = threading.Thread(target=lambda: theirs.append(
        bufferext.get_buffer(buf)))
    t.start()
    t.join()
    assert buf.exports == 4
    releasers = [threading.Thread(target=v.release) for v in mine]
    for t in releasers:
        t.start()
    for t in releasers:
        t.join()
    assert buf.exports == 1
    with pytest.raises(BufferError, match="close while 1 export"):
        buf.close()
    theirs[0].release()                      # counted there, released here
    assert buf.exports == 0
    buf.close()
    assert buf.closed


def test_owner_exports_while_another_thread_resizes_and_closes() -> None:
    """The owner exports without the lock while another thread resizes and
    then closes: a view never sees a resize or a close while it is held,
    and each change either waits for no export or is refused by name."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for _ in range(20):
            buf = bufferext.CPUBuffer((64,), "f8")
            done = threading.Event()
            wrong: List[BaseException] = []     # what the changer met

            def change() -> None:
                r = random.Random(7)
                try:
                    while not done.is_set():
                        try:
                            buf.resize((r.choice((32, 64, 128)),))
                        except BufferError as e:
                            if "resize while" not in str(e):
                                raise
                    while True:
                        try:
                            buf.close()
                            return
                        except BufferError as e:
                            if "close while" not in str(e):
                                raise
                except BaseException as e:   # reported, never lost
                    wrong.append(e)

            other = threading.Thread(target=change)
            other.start()
            for _ in range(300):
                try:
                    view = bufferext.get_buffer(buf)
                except BufferError as e:     # the changer had the object
                    assert "closing or resizing" in str(e), e
                    continue
                shape = view.shape
                assert view.nbytes == shape[0] * 8
                assert buf.shape == shape and not buf.closed
                assert buf.exports >= 1
                view.release()
            done.set()
            other.join()
            assert wrong == []
            assert buf.closed and buf.exports == 0
    finally:
        sys.setswitchinterval(old)


# A capsule is taken once: of N threads importing the same DLPack or Arrow
# capsule at once (released together by _race's barrier), exactly one gets
# the tensor or array, every other one the error a second import gets in
# sequence, and the producer's deleter or release runs once.  With the GIL
# an import is one step; without it (3.13t) the capsule's critical section
# makes the check and the take one.  Every interleaving must give this, so
# the rounds only add chances for a broken take to show.

CAPSULE_ROUNDS = 150


def _one_taker(results: List[Any], refusal: str) -> Any:
    """The one adapter among the results; every other result is the
    BufferError of an import of a consumed capsule."""
    adapters = [r for r in results
                if isinstance(r, bufferext.BufferAdapter)]
    others = [r for r in results
              if not isinstance(r, bufferext.BufferAdapter)]
    assert len(adapters) == 1, results
    for r in others:
        assert isinstance(r, BufferError) and refusal in str(r), r
    return adapters[0]


@pytest.mark.parametrize("versioned", [True, False])
def test_one_dlpack_capsule_imported_by_many_threads_is_taken_once(
        versioned: bool) -> None:
    from _dlpack_ctypes import Crafted, PyCapsule_GetName
    take = bufferext._bufferext._adapter_from_dlpack
    used = b"used_dltensor_versioned" if versioned else b"used_dltensor"
    tensors = []
    for _ in range(CAPSULE_ROUNDS):
        crafted = Crafted(shape=(8,), nbytes=8, versioned=versioned)
        tensors.append(crafted)
        capsule = crafted.capsule()
        results = _race(lambda i: take(None, capsule, None))
        _one_taker(results, "a consumed capsule cannot be used twice")
        assert PyCapsule_GetName(capsule) == used
        assert crafted.deleted == 0
    del results
    gc.collect()                               # the adapters are gone
    assert [t.deleted for t in tensors] == [1] * CAPSULE_ROUNDS


def test_one_exported_dlpack_capsule_imported_by_many_threads() -> None:
    """The same with a capsule of our own exporter: its export is given
    back once (a second deleter call would free the holder twice)."""
    take = bufferext._bufferext._adapter_from_dlpack
    bufs = []
    for _ in range(CAPSULE_ROUNDS):
        buf = bufferext.CPUBuffer((4,), "i4")
        bufs.append(buf)
        capsule = buf.__dlpack__()
        assert buf.exports == 1
        results = _race(lambda i: take(buf, capsule, None))
        _one_taker(results, "used_dltensor")
        assert buf.exports == 1
    del results, capsule
    gc.collect()
    assert [b.exports for b in bufs] == [0] * CAPSULE_ROUNDS


@pytest.mark.parametrize("device", [False, True])
def test_one_arrow_array_imported_by_many_threads_is_taken_once(
        device: bool) -> None:
    """Arrow capsules of our exporter (the array's release gives the
    export back): one import moves the array, the others find it
    released."""
    take = bufferext._bufferext._adapter_from_arrow
    bufs = []
    for _ in range(CAPSULE_ROUNDS):
        buf = bufferext.CPUBuffer((4,), "i4")
        bufs.append(buf)
        schema, array = (buf.__arrow_c_device_array__() if device
                         else buf.__arrow_c_array__())
        assert buf.exports == 1
        results = _race(lambda i: take(buf, schema, array, device, None))
        adapter = _one_taker(results, "released array (a capsule can be "
                                      "imported once)")
        assert buf.exports == 1
        assert bytes(memoryview(adapter)) == bytes(16)
    del adapter, results, schema, array
    gc.collect()                               # each array released once
    assert [b.exports for b in bufs] == [0] * CAPSULE_ROUNDS


# ---- threads that change what the others read ------------------------------
# Every mutating operation in reach of Python code, from N threads at once,
# on the same exporters: export and release, close, resize, copy,
# copy_from_host, every getter and repr, pickling, as_buffer, a
# DistArray in one process, and check_buffer_supports / get_buffer while a
# class changes its __buffer_supported_flags__.  Without the GIL (3.13t) the
# threads run in parallel; .ci/freethreaded.sh runs this under
# ThreadSanitizer (BUFFEREXT_HOSTILE_OPS larger), where 0 race reports in
# bufferext's code are allowed.

HOSTILE_OPS = int(os.environ.get("BUFFEREXT_HOSTILE_OPS", "6000"))

HOSTILE = r'''
import gc, json, os, pickle, random, sys, threading, time
import numpy as np
import bufferext
from bufferext import BufferFlags, CPUBuffer, as_buffer, get_buffer
from bufferext.distarray import DistArray

OPS, THREADS = int(sys.argv[1]), int(sys.argv[2])
if hasattr(sys, "_is_gil_enabled"):
    print("gil", sys._is_gil_enabled(), file=sys.stderr)
sys.setswitchinterval(1e-5)
REFUSED = (ValueError, BufferError, TypeError)

class Flip(bytearray):
    __buffer_supported_flags__ = 0

def fresh(k):
    kind = k % 4
    if kind == 0:
        return CPUBuffer((8, 4), "f8")
    if kind == 1:
        return CPUBuffer((16,), "u1", readonly=True)
    if kind == 2:
        return bufferext.CUDABuffer((4, 4), "f4")
    return bufferext.VEBuffer((3, 5), "i4")

slots = [fresh(k) for k in range(8)]
numpy_src = np.arange(12.0)
views = []                       # BufferViews shared between threads
views_lock = threading.Lock()
ops_done = [0] * THREADS          # per thread: no lost updates without
refused = [0] * THREADS          # the GIL
errors = []
barrier = threading.Barrier(THREADS)

def op_export(b, r):
    v = get_buffer(b, BufferFlags.FULL_RO | BufferFlags.DEVICE)
    assert v.nbytes == int(np.prod(v.shape)) * v.itemsize
    if r.random() < 0.5:
        with views_lock:
            views.append(v)
    else:
        v.release()

def op_release(b, r):
    with views_lock:
        v = views.pop() if views else None
    if v is not None:
        v.release()

def op_view_read(b, r):
    with views_lock:
        v = views[r.randrange(len(views))] if views else None
    if v is not None:
        repr(v); v.shape; v.strides; v.format; v.device_info; v._raw()
        if v.device is None:
            assert len(v.tobytes()) == v.nbytes

def op_memoryview(b, r):
    with memoryview(b) as m:
        assert len(m.tobytes()) == m.nbytes

def op_close(b, r):
    b.close()

def op_replace(b, r):
    slots[r.randrange(len(slots))] = fresh(r.randrange(4))

def op_resize(b, r):
    if isinstance(b, CPUBuffer):
        b.resize(r.choice([(3,), (2, 2, 2), (64, 3), (0,)]))

def op_copy(b, r):
    c = b.copy() if isinstance(b, CPUBuffer) else b.to_host()
    assert c.nbytes == int(np.prod(c.shape)) * c.itemsize

def op_copy_from_host(b, r):
    b.copy_from_host(bytes(b.nbytes))

def op_read(b, r):
    repr(b); b.shape; b.strides; b.nbytes; b.exports; b.closed; b.ptr
    for name in ("__array_interface__", "__cuda_array_interface__",
                 "__ve_array_interface__"):
        getattr(b, name, None)

def op_to_host(b, r):
    b.to_host()

def op_pickle(b, r):
    pickle.loads(pickle.dumps(b, 5))

def op_as_buffer(b, r):
    a = as_buffer(b, readonly=True)
    with get_buffer(a) as v:
        assert v.nbytes == int(np.prod(v.shape)) * v.itemsize

def op_dlpack(b, r):
    b.__dlpack__(max_version=(1, 0))      # VEBuffer: BufferError

def op_flip(b, r):
    Flip.__buffer_supported_flags__ = r.choice([0, -1, 0x1FD, 0x1C, 3])

def op_flipped(b, r):
    x = Flip(b"abcd")
    ok = bufferext.check_buffer_supports(x, int(BufferFlags.ND))
    try:
        get_buffer(x, BufferFlags.ND).release()
    except BufferError:
        pass
    bufferext.supported_flags(x)

def op_numpy_adapter(b, r):
    a = as_buffer(numpy_src)
    with get_buffer(a) as v:
        assert len(v.tobytes()) == 96

def op_distarray(b, r):
    d = DistArray.from_global(np.arange(24.0).reshape(4, 6),
                              dist=("b", "c"), grid_shape=(1, 1), rank=0)
    out = d.redistribute(dist=("n", "b"))
    assert out.local.sum() == 276.0
    DistArray.from_distarray(d.__distarray__())

OPS_TABLE = [op_export, op_export, op_release, op_view_read, op_memoryview,
             op_close, op_replace, op_resize, op_copy, op_copy_from_host,
             op_read, op_read, op_to_host, op_pickle, op_as_buffer,
             op_dlpack, op_flip, op_flipped, op_numpy_adapter, op_distarray]

def work(index):
    r = random.Random(index)
    try:
        barrier.wait()
        for i in range(OPS // THREADS):
            op = r.choice(OPS_TABLE)
            b = slots[r.randrange(len(slots))]
            try:
                op(b, r)
            except REFUSED:
                refused[index] += 1
            ops_done[index] += 1
    except BaseException as exc:
        import traceback
        errors.append(traceback.format_exc())

start = time.perf_counter()
threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
for t in threads: t.start()
for t in threads: t.join()
elapsed = time.perf_counter() - start
for v in views:
    v.release()
views.clear()
gc.collect()
left = {repr(b): b.exports for b in slots if b.exports}
for b in slots:
    b.close()
print(json.dumps({"ops": sum(ops_done), "refused": sum(refused),
                  "errors": errors, "left": left, "elapsed": elapsed}))
'''


def run_hostile(standins: Dict[str, str], ops: int, threads: int,
                python: str = sys.executable,
                env: Dict[str, str] | None = None) -> Dict[str, Any]:
    """The hostile stress in a child; its summary."""
    child_env = dict(os.environ, **standins, **(env or {}))
    proc = subprocess.run([python, "-c", HOSTILE, str(ops), str(threads)],
                          env=child_env, capture_output=True, text=True,
                          timeout=3000)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["stderr"] = proc.stderr
    return result


def test_threads_that_change_what_others_read(standins: Dict[str, str]
                                              ) -> None:
    result = run_hostile(standins, HOSTILE_OPS, THREADS)
    assert result["errors"] == [], result["errors"][0]
    assert result["left"] == {}, result["left"]
    assert result["ops"] == HOSTILE_OPS // THREADS * THREADS
    assert 0 < result["refused"] < result["ops"]
    print(f"\n{result['ops']} operations ({result['refused']} refused) in "
          f"{result['elapsed']:.1f} s, {THREADS} threads")


def test_header_consumer_from_many_threads(c99: Any) -> None:
    """The header's inline cache and dispatch (tests/capi/testcapi.c, built
    with the header alone, free-threaded where the interpreter is) from
    many threads at once, while one thread keeps changing a class's
    declaration: every answer is one the declarations allow, every export
    is released.  On 3.13t this runs in parallel (and under TSan in CI)."""
    class Flip(bytearray):
        __buffer_supported_flags__ = 0

    masks = [0, -1, int(BufferFlags.ND), 0x1FD]
    nd = int(BufferFlags.ND)
    objects = [bufferext.CPUBuffer((4, 4), "u1"), bytearray(16),
               Flip(b"abcd"), np.arange(6)]
    stop = threading.Event()
    problems: List[str] = []

    def flipper() -> None:
        r = random.Random(0)
        while not stop.is_set():
            Flip.__buffer_supported_flags__ = r.choice(masks)

    def consumer(k: int) -> None:
        try:
            for i in range(300):
                obj = objects[(i + k) % len(objects)]
                yes = c99.check_loop(obj, nd, 20)
                if obj is not objects[2] and yes != 20:
                    problems.append(f"{type(obj).__name__}: {yes}/20")
                try:
                    c99.acquire_loop(obj, nd | int(BufferFlags.DEVICE), 5)
                except BufferError:
                    if obj is not objects[2]:
                        raise
        except Exception as exc:  # noqa: BLE001 - reported below
            problems.append(repr(exc))

    threads = [threading.Thread(target=flipper)] + [
        threading.Thread(target=consumer, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    stop.set()
    threads[0].join()
    assert problems == []
    assert objects[0].exports == 0
