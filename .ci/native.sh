#!/usr/bin/env bash
# .ci/native.sh -- the draft inside CPython: CPython 3.13 with the patch
# series of cpython/patches, and bufferext on it in native mode and with the
# backport forced.  Called by .ci/run (step `native`); runs on its own:
#
#   .ci/native.sh build                  only make (or reuse) the interpreter
#                                        and its NumPy
#   .ci/native.sh test SRC WHEELHOUSE STOCK_TABLE OUT
#                                        build, then the jobs below; the
#                                        parity tables land in OUT
#
# The interpreter is built from Debian's python3.13 source (.ci/cpython313.sh)
# with the patches applied, in a sid chroot of its own, and cached in
# $BUFFEREXT_CI_CACHE keyed by the source version, the configure flags, the
# chroot's compiler and the patches' bytes.  NumPy's cp313 wheels are not to
# be trusted there (its PyArray_DTypeMeta embeds PyHeapTypeObject, which the
# patch grows: it loads and passes its dtype tests, by luck of which field
# it overlaps), so a NumPy wheel is built from source once per interpreter
# (lean, below) and cached beside it.
#
# The jobs (.ci/native-inside.sh), on the patched interpreter:
#   cpython   CPython's own tests of what the patch touches
#   native    bufferext built from SRC (native mode: _bufferext.NATIVE == 1),
#             the suite (its C API test extensions deferring to the
#             interpreter's declarations), the parity table
#   stock     the cp313 wheel from WHEELHOUSE, built on stock CPython (an
#             extension of the header in backport mode, as PyPI would serve
#             it), the suite with the test extensions forced into backport
#             mode too (-DBUFFEREXT_FORCE_BACKPORT), the parity table
# then, here, tests/parity_diff.py: each table against STOCK_TABLE (stock
# CPython 3.13, backport mode) and tests/parity_allow.txt.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CI_DIR=$ROOT/.ci
CACHE=${BUFFEREXT_CI_CACHE:-/var/cache/bufferext-ci}
CHROOT=${NATIVE_CHROOT:-$CACHE/native-root}
CONFIGURE_FLAGS=""                     # a release build, as the stock one
NUMPY=numpy==2.5.5                     # newest with a cp313 sdist that builds here
# lean: no BLAS, no SIMD dispatch, none of the optional C++ kernels (SVML,
# Highway, x86-simd-sort), a debug build (-O0, NumPy's assertions on): what
# bufferext's tests need of NumPy.  Measured on 2 idle cores: 253 s with
# BLAS-free SIMD-free -O3, 181 s without the kernels, 64 s as here (the
# suite takes as long with it: 77 s against 80 s).
NUMPY_ARGS=(-Csetup-args=-Dallow-noblas=true -Csetup-args=-Ddisable-optimization=true
            -Csetup-args=-Ddisable-svml=true -Csetup-args=-Ddisable-highway=true
            -Csetup-args=-Ddisable-intel-sort=true -Csetup-args=-Dbuildtype=debug)

# shellcheck source=chroot.sh
source "$CI_DIR/chroot.sh"
# shellcheck source=cpython313.sh
source "$CI_DIR/cpython313.sh"

PATCHES=("$ROOT"/cpython/patches/*.patch)
PY=

numpy_dir() {     # where the interpreter's NumPy wheel is kept (in the chroot)
    echo "$(dirname "$(dirname "$PY")")/numpy-$(echo "$NUMPY ${NUMPY_ARGS[*]}" |
        sha256sum | cut -c1-12)"
}

build_numpy() {  # the interpreter's NumPy wheel, built once per interpreter
    local dir start
    dir=$(numpy_dir)
    if ls "$CACHE${dir#"$PREFIX_ROOT"}"/numpy-*.whl >/dev/null 2>&1; then
        say "numpy: cached $(basename "$CACHE${dir#"$PREFIX_ROOT"}"/numpy-*.whl)"
        return
    fi
    say "numpy: building $NUMPY from source (no BLAS, no SIMD dispatch, no optional kernels, -O0)"
    start=$(date +%s)
    in_root sh -c "rm -rf /np && $PY -m venv /np && /np/bin/python -m pip install -q --upgrade pip &&
        /np/bin/python -m pip wheel -q --no-cache-dir --no-deps --no-binary numpy -w $dir.tmp '$NUMPY' \
        ${NUMPY_ARGS[*]} >/np.log 2>&1 && rm -rf $dir && mv $dir.tmp $dir && rm -rf /np" || {
        tail -30 "$CHROOT/np.log"; return 1; }
    echo "$(( $(date +%s) - start ))" >"$CACHE${dir#"$PREFIX_ROOT"}/.build-seconds"
    say "numpy: built in $(cat "$CACHE${dir#"$PREFIX_ROOT"}/.build-seconds") s"
}

build_all() {
    local dsc
    open_root
    dsc=$(fetch_source)
    say "source: $(basename "$dsc") (python3.13/$SOURCE_SUITE) + ${#PATCHES[@]} patches"
    PY=$(build_cpython native "$CONFIGURE_FLAGS" python3.13 "${PATCHES[@]}")
    say "native: $(in_root "$PY" -VV)"
    build_numpy
}

native_jobs() {  # SRC WHEELHOUSE STOCK_TABLE OUT
    local src=$1 wheelhouse=$2 stock=$3 out=$4 whl rc=0 mode
    whl=$(ls "$wheelhouse"/bufferext-*-cp313-cp313-*manylinux*.whl 2>/dev/null | head -1)
    if [[ -z $whl ]]; then
        echo "no cp313 wheel in $wheelhouse (the wheels step makes it)"
        return 1
    fi
    rm -rf "$CHROOT/ci-native"
    mkdir -p "$CHROOT/ci-native/wheels"
    cp -a "$src" "$CHROOT/ci-native/src"
    cp -a "$CI_DIR" "$CHROOT/ci-native/dotci"
    cp "$whl" "$CHROOT/ci-native/wheels/"
    in_root env BUFFEREXT_NATIVE_JOBS="${BUFFEREXT_NATIVE_JOBS:-}" \
        /ci-native/dotci/native-inside.sh "$PY" "$(numpy_dir)" || rc=$?
    mkdir -p "$out"
    cp "$CHROOT"/ci-native/parity-*.json "$out/" 2>/dev/null || true
    local -A job_of=([native]=native [forced]=stock)
    for mode in native forced; do
        # only the tables of the jobs that ran (BUFFEREXT_NATIVE_JOBS)
        [[ " ${BUFFEREXT_NATIVE_JOBS:-${job_of[$mode]}} " == *" ${job_of[$mode]} "* ]] ||
            continue
        if [[ -f $out/parity-$mode.json ]]; then
            python3 "$src/tests/parity_diff.py" "$stock" "$out/parity-$mode.json" || rc=1
        else
            echo "parity: no table for $mode (its job failed)"
            rc=1
        fi
    done
    return "$rc"
}

case ${1:-} in
    build) build_all ;;
    test)
        shift
        build_all
        native_jobs "$@" ;;
    *) echo "usage: $0 build | test SRC WHEELHOUSE STOCK_TABLE OUT"; exit 2 ;;
esac
