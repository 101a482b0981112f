#!/bin/bash
# .ci/native-inside.sh -- the jobs of .ci/native.sh, inside its sid chroot,
# on the patched CPython 3.13 (paths are the chroot's):
#
#   native-inside.sh PYTHON NUMPY_WHEEL_DIR
#
# /ci-native/src is a clean snapshot, /ci-native/dotci the CI scripts,
# /ci-native/wheels the cp313 wheel built on stock CPython.  The parity
# tables land in /ci-native/parity-{native,forced}.json.  Exit status: the
# number of failed jobs.
set -uo pipefail
PY=$1 NUMPY_WHEELS=$2
W=/ci-native
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
# The test extra less matplotlib: its cp313 wheels (contourpy, built with
# pybind11) write PyHeapTypeObject fields at the offsets of stock 3.13, which
# the patch moves (import segfaults); plot_distribution's tests skip here.
TEST_DEPS=(pytest hypothesis "cython>=3" "setuptools>=77" "pybind11>=2.13" abi3audit)
# BUFFEREXT_NATIVE_JOBS="cpython native" runs only those (by function name)
JOBS=${BUFFEREXT_NATIVE_JOBS:-}
# shellcheck source=job.sh
source "$W/dotci/job.sh"

venv() {         # dir: a venv with the source-built NumPy and the test deps
    rm -rf "$1"
    "$PY" -m venv "$1"
    "$1/bin/python" -m pip install -q "$NUMPY_WHEELS"/numpy-*.whl
    "$1/bin/python" -m pip install -q --only-binary=:all: "${TEST_DEPS[@]}"
}

suite() {        # python mode [pytest args...]: the suite, the CI guard, the parity table
    local py=$1 mode=$2
    shift 2
    rm -rf "$W/tests-$mode" && mkdir -p "$W/tests-$mode"
    cp -a "$W/src/tests" "$W/src/docs" "$W/src/pyproject.toml" "$W/tests-$mode/"
    ( cd "$W/tests-$mode" && BUFFEREXT_CI_REPORT=$W/report-$mode.jsonl \
        BUFFEREXT_PARITY_OUT=$W/parity-$mode.json \
        PYTHONPATH=$W/dotci/pytest_plugin \
        "$py" -m pytest -q -p no:cacheprovider -p bufferext_ci_guard -m "not mpi" "$@" tests )
    "$py" "$W/dotci/check_report.py" "$W/report-$mode.jsonl" \
        --installed-under "$(dirname "$(dirname "$py")")"
}

cpython() {      # CPython's own tests of what the patch touches
    "$PY" -c 'import inspect; assert inspect.BufferFlags.DEVICE == 0x10000'
    "$PY" -m test -j2 test_buffer test_memoryview test_picklebuffer test_pickle \
        test_inspect test_capi test_bytes test_array test_struct \
        test_stable_abi_ctypes test_descr test_typing
}

native() {       # bufferext from source, in native mode
    venv "$W/venv-native"
    rm -rf "$W/build" && cp -a "$W/src" "$W/build"
    BUFFEREXT_WERROR=1 "$W/venv-native/bin/python" -m pip install -q \
        --no-build-isolation --no-deps "$W/build"
    "$W/venv-native/bin/python" -c 'import bufferext._bufferext as m; assert m.NATIVE == 1; print("bufferext: native mode")'
    suite "$W/venv-native/bin/python" native
    echo "-- the C API matrix, native and with the backport forced"
    ( cd "$W/tests-native" && "$W/venv-native/bin/python" tests/capi/build.py --matrix &&
      CFLAGS=-DBUFFEREXT_FORCE_BACKPORT \
          "$W/venv-native/bin/python" tests/capi/build.py --matrix )
}

stock() {        # the wheel built on stock CPython, the backport forced
    venv "$W/venv-stock"
    "$W/venv-stock/bin/python" -m pip install -q --no-deps "$W"/wheels/bufferext-*.whl
    "$W/venv-stock/bin/python" -c 'import bufferext._bufferext as m; assert m.NATIVE == 0; print("bufferext: the stock wheel, backport mode")'
    CFLAGS=-DBUFFEREXT_FORCE_BACKPORT suite "$W/venv-stock/bin/python" forced
}

job "CPython's tests of the patched interpreter" cpython
job "native mode: bufferext from source, the suite, parity, C API matrix" native
job "the stock cp313 wheel, backport forced: the suite, parity" stock
exit $fails
