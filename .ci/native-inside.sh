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
TEST_DEPS=(pytest hypothesis "cython>=3" "setuptools>=77" "pybind11>=2.13" abi3audit "greenlet>=3")
# BUFFEREXT_NATIVE_JOBS="cpython native" runs only those (by function name)
JOBS=${BUFFEREXT_NATIVE_JOBS:-}
# shellcheck source=job.sh
source "$W/dotci/job.sh"
# shellcheck source=lib.sh
source "$W/dotci/lib.sh"         # ci_venv, ci_install, ci_tests
export CI_SRC=$W/src CI_SCRATCH=$W

venv() {         # dir: a venv with the source-built NumPy and the test deps
    ci_venv "$1" "$PY" "$NUMPY_WHEELS"/numpy-*.whl
    ci_pip "$1/bin/python" install -q --only-binary=:all: "${TEST_DEPS[@]}"
}

cpython() {      # CPython's own tests of what the patch touches
    "$PY" -c 'import inspect; assert inspect.BufferFlags.DEVICE == 0x10000'
    "$PY" -m test -j2 test_buffer test_memoryview test_picklebuffer test_pickle \
        test_inspect test_capi test_bytes test_array test_struct \
        test_stable_abi_ctypes test_descr test_typing
}

# The suite's C API builds follow CFLAGS: in native mode they defer to the
# interpreter's declarations, with the backport forced they carry their own.
native() {       # bufferext from source, in native mode: the suite, parity
    venv "$W/venv-native"
    ci_install "$W/venv-native" source
    "$W/venv-native/bin/python" -c 'import bufferext._bufferext as m; assert m.NATIVE == 1; print("bufferext: native mode")'
    BUFFEREXT_PARITY_OUT=$W/parity-native.json ci_tests "$W/venv-native" nompi
}

stock() {        # the wheel built on stock CPython, the backport forced
    venv "$W/venv-stock"
    ci_install "$W/venv-stock" "$(ls "$W"/wheels/bufferext-*.whl | head -1)"
    "$W/venv-stock/bin/python" -c 'import bufferext._bufferext as m; assert m.NATIVE == 0; print("bufferext: the stock wheel, backport mode")'
    CFLAGS=-DBUFFEREXT_FORCE_BACKPORT BUFFEREXT_PARITY_OUT=$W/parity-forced.json \
        ci_tests "$W/venv-stock" nompi
}

job "CPython's tests of the patched interpreter" cpython
job "native mode: bufferext from source, the suite, parity" native
job "the stock cp313 wheel, backport forced: the suite, parity" stock
exit $fails
