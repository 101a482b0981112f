"""Build the stand-in CUDA driver (a test double) and run code against it.

The driver table loads once per process, so every case runs in a fresh
interpreter with ``BUFFEREXT_CUDA_DRIVER`` pointing at the stand-in.  The
child wraps the case in a function, then checks that the stand-in has no
live allocation, stream, event, retained context, pushed context or
pending (late) write left.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from typing import Dict, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "standin_cuda.c")


def build(directory: str) -> str:
    """Compile the stand-in into ``directory``; return the library path."""
    compiler = os.environ.get("CC") or shutil.which("gcc") or "cc"
    target = os.path.join(directory, "libstandin_cuda.so")
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-std=c11", "-Wall", "-Wextra",
         "-Werror", "-o", target, SOURCE, "-lpthread"],
        check=True)
    return target


# A child's `raises`, pytest.raises as the cases use it (the type or a
# tuple of types, match= searched in str() of the exception, .value after
# the block): importing pytest would cost each child 0.3 s, more than most
# cases take.
RAISES = '''
import re as _re


class raises:
    def __init__(self, expected, match=None):
        self.expected, self.match, self.value = expected, match, None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            raise AssertionError(f"DID NOT RAISE {self.expected}")
        if not issubclass(kind, self.expected):
            return False
        if self.match is not None and not _re.search(self.match, str(value)):
            raise AssertionError(
                f"Regex {self.match!r} does not match {str(value)!r}"
            ) from value
        self.value = value
        return True
'''

PRELUDE = RAISES + '''
import ctypes, gc, os, sys
import numpy as np
import bufferext
from bufferext import BufferFlags, CUDABuffer, DeviceUnavailableError

sd = ctypes.CDLL(os.environ["BUFFEREXT_CUDA_DRIVER"])
for _name in ("standin_last_wait_stream", "standin_last_wait_event"):
    getattr(sd, _name).restype = ctypes.c_void_p
sd.standin_calls.argtypes = [ctypes.c_char_p]
sd.standin_event_records.argtypes = [ctypes.c_void_p]
sd.standin_is_device_pointer.argtypes = [ctypes.c_ulonglong]
sd.standin_pending_work.restype = ctypes.c_long
sd.standin_hold.argtypes = [ctypes.c_char_p]
sd.standin_wait_held.argtypes = [ctypes.c_long]
sd.standin_wait_held.restype = ctypes.c_long

def calls(name):
    return sd.standin_calls(name.encode())

def live():
    return {"allocations": sd.standin_live_allocations(),
            "streams": sd.standin_live_streams(),
            "events": sd.standin_live_events(),
            "contexts": sd.standin_context_refs(),
            "pushed": sd.standin_context_depth(),
            "pending": sd.standin_pending_work()}

NOTHING = {"allocations": 0, "streams": 0, "events": 0, "contexts": 0,
           "pushed": 0, "pending": 0}


import contextlib as _contextlib, threading as _threading


@_contextlib.contextmanager
def stopped_in(entry, call):
    # call() runs in a thread, which the block finds stopped inside the
    # driver's `entry` (where bufferext calls it without the GIL: one that
    # held the GIL there would leave this thread waiting until the
    # harness's timeout fails the case).  Yields the outcome: [] while it
    # is stopped, then ["done"] or [repr of what it raised] once the block
    # has let it go and joined it.
    outcome = []

    def run():
        try:
            call()
            outcome.append("done")
        except BaseException as exc:
            outcome.append(repr(exc))
        finally:
            sd.standin_let_go()         # a failure before the hold must
                                        # not leave this thread waiting
    sd.standin_hold(entry.encode())
    thread = _threading.Thread(target=run)
    thread.start()
    try:
        assert sd.standin_wait_held(1) == 1, outcome
        assert outcome == [] and thread.is_alive(), outcome
        yield outcome
    finally:
        sd.standin_let_go()
        thread.join()
'''

EPILOGUE = '''
body()
gc.collect()
if CHECK_LEAKS:
    assert live() == NOTHING, live()
print("CHILD-OK")
'''


def run(driver: Optional[str], code: str, env: Optional[Dict[str, str]] = None,
        check_leaks: bool = True) -> subprocess.CompletedProcess:
    """Run ``code`` (a function body) in a child interpreter."""
    child_env = dict(os.environ)
    for key in list(child_env):
        if key.startswith("STANDIN_CUDA_"):
            del child_env[key]
    if driver is not None:
        child_env["BUFFEREXT_CUDA_DRIVER"] = driver
    child_env.update(env or {})
    source = (PRELUDE + f"CHECK_LEAKS = {check_leaks!r}\n" +
              "def body():\n" + textwrap.indent(textwrap.dedent(code), "    ")
              + "\n    pass\n" + EPILOGUE)
    return subprocess.run([sys.executable, "-c", source], env=child_env,
                          capture_output=True, text=True, timeout=120)


def check(driver: Optional[str], code: str, **kwargs: object) -> str:
    """Run ``code`` and fail with the child's output unless it passed."""
    result = run(driver, code, **kwargs)  # type: ignore[arg-type]
    if result.returncode != 0 or "CHILD-OK" not in result.stdout:
        raise AssertionError(
            f"child failed (rc={result.returncode})\n--- stdout\n"
            f"{result.stdout}\n--- stderr\n{result.stderr}")
    return result.stdout
