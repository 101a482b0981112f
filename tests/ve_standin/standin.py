"""Build and read the stand-in VEO library (a test double, never shipped).

The library is compiled from ``standin_veo.c`` next to this file with the
system C compiler; see that file for the failure-injection variables and
the counters.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from typing import Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "standin_veo.c")


def build(directory: str, omit_hmem: bool = False) -> str:
    """Compile the stand-in into ``directory``; return the library path."""
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler found to build the stand-in VEO")
    name = "standin_veo_nohmem.so" if omit_hmem else "standin_veo.so"
    path = os.path.join(directory, name)
    cmd = [cc, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror",
           "-o", path, SOURCE, "-lpthread"]
    if omit_hmem:
        cmd.insert(1, "-DSTANDIN_OMIT_HMEM")
    subprocess.run(cmd, check=True)
    return path


class Counters:
    """The stand-in's live counters, read through ctypes (same handle as
    the one bufferext loaded, since dlopen shares it by path)."""

    def __init__(self, path: Optional[str] = None) -> None:
        self.lib = ctypes.CDLL(path or os.environ["BUFFEREXT_VEO_LIBRARY"])
        for name in ("standin_live_hmem", "standin_live_procs",
                     "standin_live_contexts", "standin_errors"):
            getattr(self.lib, name).restype = ctypes.c_long
        self.lib.standin_calls.restype = ctypes.c_long
        self.lib.standin_calls.argtypes = [ctypes.c_char_p]
        self.lib.veo_is_ve_addr.argtypes = [ctypes.c_void_p]
        self.lib.veo_is_ve_addr.restype = ctypes.c_int
        # the VEO calls another library makes (foreign_hmem)
        self.lib.veo_proc_create.restype = ctypes.c_void_p
        self.lib.veo_proc_create.argtypes = [ctypes.c_int]
        self.lib.veo_alloc_hmem.argtypes = [ctypes.c_void_p,
                                            ctypes.POINTER(ctypes.c_void_p),
                                            ctypes.c_size_t]
        self.lib.veo_free_hmem.argtypes = [ctypes.c_void_p]
        self.lib.veo_proc_destroy.argtypes = [ctypes.c_void_p]

    def foreign_hmem(self, nbytes: int, node: int = 2) -> Tuple[int, int]:
        """HMEM as another library holds it: (its VEO process, the HMEM
        address), made through the library directly, not bufferext."""
        proc = self.lib.veo_proc_create(node)
        address = ctypes.c_void_p()
        assert self.lib.veo_alloc_hmem(proc, ctypes.byref(address),
                                       nbytes) == 0
        return proc, int(address.value or 0)

    @property
    def hmem(self) -> int:
        """Live HMEM allocations."""
        return int(self.lib.standin_live_hmem())

    @property
    def procs(self) -> int:
        """Live VEO processes."""
        return int(self.lib.standin_live_procs())

    @property
    def contexts(self) -> int:
        """Open VEO contexts."""
        return int(self.lib.standin_live_contexts())

    @property
    def errors(self) -> int:
        """Misuses the stand-in detected (bad frees, early teardown...)."""
        return int(self.lib.standin_errors())

    def calls(self, name: str) -> int:
        """How often the VEO entry point ``name`` was called."""
        return int(self.lib.standin_calls(name.encode()))

    def is_ve_addr(self, address: int) -> bool:
        """veo_is_ve_addr of the stand-in."""
        return bool(self.lib.veo_is_ve_addr(address))
