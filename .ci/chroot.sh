# .ci/chroot.sh -- the Debian sid chroot that .ci/sid.sh (CPython 3.14/3.15)
# and .ci/freethreaded.sh (free-threaded CPython 3.13t) run in.  Sourced,
# not run.  Never install sid packages onto this Debian 12 host: its libc
# is older.
#
#   CHROOT=DIR; chroot_open PACKAGE...   make or reuse the chroot, mount
#                                         /proc, /dev/shm, /dev/pts, install
#                                         what is missing; unmounted at exit
#   in_root CMD...                        run in it with a clean environment
#   apt_in_root ARGS...                   apt-get in it (sid's Release file
#                                         may be past its Valid-Until date)
#
# A fresh machine makes the chroot in ~1 min (debootstrap, 223 MB), then
# installs packages in ~1 min.  Needs root.

CHROOT_MIRROR=${CHROOT_MIRROR:-http://deb.debian.org/debian}

say() { printf -- '-- %s [%s]\n' "$*" "$(date +%H:%M:%S)"; }

chroot_mounted=()
chroot_unmount_all() {
    local i
    for (( i = ${#chroot_mounted[@]} - 1; i >= 0; i-- )); do
        umount -l "${chroot_mounted[i]}" 2>/dev/null || true
    done
    chroot_mounted=()
}

chroot_bind() {  # host-dir chroot-relative-dir [proc]
    mkdir -p "$CHROOT$2"
    if [[ ${3:-} == proc ]]; then
        mount -t proc proc "$CHROOT$2"
    else
        mount --bind "$1" "$CHROOT$2"
    fi
    chroot_mounted+=("$CHROOT$2")
}

in_root() {
    chroot "$CHROOT" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin \
        LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
        PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 "$@"
}

apt_in_root() {
    in_root env DEBIAN_FRONTEND=noninteractive apt-get \
        -o Acquire::Check-Valid-Until=false -o Dpkg::Use-Pty=0 -qq "$@"
}

chroot_open() {  # packages...
    if [[ $(id -u) != 0 ]]; then
        echo "the sid chroot needs root (debootstrap, chroot, mount)"
        return 1
    fi
    if [[ ! -x $CHROOT/usr/bin/apt-get || ! -f $CHROOT/.bufferext-ready ]]; then
        if ! command -v debootstrap >/dev/null; then
            say "apt-get install debootstrap"
            apt-get update -qq >/dev/null
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
        fi
        rm -rf "$CHROOT"
        mkdir -p "$(dirname "$CHROOT")"
        say "debootstrap --variant=minbase sid"
        debootstrap --variant=minbase sid "$CHROOT" "$CHROOT_MIRROR" >"$CHROOT.log" 2>&1 || {
            tail -20 "$CHROOT.log"; return 1; }
    fi
    trap chroot_unmount_all EXIT
    chroot_bind /proc /proc proc
    chroot_bind /dev/shm /dev/shm
    chroot_bind /dev/pts /dev/pts
    cp /etc/resolv.conf "$CHROOT/etc/resolv.conf"
    # pip inside verifies TLS with the host's extra CA certificates
    mkdir -p "$CHROOT/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$CHROOT/usr/local/share/ca-certificates/" \
        2>/dev/null || true
    if [[ ! -f $CHROOT/.bufferext-ready ]] || \
            ! in_root dpkg -s "$@" >/dev/null 2>&1; then
        say "apt-get install $*"
        apt_in_root update
        apt_in_root install -y --no-install-recommends "$@" >/dev/null
        touch "$CHROOT/.bufferext-ready"
    fi
    in_root update-ca-certificates >/dev/null 2>&1 || true
    say "chroot: $(in_root sh -c 'ldd --version | head -1')"
}
