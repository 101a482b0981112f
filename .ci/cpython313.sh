# .ci/cpython313.sh -- CPython 3.13 built from the source Debian serves (the
# stable suite's python3.13; no 3.14/3.15 source is served), in a sid chroot
# (.ci/chroot.sh), cached outside the clone.  Sourced by .ci/freethreaded.sh
# (3.13t and its ThreadSanitizer build) and .ci/native.sh (the draft patched
# in, cpython/); not run.
#
#   CACHE=DIR CHROOT=DIR; source chroot.sh; source cpython313.sh
#   open_root                      the chroot with the build dependencies,
#                                  the cache bound at /opt/bufferext-py
#   DSC=$(fetch_source)            the source, downloaded once into the cache
#   build_cpython NAME "FLAGS" EXE [PATCHES...]
#                                  ./configure FLAGS, make, make install into
#                                  the cache (or reuse it): prints EXE's path
#                                  in the chroot.  The cache key: the Debian
#                                  source version, NAME, the configure flags,
#                                  the chroot's compiler and the patches.
#
# A fresh machine builds one interpreter in 5-15 min (2 cores).

PREFIX_ROOT=/opt/bufferext-py          # the cache, as the chroot sees it
SOURCE_SUITE=trixie                    # the suite whose python3.13 source is served
BUILD_DEPS=(build-essential pkg-config libffi-dev zlib1g-dev libssl-dev libbz2-dev
            liblzma-dev libsqlite3-dev libreadline-dev uuid-dev xz-utils dpkg-dev
            ca-certificates python3-minimal)

open_root() {
    mkdir -p "$CACHE/src"
    chroot_open "${BUILD_DEPS[@]}"
    chroot_bind "$CACHE" "$PREFIX_ROOT"
    local list=$CHROOT/etc/apt/sources.list.d/bufferext-src.list
    if [[ ! -f $list ]]; then
        echo "deb-src $CHROOT_MIRROR $SOURCE_SUITE main" >"$list"
        apt_in_root update
    fi
}

# The served source, downloaded once into the cache (apt skips a file it has).
fetch_source() {
    in_root sh -c "cd $PREFIX_ROOT/src && apt-get -o Acquire::Check-Valid-Until=false -qq \
        source --download-only python3.13/$SOURCE_SUITE >/dev/null"
    ls "$CACHE"/src/python3.13_*.dsc | sort -V | tail -1
}

cpython_key() {  # dsc name flags patches... -> cache key
    local version name=$2 flags=$3 hash
    version=$(basename "$1" .dsc | sed 's/^python3.13_//')
    shift 3
    hash=$( { echo "$flags"; in_root gcc -dumpfullversion; cat "$@" </dev/null; } |
            sha256sum | cut -c1-12)
    echo "cpython-$version-$name-$hash"
}

build_cpython() {  # name flags exe [patches...] -> the interpreter's path (in the chroot)
    local name=$1 flags=$2 exe=$3
    shift 3
    local dsc key prefix orig start patch
    dsc=$(ls "$CACHE"/src/python3.13_*.dsc | sort -V | tail -1)
    key=$(cpython_key "$dsc" "$name" "$flags" "$@")
    prefix=$PREFIX_ROOT/$key
    if [[ -f $CACHE/$key/.complete ]]; then
        say "$name: cached $key" >&2
        echo "$prefix/bin/$exe"
        return
    fi
    orig=$(ls "$CACHE"/src/python3.13_*.orig.tar.xz | sort -V | tail -1)
    say "$name: building $key from $(basename "$orig") ($flags${*:+; $# patches})" >&2
    start=$(date +%s)
    rm -rf "$CACHE/$key" "$CHROOT/build-$name"
    mkdir -p "$CHROOT/build-$name"
    tar xf "$orig" -C "$CHROOT/build-$name" --strip-components=1
    for patch in "$@"; do
        patch -s -p1 -d "$CHROOT/build-$name" <"$patch" >&2
    done
    in_root sh -c "cd /build-$name && ./configure -q $flags \
        --prefix=$prefix >/build-$name/configure.log 2>&1 &&
        make -j$(nproc) >/build-$name/make.log 2>&1 &&
        make install >/build-$name/install.log 2>&1" >&2 || {
        tail -30 "$CHROOT"/build-"$name"/*.log >&2; return 1; }
    rm -rf "$CHROOT/build-$name"
    echo "$(( $(date +%s) - start ))" >"$CACHE/$key/.build-seconds"
    touch "$CACHE/$key/.complete"
    say "$name: built in $(cat "$CACHE/$key/.build-seconds") s" >&2
    echo "$prefix/bin/$exe"
}
