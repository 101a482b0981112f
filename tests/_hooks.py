"""Hooks: objects through which Python code runs *inside* a bufferext
operation, at the points docs/reentrancy.rst lists (the re-entrancy table).

Each hook runs ``action()`` once (or every time), where the operation
consumes it:

* :class:`Index` -- ``__index__`` of a shape item, flag or device number;
* :func:`in_gc` -- a finalizer the garbage collector fires at each
  collection inside a block, made as frequent as CPython makes them
  (``gc.set_threshold(1)``), and :func:`in_gc_callback` -- a
  ``gc.callbacks`` entry, at the same moments;
* :class:`DtypeLike` -- the ``dtype`` attribute numpy's dtype resolution
  reads;
* :class:`BufferHook` -- a ``__buffer__`` method (PEP 688, 3.12+);
* :class:`ArrayInterfaceHook`, :class:`DLPackHook`, :class:`CAIHook`,
  :class:`ArrowHook` -- the ``__array_interface__`` /
  ``__cuda_array_interface__`` properties and the ``__dlpack__`` /
  ``__dlpack_device__`` / ``__arrow_c_device_array__`` methods
  ``as_buffer`` calls.

An action's own exceptions are recorded in :attr:`Fired.errors`, never
raised into the operation (a finalizer's would be unraisable anyway).
"""

from __future__ import annotations

import contextlib
import gc
import sys
import sysconfig
from typing import Any, Callable, Iterator, List, Optional

import numpy as np

Action = Callable[[], Any]


class Fired:
    """What happened to an armed hook: how often it ran, what it raised."""

    def __init__(self) -> None:
        self.count = 0
        self.armed = True
        self.errors: List[BaseException] = []

    def run(self, action: Action) -> None:
        self.count += 1
        try:
            action()
        except Exception as exc:   # noqa: BLE001 - recorded for the test
            self.errors.append(exc)


class Index:
    """An int-like whose ``__index__`` runs ``action`` (every call) first."""

    def __init__(self, value: int, action: Action,
                 fired: Optional[Fired] = None) -> None:
        self.value, self.action = value, action
        self.fired = fired or Fired()

    def __index__(self) -> int:
        self.fired.run(self.action)
        return self.value

    __int__ = __index__


class _Bomb:
    """Garbage in a reference cycle: its finalizer runs ``action`` and,
    until ``times`` runs are done, leaves another bomb behind for the next
    collection."""

    def __init__(self, action: Action, fired: Fired, times: int) -> None:
        self.action, self.fired, self.times = action, fired, times
        self.cycle = self

    def __del__(self) -> None:
        if self.fired.armed and self.fired.count < self.times:
            self.fired.run(self.action)
            _Bomb(self.action, self.fired, self.times)


@contextlib.contextmanager
def _collecting(times: int) -> Iterator[None]:
    """Collections as often as CPython makes them (threshold 1: every
    second allocation of a GC object), restored afterwards.  Before 3.12 a
    collection runs inside the allocation itself; from 3.12 it runs at the
    next bytecode, so inside an operation only where the operation runs
    Python code (a dtype resolver, an __index__, a helper)."""
    thresholds = gc.get_threshold()
    was_enabled = gc.isenabled()
    gc.collect()
    gc.enable()
    gc.set_threshold(1, 1, 1)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if not was_enabled:
            gc.disable()


@contextlib.contextmanager
def in_gc(action: Action, times: int = 8) -> Iterator[Fired]:
    """Run ``action`` from a finalizer at each of the first ``times``
    collections inside the block (see _collecting for when they happen)."""
    fired = Fired()
    with _collecting(times):
        _Bomb(action, fired, times)
        try:
            yield fired
        finally:
            fired.armed = False
    gc.collect()


@contextlib.contextmanager
def in_gc_callback(action: Action, times: int = 8) -> Iterator[Fired]:
    """Run ``action`` from a ``gc.callbacks`` entry at each of the first
    ``times`` collections inside the block (the moments of :func:`in_gc`)."""
    fired = Fired()

    def callback(phase: str, info: Any) -> None:
        if phase == "start" and fired.armed and fired.count < times:
            fired.run(action)

    with _collecting(times):
        gc.callbacks.append(callback)
        try:
            yield fired
        finally:
            fired.armed = False
            gc.callbacks.remove(callback)


class DtypeLike:
    """What numpy's dtype resolution reads: its ``dtype`` attribute runs
    ``action`` first, then names ``dtype``."""

    def __init__(self, dtype: Any, action: Action) -> None:
        self._dtype, self.action = dtype, action
        self.fired = Fired()

    @property
    def dtype(self) -> Any:
        self.fired.run(self.action)
        return np.dtype(self._dtype)


class BufferHook:
    """A PEP 688 exporter (3.12+): ``__buffer__`` runs ``action``, then
    returns a memoryview of ``target``."""

    def __init__(self, target: Any, action: Action) -> None:
        self.target, self.action = target, action
        self.fired = Fired()

    def __buffer__(self, flags: int) -> memoryview:
        self.fired.run(self.action)
        return memoryview(self.target)

    def __release_buffer__(self, view: memoryview) -> None:
        self.fired.run(self.action)
        view.release()


class ArrowHook:
    """``__arrow_c_device_array__`` runs ``action`` before and after asking
    ``target`` for its capsules (the action may close or resize the object
    the capsules came from, or drop them)."""

    def __init__(self, target: Any, action: Action) -> None:
        self.target, self.action = target, action
        self.fired = Fired()

    def __arrow_c_device_array__(self, requested_schema: Any = None,
                                 **kwargs: Any) -> Any:
        self.fired.run(self.action)
        capsules = self.target.__arrow_c_device_array__(requested_schema)
        self.fired.run(self.action)
        return capsules


class ArrayInterfaceHook:
    """``__array_interface__`` runs ``action``, then describes ``array``
    (a numpy array this object keeps alive)."""

    def __init__(self, array: np.ndarray, action: Action) -> None:
        self.array, self.action = array, action
        self.fired = Fired()

    @property
    def __array_interface__(self) -> Any:
        self.fired.run(self.action)
        return self.array.__array_interface__


class DLPackHook:
    """``__dlpack__`` and ``__dlpack_device__`` run ``action``, then answer
    for ``array`` (anything with ``__dlpack__``)."""

    def __init__(self, array: Any, action: Action) -> None:
        self.array, self.action = array, action
        self.fired = Fired()

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.fired.run(self.action)
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        self.fired.run(self.action)
        return self.array.__dlpack_device__()


class CAIHook:
    """``__cuda_array_interface__`` runs ``action``, then returns ``cai``."""

    def __init__(self, cai: Any, action: Action) -> None:
        self.cai, self.action = cai, action
        self.fired = Fired()

    @property
    def __cuda_array_interface__(self) -> Any:
        self.fired.run(self.action)
        return self.cai


PEP688 = sys.version_info >= (3, 12)
#: Whether threshold-driven collections happen as often as the hooks ask:
#: a free-threaded build (3.13t) also waits for the heap to grow by a
#: quarter, so a finalizer hook may not fire at all there (its threads do
#: the hostile work instead: tests/test_threads.py).
GC_FIRES = not sysconfig.get_config_var("Py_GIL_DISABLED")
