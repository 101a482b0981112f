#!/bin/bash
# bufferext on a real NVIDIA GPU: the GPU tests, the MPI device path on 2
# ranks, bench_cuda_gpu.py, compute-sanitizer's memcheck and the whole
# suite, in one run with a time limit per stage; the logs and the results
# land in $OUT (default /tmp/gpu-out).  benchmarks/gpu/prepare.sh fills
# .gpu/ first, on a machine with the network: the machine with the GPU may
# have none.  Then, on the GPU machine, from the checkout's root:
#     bash benchmarks/gpu/run.sh
# PY: the interpreter (python3; its environment gets the wheels); STAGES:
# which of "gpu-tests mpi-gpu bench memcheck suite" to run (all);
# BUDGET: seconds from the start after which the suite is not begun, and
# at which it is stopped (470); GPU_TESTS_MORE, MEMCHECK_TESTS: more test
# files for the GPU stage, the files memcheck runs (tests/test_cuda_gpu.py).
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT"
O=${OUT:-/tmp/gpu-out}; mkdir -p "$O"
PY=${PY:-python3}
T0=$(date +%s)
stage() { echo; echo "=== $1 (t=$(( $(date +%s) - T0 )) s)"; }
want() { case " ${STAGES:-gpu-tests mpi-gpu bench memcheck suite} " in *" $1 "*) stage "$1";; *) false;; esac; }
left() { echo $(( ${BUDGET:-470} - ($(date +%s) - T0) )); }

stage probe
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
command -v "$PY" gcc nvcc; "$PY" -V; nproc
INC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
if [ -f "$INC/Python.h" ]; then echo "Python.h: $INC"
else echo "no Python.h in $INC: using the carried 3.12 headers"
     export CPATH=$ROOT/.gpu/pyinclude312; fi
"$PY" -m pip list 2>/dev/null | grep -i -E '^(torch|cupy|cupy-cuda13x|numba|numba-cuda|mpi4py|numpy|pytest|pytest-xdist|hypothesis|greenlet|ml.dtypes|cython|pybind11|nanobind|pyarrow|jax) '

stage install
# into the interpreter's own environment, as the README installs (the
# tests' child processes find it without a path); the GPU machines lent to
# this project are thrown away after each lease
"$PY" -m pip install -q --no-index --no-deps --no-compile --force-reinstall .gpu/whl/*.whl || exit 1
export PATH=$(dirname "$("$PY" -c 'import sys; print(sys.executable)')"):$PATH
command -v mpiexec
"$PY" -c "import bufferext, json; print(bufferext.__file__); print(json.dumps([d for d in bufferext.devices()], default=str))"

want gpu-tests &&
timeout 200 "$PY" -m pytest -p no:cacheprovider -rs -v tests/test_cuda_gpu.py \
    tests/test_bridges_gpu.py tests/test_cuda_example.py ${GPU_TESTS_MORE:-} 2>&1 | tee "$O/gpu-tests.txt"

want mpi-gpu &&
timeout 150 mpiexec -n 2 "$PY" -m pytest -p no:cacheprovider -rs -v --with-mpi \
    tests/test_mpi_gpu.py 2>&1 | tee "$O/mpi-gpu.txt"

want bench &&
timeout 200 "$PY" benchmarks/bench_cuda_gpu.py --out "$O" 2>&1 | tee "$O/bench.txt"

if want memcheck && command -v compute-sanitizer >/dev/null; then
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$PY" -m pytest \
      -p no:cacheprovider -q ${MEMCHECK_TESTS:-tests/test_cuda_gpu.py} > "$O/memcheck.txt" 2>&1
  echo "memcheck rc=$?"; tail -15 "$O/memcheck.txt"
fi

T=$(left)
if want suite && [ "$T" -gt 40 ]; then
  echo "suite limit ${T} s"
  N=; "$PY" -c "import xdist" 2>/dev/null && N="-n 8"
  timeout "$T" "$PY" -m pytest -q -rfE --maxfail=30 $N > "$O/suite.txt" 2>&1
  echo "suite rc=$?"; tail -40 "$O/suite.txt"
fi
stage done
