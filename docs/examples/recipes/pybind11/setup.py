import bufferext_headers
from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup

setup(
    ext_modules=[
        Pybind11Extension("bufferext_pybind11", sources=["describe.cpp",
                                                        "matrix.cpp"],
                          include_dirs=[bufferext_headers.get_include()]),
    ],
)
