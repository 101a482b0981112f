#!/bin/sh
# build.sh -- build scale.cu into the extension module bufferext_cuda_scale
# in the current directory, with nvcc against Python.h and bufferext.h.
# docs/cuda.rst shows it; tests/test_cuda_example.py runs it.
#   PYTHON  the interpreter to build for (default python3)
#   NVCC    the CUDA compiler (default nvcc); NVCCFLAGS: more flags
set -e
PYTHON=${PYTHON:-python3}
NVCC=${NVCC:-nvcc}
py() { "$PYTHON" -c "$1"; }
"$NVCC" -shared -Xcompiler -fPIC -O2 ${NVCCFLAGS:-} "$(dirname "$0")/scale.cu" \
    -I"$(py 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
    -I"$(py 'import bufferext; print(bufferext.get_include())')" \
    -o "bufferext_cuda_scale$(py 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
