"""Build of the _bufferext extension; metadata lives in pyproject.toml."""

import glob
import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class build_py_with_headers(build_py):
    """Install Include/ as bufferext/include, found by get_include().

    An editable install (``pip install -e .``) imports the package from
    Lib/bufferext itself, so there bufferext/include is a link to Include/
    (a copy where links cannot be made), git-ignored: header edits show at
    once, and get_include() is the same path in both kinds of install.
    """

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            _link_headers(os.path.join(HERE, "Lib", "bufferext", "include"))
            return
        target = os.path.join(self.build_lib, "bufferext", "include")
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(os.path.join(HERE, "Include"), target)


def _link_headers(target):
    if os.path.islink(target):
        os.unlink(target)
    elif os.path.isdir(target):
        shutil.rmtree(target)
    try:
        os.symlink(os.path.join("..", "..", "Include"), target,
                   target_is_directory=True)
    except OSError:                 # Windows without the privilege
        shutil.copytree(os.path.join(HERE, "Include"), target)


extra_compile_args = []
if sys.platform != "win32":
    # Hidden visibility: only PyInit__bufferext (PyMODINIT_FUNC) is
    # exported, so calls between the module's files are direct, not
    # through the PLT, and its own function addresses need no GOT load.
    # Every function at a 64-byte boundary, so that the exchange's few-ns
    # paths do not move with unrelated code elsewhere in the module (at
    # the default 16 bytes, a change that left their machine code as it
    # was moved `with get_buffer(as_buffer(a))` by 4-8 %: see
    # benchmarks/README.md); the code grows by about 4 %.
    extra_compile_args = ["-std=c99", "-Wall", "-Wextra",
                          "-fvisibility=hidden", "-falign-functions=64"]
    if os.environ.get("BUFFEREXT_WERROR"):
        extra_compile_args.append("-Werror")
libraries = ["dl"] if sys.platform.startswith("linux") else []

setup(
    ext_modules=[
        Extension(
            "bufferext._bufferext",
            sources=sorted(glob.glob("Modules/*.c")),
            depends=glob.glob("Modules/*.h") + glob.glob("Include/**/*.h",
                                                           recursive=True),
            include_dirs=["Include", "Modules"],
            extra_compile_args=extra_compile_args,
            libraries=libraries,
        )
    ],
    cmdclass={"build_py": build_py_with_headers},
)
