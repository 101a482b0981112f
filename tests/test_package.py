"""The installed package: headers, devices(), import without drivers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig

import pytest

import bufferext
from _helpers import editable_source, run_installed

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(HERE)

DEVICE_KEYS = {"device", "library", "env_var", "looked_for", "loaded",
               "path", "error"}


def run_python(code: str, **env_overrides: str) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (outside the source tree)."""
    return run_installed("-c", code, **env_overrides)


def devices_with(**env: str):
    proc = run_python("import bufferext, json; "
                      "print(json.dumps(bufferext.devices()))", **env)
    assert proc.returncode == 0, proc.stderr
    return {d["device"]: d for d in json.loads(proc.stdout)}


# ---- installed, not the source tree ------------------------------------------

def test_tests_run_against_the_installed_package():
    package_dir = os.path.dirname(os.path.abspath(bufferext.__file__))
    if editable_source() is not None:
        # pip install -e: the source tree is the package, by design, and
        # the install must point at this very tree
        assert editable_source() == os.path.realpath(SOURCE_ROOT)
        assert package_dir == os.path.join(SOURCE_ROOT, "Lib", "bufferext")
    else:
        assert not package_dir.startswith(os.path.join(SOURCE_ROOT, "Lib")), (
            "bufferext was imported from the source tree; pip install . first")
    assert os.path.basename(bufferext._bufferext.__file__).startswith(
        "_bufferext")


def test_version():
    assert bufferext.__version__ == "0.1.0"
    major, minor, micro = (int(x) for x in bufferext.__version__.split("."))
    assert bufferext._bufferext.VERSION_HEX == (
        major << 24 | minor << 16 | micro << 8)
    assert bufferext._bufferext.ABI_VERSION == 4


def test_get_include_holds_the_headers():
    include = bufferext.get_include()
    assert os.path.isabs(include)
    package_dir = os.path.dirname(os.path.abspath(bufferext.__file__))
    assert include == os.path.join(package_dir, "include")
    for name in ("bufferext.h", "bufferext/core.h", "bufferext/cuda.h",
                 "bufferext/ve.h", "bufferext/internal/accel.h"):
        assert os.path.isfile(os.path.join(include, name)), name
    with open(os.path.join(include, "bufferext", "core.h")) as f:
        core = f.read()
    assert "#  define PyBUF_DEVICE 0x10000" in core
    assert "Py_buffer_extended" in core


def test_installed_headers_match_the_source():
    source = os.path.join(SOURCE_ROOT, "Include")
    if not os.path.isdir(source):
        pytest.skip("no source tree next to the tests")
    for name in ("bufferext.h", "bufferext/core.h", "bufferext/cuda.h",
                 "bufferext/ve.h", "bufferext/internal/accel.h"):
        with open(os.path.join(source, name), "rb") as a, \
                open(os.path.join(bufferext.get_include(), name), "rb") as b:
            assert a.read() == b.read(), f"{name} is stale: reinstall"


def test_import_and_get_include_do_not_load_numpy():
    proc = run_python("import sys, bufferext; bufferext.get_include(); "
                      "bufferext.check_buffer_supports(b''); "
                      "print(sorted(m for m in sys.modules if m.startswith('numpy')))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_as_buffer_loads_on_first_use():
    proc = run_python("import bufferext; from bufferext import *; "
                      "print(as_buffer is bufferext.as_buffer, "
                      "'as_buffer' in dir(bufferext))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True"]
    with pytest.raises(AttributeError, match="no_such_name"):
        bufferext.no_such_name


def test_typed_package():
    package_dir = os.path.dirname(os.path.abspath(bufferext.__file__))
    assert os.path.isfile(os.path.join(package_dir, "py.typed"))


def test_public_api():
    for name in bufferext.__all__:
        assert hasattr(bufferext, name), name
    assert issubclass(bufferext.DeviceUnavailableError, RuntimeError)


def test_every_public_name_has_an_api_entry():
    """Each name of ``bufferext.__all__`` and ``bufferext.distarray.__all__``
    is described by an autodoc (or ``data``) directive of docs/*.rst under
    its module, so the API reference lists it with its signature; api.rst's
    list of ``bufferext``'s names is ``__all__``, no more, no less."""
    import re

    import bufferext.distarray
    docs = os.path.join(SOURCE_ROOT, "docs")
    if not os.path.isdir(docs):
        pytest.skip("docs/ is not beside the tests")
    directive = re.compile(r"^\.\. (?:auto)?(?:class|function|exception|data|module|"
                           r"currentmodule):: +([\w.]+)", re.M)
    documented = set()
    for name in sorted(os.listdir(docs)):
        if name.endswith(".rst"):
            with open(os.path.join(docs, name), encoding="utf-8") as f:
                module = "bufferext"
                for target in directive.findall(f.read()):
                    if target.startswith("bufferext"):
                        module = target
                    else:
                        documented.add(f"{module}.{target}")
    missing = [f"{m.__name__}.{n}" for m in (bufferext, bufferext.distarray)
               for n in m.__all__ if f"{m.__name__}.{n}" not in documented]
    assert not missing, f"no API entry in docs/*.rst for {missing}"
    with open(os.path.join(docs, "api.rst"), encoding="utf-8") as f:
        listed = set(re.findall(r"`~bufferext\.(\w+)`", f.read()))
    unlisted = sorted(set(bufferext.__all__) - listed)
    assert not unlisted, f"docs/api.rst's list of bufferext's names lacks {unlisted}"
    unknown = sorted(listed - set(bufferext.__all__))
    assert not unknown, f"docs/api.rst lists {unknown}, not in bufferext.__all__"


# ---- devices() ---------------------------------------------------------------

def test_devices_structure():
    found = bufferext.devices()
    assert isinstance(found, list)
    assert [d["device"] for d in found] == ["bufferext.cuda", "bufferext.ve"]
    for entry in found:
        assert isinstance(entry, dict)
        # a loaded CUDA driver also lists its devices (docs/cuda.rst)
        loaded_cuda = entry["loaded"] and entry["device"] == "bufferext.cuda"
        assert set(entry) == DEVICE_KEYS | ({"devices"} if loaded_cuda else set())
        assert isinstance(entry["library"], str) and entry["library"]
        assert entry["env_var"] in ("BUFFEREXT_CUDA_DRIVER",
                                    "BUFFEREXT_VEO_LIBRARY")
        assert isinstance(entry["looked_for"], list)
        assert all(isinstance(p, str) for p in entry["looked_for"])
        assert isinstance(entry["loaded"], bool)
        if loaded_cuda:
            # "error" says why the driver would not start, with no devices
            assert entry["path"] and all(isinstance(d, str) for d in entry["devices"])
            assert (entry["error"] is None) == bool(entry["devices"])
        elif entry["loaded"]:
            assert entry["path"] and entry["error"] is None
        else:
            assert entry["path"] is None
            assert isinstance(entry["error"], str)


def test_devices_is_stable_and_fresh_lists():
    first, second = bufferext.devices(), bufferext.devices()
    assert first == second
    first[0]["looked_for"].append("mutated")
    assert "mutated" not in bufferext.devices()[0]["looked_for"]


def test_devices_default_search():
    """Without overrides, the error names every path that was looked for."""
    env = {"BUFFEREXT_CUDA_DRIVER": "", "BUFFEREXT_VEO_LIBRARY": ""}
    found = devices_with(**env)
    cuda, ve = found["bufferext.cuda"], found["bufferext.ve"]
    assert "libcuda.so.1" in cuda["looked_for"]
    assert "libveo.so.1" in ve["looked_for"]
    for entry in (cuda, ve):
        if entry["loaded"]:
            continue          # a machine with the real library
        for path in entry["looked_for"]:
            assert path in entry["error"]
        assert entry["env_var"] in entry["error"]


@pytest.mark.parametrize("device, var", [
    ("bufferext.cuda", "BUFFEREXT_CUDA_DRIVER"),
    ("bufferext.ve", "BUFFEREXT_VEO_LIBRARY"),
])
def test_env_none_disables(device, var):
    entry = devices_with(**{var: "none"})[device]
    assert entry["loaded"] is False
    assert entry["looked_for"] == []
    assert f"{var}=none" in entry["error"] and "disabled" in entry["error"]


@pytest.mark.parametrize("device, var", [
    ("bufferext.cuda", "BUFFEREXT_CUDA_DRIVER"),
    ("bufferext.ve", "BUFFEREXT_VEO_LIBRARY"),
])
def test_env_nonexistent_path(device, var):
    path = "/nonexistent/path/libdevice.so"
    found = devices_with(**{var: path})
    entry = found[device]
    assert entry["loaded"] is False
    assert entry["looked_for"] == [path]
    assert "not found" in entry["error"] and path in entry["error"]
    # the other library is unaffected
    other = [d for name, d in found.items() if name != device][0]
    assert other["looked_for"] != [path]


@pytest.mark.parametrize("device, var, prefix", [
    ("bufferext.cuda", "BUFFEREXT_CUDA_DRIVER", "cu"),
    ("bufferext.ve", "BUFFEREXT_VEO_LIBRARY", "veo_"),
])
def test_env_library_without_the_symbols(device, var, prefix):
    import ctypes.util
    libm = ctypes.util.find_library("m")
    if libm is None or not sys.platform.startswith("linux"):
        pytest.skip("needs libm on Linux")
    entry = devices_with(**{var: libm})[device]
    assert entry["loaded"] is False
    assert "found at" in entry["error"]
    assert f"lacks the symbol {prefix}" in entry["error"]


def test_env_file_that_is_not_a_library(tmp_path):
    fake = tmp_path / "libcuda.so.1"
    fake.write_text("not a shared library")
    entry = devices_with(BUFFEREXT_CUDA_DRIVER=str(fake))["bufferext.cuda"]
    assert entry["loaded"] is False
    assert entry["looked_for"] == [str(fake)]
    assert f"found at {fake} but failed to load" in entry["error"]


@pytest.mark.parametrize("env", [
    {"BUFFEREXT_CUDA_DRIVER": "none", "BUFFEREXT_VEO_LIBRARY": "none"},
    {"BUFFEREXT_CUDA_DRIVER": "/nonexistent/a.so",
     "BUFFEREXT_VEO_LIBRARY": "/nonexistent/b.so"},
    {"BUFFEREXT_CUDA_DRIVER": "", "BUFFEREXT_VEO_LIBRARY": ""},
], ids=["none", "nonexistent", "default"])
def test_import_never_fails_without_drivers(env):
    code = ("import bufferext, numpy\n"
            "buf = bufferext.CPUBuffer((2, 2), 'f4')\n"
            "numpy.asarray(buf)[:] = 1\n"
            "assert buf.to_host().sum() == 4\n"
            "assert len(bufferext.devices()) == 2\n"
            "print('ok')\n")
    proc = run_python(code, **env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.skipif(not sysconfig.get_config_var("Py_GIL_DISABLED"),
                    reason="a free-threaded interpreter (3.13t and later)")
def test_import_leaves_the_gil_off() -> None:
    # the module declares Py_MOD_GIL_NOT_USED: importing it in a fresh
    # interpreter must not turn the GIL back on (nor warn that it does)
    proc = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c",
         "import sys, bufferext, bufferext.distarray; "
         "print(sys._is_gil_enabled())"],
        env={k: v for k, v in os.environ.items() if k != "PYTHON_GIL"},
        capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False" and proc.stderr == ""


def test_install_hints_name_what_an_index_serves():
    """No index serves bufferext itself: a hint in the installed package or
    the docs names what exists (``pip install mpi4py mpich``, ``pip install
    matplotlib``), never ``pip install bufferext[...]``."""
    package = os.path.dirname(bufferext.__file__)
    docs = os.path.join(SOURCE_ROOT, "docs")
    places = [os.path.join(base, name)
              for root in (package, docs) if os.path.isdir(root)
              for base, _, names in os.walk(root) for name in names
              if name.endswith((".py", ".pyi", ".rst"))]
    assert any(p.endswith("__main__.py") for p in places)
    found = []
    for path in places:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if "install bufferext[" in line or "or bufferext[" in line:
                    found.append(f"{path}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
