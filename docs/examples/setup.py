"""Build the documentation's example extension against the bufferext header.

bufferext is needed at build time only (for the header); the built module
imports nothing from it.
"""

import bufferext
from setuptools import Extension, setup

setup(
    name="bufferext-example",
    version="0",
    ext_modules=[
        Extension(
            "bufferext_example",
            sources=["example.c"],
            include_dirs=[bufferext.get_include()],
        )
    ],
)
