#!/bin/sh
# Fill .gpu/ for benchmarks/gpu/run.sh on a machine whose Python has no
# network: a wheel of this checkout for that Python (built here with PY312,
# an interpreter of the same minor version), and the wheels the GPU run
# needs beyond a CUDA image's usual packages (numpy, pytest, hypothesis,
# pytest-xdist, torch, CuPy, JAX, numba-cuda): mpi4py, MPICH, pytest-mpi
# and greenlet.  Also the interpreter's headers, for an image without them.
#     PY312=python3.12 sh benchmarks/gpu/prepare.sh
# .gpu/ is ignored by git (add "/.gpu/" to .git/info/exclude).
set -eu
PY312=${PY312:-python3.12}
cd "$(dirname "$0")/../.."
rm -rf .gpu/whl .gpu/pyinclude312
mkdir -p .gpu/whl
"$PY312" -m pip wheel -q --no-deps -w .gpu/whl .
"$PY312" -m pip download -q --no-deps --only-binary=:all: -d .gpu/whl \
    mpi4py==4.1.2 mpich==5.0.2 pytest-mpi==0.6 greenlet==3.5.6
cp -r "$("$PY312" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
    .gpu/pyinclude312
