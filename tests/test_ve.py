"""VEBuffer without VE hardware: every path through the stand-in VEO library
(tests/ve_standin/, a test double built here), each in a fresh subprocess
because the VEO library loads once per process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from typing import Dict, Optional

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN_DIR = os.path.join(HERE, "ve_standin")
sys.path.insert(0, STANDIN_DIR)
import standin  # noqa: E402


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    out = str(tmp_path_factory.mktemp("standin_veo"))
    return {"full": standin.build(out),
            "old": standin.build(out, omit_hmem=True)}


def run_python(code: str, library: Optional[str],
               **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("STANDIN_VEO_", "BUFFEREXT_VEO_"))}
    if library is not None:
        environ["BUFFEREXT_VEO_LIBRARY"] = library
    environ.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env=environ, capture_output=True, text=True,
                          timeout=300)


def read_report(path: str) -> Dict[str, int]:
    with open(path) as f:
        return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", f.read())}


def test_inprocess_suite_passes(libs: Dict[str, str]) -> None:
    """The in-process VEBuffer suite, run against the stand-in."""
    environ = dict(os.environ, BUFFEREXT_VEO_LIBRARY=libs["full"])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         os.path.join(STANDIN_DIR, "inproc_ve.py")],
        env=environ, capture_output=True, text=True, timeout=600)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout else ""
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"\d+ passed", summary) and "failed" not in summary
    assert "skipped" not in summary, summary


def test_exit_tears_down_every_node(libs: Dict[str, str],
                                    tmp_path: "os.PathLike[str]") -> None:
    report = os.path.join(str(tmp_path), "report")
    proc = run_python("""
        import bufferext, numpy as np
        kept = [bufferext.VEBuffer((4, 4), node=n) for n in range(4)]
        for b in kept:
            b.copy_from_host(np.ones((4, 4)))
        view = bufferext.get_buffer(kept[0])   # still exported at exit
        closed = bufferext.VEBuffer(8, node=1)
        closed.close()
        print(bufferext.devices()[-1]["open_nodes"])
        """, libs["full"], STANDIN_VEO_REPORT=report)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[0, 1, 2, 3]"
    assert read_report(report) == {"hmem": 0, "procs": 0, "contexts": 0,
                                   "errors": 0}


def test_buffer_outliving_the_interpreter_keeps_its_node(
        libs: Dict[str, str], tmp_path: "os.PathLike[str]") -> None:
    """A buffer never freed (leaked past finalization) keeps its node's
    process: HMEM is never freed after, nor left behind by, its process."""
    report = os.path.join(str(tmp_path), "report")
    proc = run_python("""
        import ctypes, bufferext
        leaked = bufferext.VEBuffer(16, node=2)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(leaked))
        other = bufferext.VEBuffer(16, node=3)
        """, libs["full"], STANDIN_VEO_REPORT=report)
    assert proc.returncode == 0, proc.stderr
    # node 2 stays (its buffer is alive), node 3 is torn down; no misuse
    assert read_report(report) == {"hmem": 1, "procs": 1, "contexts": 1,
                                   "errors": 0}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_copies_no_foreign_hmem(libs: Dict[str, str]) -> None:
    """The fork guard was registered only when bufferext started a VE node
    itself: a copy of HMEM another library's VEO process holds (a VE Array
    Interface) made the child's copies VEO calls on the parent's
    process."""
    proc = run_python(f"""
        import os, sys
        import numpy as np
        import bufferext
        from bufferext import BufferFlags as F, DeviceUnavailableError
        sys.path.insert(0, {STANDIN_DIR!r})
        import standin
        c = standin.Counters()
        proc, addr = c.foreign_hmem(32)         # another library's process
        class Foreign:
            __ve_array_interface__ = {{"shape": (4,), "typestr": "<f8",
                                       "version": 1, "strides": None,
                                       "data": (addr, False)}}
        view = bufferext.get_buffer(bufferext.as_buffer(Foreign()),
                                    F.FULL | F.DEVICE)
        view.copy_from_host(np.arange(4.0))     # bufferext's first VEO call
        before = c.calls("veo_hmemcpy")
        pid = os.fork()
        if pid == 0:
            try:
                view.copy_from_host(np.full(4, 7.0))
                out = "no error"
            except DeviceUnavailableError as e:
                out = "forked" in str(e)
            print("CHILD", out, c.calls("veo_hmemcpy") - before, flush=True)
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        """, libs["full"])
    assert proc.returncode == 0, proc.stderr
    assert "CHILD True 0" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_makes_no_veo_call(libs: Dict[str, str],
                                        tmp_path: "os.PathLike[str]") -> None:
    """A fork child shares the parent's VEO processes: its copies, frees and
    the exit's teardown acted on them (the stand-in's copy in the child
    shows the calls; on a VE they reach the parent's processes).  The
    child refuses VE work and makes no VEO call, its exit included."""
    report = os.path.join(str(tmp_path), "child_report")
    proc = run_python(f"""
        import os, sys
        import numpy as np
        import bufferext
        from bufferext import VEBuffer, DeviceUnavailableError
        sys.path.insert(0, {STANDIN_DIR!r})
        import standin
        c = standin.Counters()
        b = VEBuffer(4, node=1)
        b.copy_from_host(np.ones(4))
        b2 = VEBuffer(4, node=1)
        other = VEBuffer(4, node=2)
        other.close()               # node 2 unused: the exit ends it
        pid = os.fork()
        if pid == 0:
            os.environ["STANDIN_VEO_REPORT"] = {report!r}
            names = ("veo_proc_create", "veo_alloc_hmem", "veo_free_hmem",
                     "veo_hmemcpy")
            before = [c.calls(n) for n in names]
            out = []
            for action in (lambda: VEBuffer(2, node=1), b.to_host,
                           lambda: b.copy_from_host(np.zeros(4)),
                           lambda: b.copy_from(b2)):
                try:
                    action()
                except DeviceUnavailableError as e:
                    out.append("forked" in str(e))
                except BaseException as e:
                    out.append(repr(e))
                else:
                    out.append("no error")
            b.close()
            del b
            out.append([c.calls(n) - k for n, k in zip(names, before)])
            print("CHILD", out, flush=True)
            sys.exit(0)             # a normal exit: Py_AtExit runs
        assert os.waitpid(pid, 0)[1] == 0
        print("PARENT", b.to_host().tolist(), flush=True)
        """, libs["full"])
    assert proc.returncode == 0, proc.stderr
    assert "CHILD [True, True, True, True, [0, 0, 0, 0]]" in proc.stdout, \
        proc.stdout + proc.stderr
    assert "PARENT [1.0, 1.0, 1.0, 1.0]" in proc.stdout, proc.stdout
    # the child's exit left the parent's two processes and HMEM alone
    assert read_report(report) == {"hmem": 2, "procs": 2, "contexts": 2,
                                   "errors": 0}


def test_disabled_library(libs: Dict[str, str]) -> None:
    proc = run_python("""
        import json, bufferext
        ve = [d for d in bufferext.devices() if d["device"] == "bufferext.ve"]
        try:
            bufferext.VEBuffer(4)
        except bufferext.DeviceUnavailableError as e:
            print(json.dumps([str(e), ve[0]["loaded"], ve[0]["error"]]))
        """, "none")
    assert proc.returncode == 0, proc.stderr
    message, loaded, error = json.loads(proc.stdout)
    assert message == "VEO library disabled by BUFFEREXT_VEO_LIBRARY=none"
    assert loaded is False and error == message


def try_vebuffer(library: str) -> str:
    """What a child that makes VEBuffer(4) with ``library`` as the VEO
    library prints: the DeviceUnavailableError it gets."""
    proc = run_python("""
        import bufferext
        try:
            bufferext.VEBuffer(4)
        except bufferext.DeviceUnavailableError as e:
            print(e)
        """, library)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_missing_library_says_what_was_looked_for(
        tmp_path: "os.PathLike[str]") -> None:
    missing = os.path.join(str(tmp_path), "libveo.so.1")
    assert f"VEO library not found: looked for {missing}" in \
        try_vebuffer(missing)


def test_default_search_names_nec_location_first() -> None:
    proc = run_python("""
        import bufferext
        ve = [d for d in bufferext.devices() if d["device"] == "bufferext.ve"]
        print(ve[0]["looked_for"][0])
        """, None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "/opt/nec/ve/veos/lib64/libveo.so.1"


def test_veo_without_hmem_is_unavailable(libs: Dict[str, str]) -> None:
    assert "lacks the symbol veo_alloc_hmem" in try_vebuffer(libs["old"])


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="reads /proc/self/maps")
def test_import_never_loads_veo(libs: Dict[str, str],
                                tmp_path: "os.PathLike[str]") -> None:
    report = os.path.join(str(tmp_path), "report")
    proc = run_python("""
        import sys, bufferext
        print(any("standin" in line for line in open("/proc/self/maps")))
        """, libs["full"], STANDIN_VEO_REPORT=report)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
