"""What a Python subclass of ``CPUBuffer`` adds to an instance, carried by
pickle and copy.

``CPUBuffer.__reduce_ex__`` puts :func:`state` into its reduce tuple, which
pickle's BUILD step restores (through the subclass's ``__setstate__`` if it
has one); ``copy()``, ``__copy__`` and ``__deepcopy__`` call
:func:`copy_into`.  The C side fetches these by name on first use, and only
for subclasses: an exact ``CPUBuffer`` holds nothing of its own.  The rules
are pickle's own (``object.__getstate__`` from 3.11, ``copyreg`` before).
"""

from __future__ import annotations

import copy
import copyreg
import sys
from typing import Any, Dict, Optional

__all__ = ["copy_into", "restore", "state"]


def state(obj: Any) -> Any:
    """The instance state pickle would save for ``obj``: what its class's
    ``__getstate__`` returns, else its ``__dict__`` and ``__slots__`` as
    ``object.__getstate__`` gives them (``None`` when there are none)."""
    if sys.version_info >= (3, 11):
        return obj.__getstate__()
    getstate = getattr(type(obj), "__getstate__", None)
    if getstate is not None:
        return getstate(obj)
    own = getattr(obj, "__dict__", None) or None
    slots: Dict[str, Any] = {}
    for name in getattr(copyreg, "_slotnames")(type(obj)):  # not typeshed's
        try:
            slots[name] = getattr(obj, name)
        except AttributeError:
            pass
    if slots:
        return (own, slots)
    return own


def restore(obj: Any, saved: Any) -> None:
    """Give ``obj`` the state ``saved``, as pickle's BUILD step does."""
    if saved is None:
        return
    setstate = getattr(type(obj), "__setstate__", None)
    if setstate is not None:
        setstate(obj, saved)
        return
    slots: Optional[Dict[str, Any]] = None
    if isinstance(saved, tuple) and len(saved) == 2:
        saved, slots = saved
    if saved:
        obj.__dict__.update(saved)
    for name, value in (slots or {}).items():
        setattr(obj, name, value)


def copy_into(source: Any, target: Any, memo: Optional[Dict[int, Any]]) -> None:
    """Give ``target`` (a fresh copy of ``source``'s memory) its state:
    shallow when ``memo`` is None (``copy.copy``), else deep, with
    ``copy.deepcopy``'s ``memo`` (where ``source`` already maps to
    ``target``, so that the state may refer back to the buffer)."""
    saved = state(source)
    if saved is None:
        return
    if memo is not None:
        memo[id(source)] = target
        saved = copy.deepcopy(saved, memo)
    restore(target, saved)
