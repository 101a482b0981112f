#!/usr/bin/env bash
# .ci/freethreaded.sh -- free-threaded CPython for bufferext's CI.  Debian
# packages no free-threaded interpreter, so this builds one from Debian's
# python3.13 source (the stable suite's; no 3.14/3.15 source is served) in
# the sid chroot of .ci/chroot.sh, twice: `--disable-gil` (3.13t) and
# `--disable-gil --with-thread-sanitizer` (3.13t-tsan).  Called by .ci/run
# (step `freethreaded`); runs on its own:
#
#   .ci/freethreaded.sh build            only make (or reuse) the interpreters
#   .ci/freethreaded.sh test SRC WHEELHOUSE
#                                        build, then the jobs below
#
# Built interpreters are cached outside the clone, in $BUFFEREXT_CI_CACHE
# (default /var/cache/bufferext-ci), one folder per key: the Debian source
# version, the configure flags and the chroot's compiler; the chroot lives
# there too (ft-root).  A later run on the same machine reuses them; a
# fresh machine builds them (measured on this project's 2-core machines:
# 5-12 min for 3.13t, 13-18 min for the TSan build).
#
# The jobs (.ci/freethreaded-inside.sh), on the free-threaded interpreter:
#   wheel     a -Werror wheel, repaired by auditwheel, installed with [test];
#             importing it leaves the GIL off
#   parallel  the whole suite from that wheel under pytest-run-parallel
#             (every test in two threads at once; thread_unsafe ones once),
#             the module's own declaration keeping the GIL off (a test that
#             turns it on fails); the C API test extension is built in it
#   mpi       the MPI suites on 2 ranks (mpi4py + mpich)
#   bench     benchmarks/bench_threads.py --quick (figures only)
#   tsan      bufferext built with -fsanitize=thread on the TSan interpreter:
#             tests/test_threads.py (the hostile 8-thread stress, the header
#             consumer raced): 0 reports on bufferext's state
#             (.ci/tsan_report.py sorts them)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CI_DIR=$ROOT/.ci
CACHE=${BUFFEREXT_CI_CACHE:-/var/cache/bufferext-ci}
# a sid chroot of its own, kept in the cache too (the sid step's runs beside
# it; a chroot reused between clones keeps the compiler the cached builds
# are keyed by)
CHROOT=${FT_CHROOT:-$CACHE/ft-root}
FLAVOURS=(ft tsan)
# Neither builds CPython's own test modules (_testcapi and friends, and
# Lib/test, which make install would byte-compile three times): bufferext's
# suite uses none of them.  The ThreadSanitizer build at -O1, as sanitizer
# builds usually are: on 2 idle cores it builds in 111 s (the -O3 default
# took 895 s beside the other stream's builds), and its reports keep their
# stacks (-g); it runs one test file, in a venv the 3.13t's pip fills (pip
# and the extension's build run on the 3.13t, not under TSan), so it goes
# without the modules neither needs (decimal's C half, sqlite).
declare -A CONFIGURE=(
    [ft]="--disable-gil --disable-test-modules"
    [tsan]="--disable-gil --with-thread-sanitizer --without-ensurepip --disable-test-modules OPT='-DNDEBUG -g -O1' py_cv_module__decimal=n/a py_cv_module__sqlite3=n/a"
)

# shellcheck source=chroot.sh
source "$CI_DIR/chroot.sh"
# shellcheck source=cpython313.sh
source "$CI_DIR/cpython313.sh"

build_all() {
    local dsc flavour
    open_root
    dsc=$(fetch_source)
    say "source: $(basename "$dsc") (python3.13/$SOURCE_SUITE)"
    for flavour in "${FLAVOURS[@]}"; do
        PY[$flavour]=$(build_cpython "$flavour" "${CONFIGURE[$flavour]}" python3.13t)
        say "$flavour: $(in_root env TSAN_OPTIONS=report_bugs=0 "${PY[$flavour]}" -VV)"
    done
}

# The jobs, in the chroot (.ci/freethreaded-inside.sh), on a snapshot of the
# tree; CPython's own ThreadSanitizer suppressions come from the source the
# interpreters were built from.
ft_jobs() {      # SRC WHEELHOUSE
    local src=$1 wheelhouse=$2 orig rc=0
    rm -rf "$CHROOT/ci-ft"
    mkdir -p "$CHROOT/ci-ft/wheelhouse"
    cp -a "$src" "$CHROOT/ci-ft/src"
    cp -a "$CI_DIR" "$CHROOT/ci-ft/dotci"
    orig=$(ls "$CACHE"/src/python3.13_*.orig.tar.xz | sort -V | tail -1)
    tar xf "$orig" -C "$CHROOT/ci-ft" --strip-components=3 \
        --wildcards '*/Tools/tsan/suppressions_free_threading.txt'
    # CPython's suppressions, then ours (each naming its upstream issue)
    cat "$CI_DIR/tsan.supp" >>"$CHROOT/ci-ft/suppressions_free_threading.txt"
    in_root env BUFFEREXT_TSAN_OPS="${BUFFEREXT_TSAN_OPS:-60000}" \
        BUFFEREXT_FT_JOBS="${BUFFEREXT_FT_JOBS:-}" \
        /ci-ft/dotci/freethreaded-inside.sh "${PY[ft]}" "${PY[tsan]}" \
        /ci-ft/suppressions_free_threading.txt || rc=$?
    mkdir -p "$wheelhouse"
    cp "$CHROOT"/ci-ft/wheelhouse/*.whl "$wheelhouse/" 2>/dev/null || true
    return "$rc"
}

declare -A PY=()
case ${1:-} in
    build) build_all ;;
    test)
        shift
        build_all
        ft_jobs "$@" ;;
    *) echo "usage: $0 build | test SRC WHEELHOUSE"; exit 2 ;;
esac
