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
V=$W/venv-ft
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
# wheels for cp313t: numpy 2.4.6 is the last release with them
CONSTRAINTS=$W/constraints.txt
echo "numpy<2.5" >"$CONSTRAINTS"
# BUFFEREXT_FT_JOBS="wheel tsan" runs only those (by function name)
JOBS=${BUFFEREXT_FT_JOBS:-}
# shellcheck source=job.sh
source "$W/dotci/job.sh"
# shellcheck source=lib.sh
source "$W/dotci/lib.sh"         # ci_venv, ci_install, ci_tests
export CI_SRC=$W/src CI_SCRATCH=$W CI_WHEELHOUSE=$W/wheelhouse

wheel() {
    ci_venv "$V" "$FT" "setuptools>=77"
    # the test extra but abi3audit (a free-threaded CPython has no stable
    # ABI to audit; a dependency of it would need Rust to build here)
    "$V/bin/python" - <<'PY' >$W/test-requirements.txt
import tomllib
extra = tomllib.load(open("/ci-ft/src/pyproject.toml", "rb"))["project"][
    "optional-dependencies"]["test"]
print("\n".join(r for r in extra if not r.startswith("abi3audit")))
PY
    # wheels only: some releases have no cp313t wheel, and their sdists
    # want a Rust or Fortran toolchain to build
    CI_EXTRAS= ci_install "$V" wheel -c "$CONSTRAINTS" --only-binary=:all: \
        -r $W/test-requirements.txt pytest-run-parallel
    "$V/bin/python" -c 'import sys, bufferext; assert not sys._is_gil_enabled(); print("import leaves the GIL off")'
}

parallel() {         # the suite, every test in two threads at once
    # (pytest-run-parallel; tests marked thread_unsafe run once, each with
    # its reason), the GIL kept off by the module's own declaration: a test
    # that turns it on fails (tests/conftest.py)
    unset PYTHON_GIL
    ci_tests "$V" nompi --parallel-threads=2
}

bench() {            # export throughput from 1 and 2 threads (figures only,
                     # as the other benchmark steps: a noisy ratio must not fail)
    ( cd $W && "$V/bin/python" $W/src/benchmarks/bench_threads.py --quick )
}

mpi() {              # the MPI suites on 2 ranks (mpich from PyPI)
    local CI_LAUNCH=(timeout 900 "$V/bin/mpiexec" -n 2)
    ci_pip "$V/bin/python" install -q -c "$CONSTRAINTS" \
        --only-binary=mpich,numpy mpi4py mpich pytest-mpi
    ci_tests "$V" mpi
}

tsan() {             # bufferext built with -fsanitize=thread, raced
    local site so libs
    rm -rf $W/venv-tsan $W/tsan && mkdir -p $W/tsan
    TSAN_OPTIONS=report_bugs=0 "$TSAN" -m venv --without-pip $W/venv-tsan
    site=$(TSAN_OPTIONS=report_bugs=0 $W/venv-tsan/bin/python -c \
        'import sysconfig; print(sysconfig.get_path("purelib"))')
    # pip and setuptools run on the 3.13t, whose ABI the TSan twin shares
    # (cp313t): under ThreadSanitizer they took 400 s of this job's 600.
    # What they install goes into the TSan venv (--target); the extension
    # gets what the TSan twin adds to the 3.13t's flags: -fsanitize=thread,
    # -g and -O1 (the environment's CFLAGS come after the 3.13t's -O3).
    "$V/bin/python" -m pip install -q --target "$site" -c "$CONSTRAINTS" \
        --only-binary=:all: numpy pytest hypothesis "setuptools>=77"
    rm -rf "$site/bin"   # their scripts (--target puts them there): unused
    CFLAGS="-fsanitize=thread -g -O1" LDFLAGS=-fsanitize=thread \
        "$V/bin/python" -m pip install -q --target "$site" --no-deps \
        --no-build-isolation $W/src
    so=$(ls "$site"/bufferext/_bufferext*.so)
    libs=$(ldd "$so")
    [[ $libs == *libtsan* ]] || { echo "not TSan-instrumented: $so"; return 1; }
    TSAN_OPTIONS="suppressions=$SUPP halt_on_error=0 exitcode=0 log_path=$W/tsan/report" \
        BUFFEREXT_HOSTILE_OPS=${BUFFEREXT_TSAN_OPS:-60000} \
        ci_tests $W/venv-tsan threads
    python3 $W/dotci/tsan_report.py $W/tsan
}

job "3.13t: wheel, repaired, installed" wheel
job "3.13t: the suite under pytest-run-parallel, GIL off by the module's declaration" parallel
job "3.13t: MPI suites on 2 ranks" mpi
job "3.13t: thread throughput (benchmarks/bench_threads.py --quick)" bench
job "3.13t + ThreadSanitizer: the thread stress" tsan
exit $fails
