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
# newer than the host's), the whole suite from that wheel (.ci/lib.sh's
# suite, as every step), mypy --strict + stubtest, and every Modules/*.c
# compiled with -DPy_GIL_DISABLED against that interpreter's headers (a
# check of the API surface on 3.14 and 3.15; the freethreaded step builds
# and runs a free-threaded 3.13t).
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
minor=$1 v=/ci/venv-$1
source /ci/dotci/lib.sh
export CI_SRC=/ci/src CI_SCRATCH=/ci CI_WHEELHOUSE=/ci/wheelhouse
suite "$v" "python$minor" wheel all

echo "-- $minor: mypy --strict + stubtest"
ci_pip "$v/bin/python" install -q "mypy>=1.18"
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
