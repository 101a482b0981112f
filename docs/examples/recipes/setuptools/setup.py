import bufferext_headers
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("bufferext_recipe", sources=["shape.c"],
                  include_dirs=[bufferext_headers.get_include()]),
    ],
)
