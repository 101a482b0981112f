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
PY_INCLUDE=$(py 'import sysconfig; print(sysconfig.get_paths()["include"])')
BUFFEREXT_INCLUDE=$(py 'import bufferext; print(bufferext.get_include())')
SUFFIX=$(py 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
"$NVCC" -shared -Xcompiler -fPIC -O2 ${NVCCFLAGS:-} \
    -I"$PY_INCLUDE" -I"$BUFFEREXT_INCLUDE" \
    -o "bufferext_cuda_scale$SUFFIX" "$(dirname "$0")/scale.cu"
