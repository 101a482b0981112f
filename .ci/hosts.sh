#!/usr/bin/env bash
# .ci/hosts.sh -- MPI across several hosts, made of network namespaces on
# this one machine (docs/mpi-internals.rst, "Several hosts on one machine").
#
#   bash .ci/hosts.sh [SRC [VENV]]
#
# SRC: the source tree whose tests run (default: this checkout).  VENV: a
# virtual environment that already has bufferext, mpi4py, mpich,
# pytest-mpi and the test extra (.ci/run passes the clients step's); without
# it one is built under .ci-venvs/hosts from SRC.  HOSTS_COUNTS="2" runs
# on 2 hosts only (default "2 4").
#
# A bridge in a namespace of its own, one namespace per host with a veth to
# the bridge and an address in a private /24 that exists only there:
# nothing is added to the root namespace.  mpiexec runs in host 0's
# namespace with a machinefile of the hosts' addresses; hydra's ssh
# launcher is replaced by a script that runs each proxy in its host's
# namespace.  MPICH's transport is forced to TCP (left alone, UCX sees one
# machine and moves the bytes through shared memory, not over the links),
# and a probe proves it: every link's byte counters must grow by at least
# the payload sent across it.  Then the MPI-marked tests and the demo run
# on 2 and 4 hosts with 1 and 2 ranks per host, and a collective runs while
# one host's link is taken down: the MPI guard's watchdog must end the job,
# with its TIMEOUT message, within a bound.
#
# Names carry this script's PID, so that leftovers of a killed run never
# collide; they are swept at the next start.  Everything is removed at exit
# (EXIT/INT/TERM trap).  Without root or `ip netns` the step is skipped
# (exit 77, which .ci/run reports as SKIP).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=$(cd "${1:-$ROOT}" && pwd)
VENV=${2:-}
PREFIX=bufferext-hosts               # namespace names: $PREFIX-<pid>-...
TAG=$PREFIX-$$
NET=10.203.77                        # the private /24, inside the namespaces
HOST_COUNTS=(${HOSTS_COUNTS:-2 4})
PROBE_BYTES=$((16 << 20))            # per rank, to the next host
LINK_TIMEOUT=15                      # the watchdog's per-test timeout
LINK_BOUND=                          # the guard's worst case, and 10 s, from
                                     # the moment the link goes down
HANG_LIMIT=300                       # any job's last resort: reached by a
                                     # hang, never by a slow start
MPI_ENV=(MPIR_CVAR_CH4_NETMOD=ucx UCX_TLS=tcp,self)
WORK=
JOB=

skip() {
    printf '\n!!!! SKIPPED hosts: %s\n' "$1"
    printf '!!!! This is not a complete CI run: the final CI must run this step.\n'
    echo "NOTE: skipped: $1"
    exit 77
}

# ---- namespaces ------------------------------------------------------------

remove_namespace() {         # name: kill what runs in it, then delete it
    local pids try
    pids=$(ip netns pids "$1" 2>/dev/null || true)
    if [[ -n $pids ]]; then
        kill -KILL $pids 2>/dev/null || true
        for try in 1 2 3 4 5 6 7 8 9 10; do
            [[ -z $(ip netns pids "$1" 2>/dev/null || true) ]] && break
            sleep 0.1
        done
    fi
    ip netns del "$1" 2>/dev/null || true
}

our_namespaces() {           # [pid]: the namespaces of that run (any run)
    ip netns list | awk '{print $1}' | grep -E "^$PREFIX-${1:-[0-9]+}-" || true
}

sweep() {                    # leftovers of runs that were killed
    local ns pid swept=0
    for ns in $(our_namespaces); do
        pid=${ns#"$PREFIX"-}
        pid=${pid%%-*}
        if [[ $pid != "$$" ]] && kill -0 "$pid" 2>/dev/null &&
           grep -qa hosts.sh "/proc/$pid/cmdline" 2>/dev/null; then
            continue         # a run that is still going
        fi
        remove_namespace "$ns"
        rm -rf "${TMPDIR:-/tmp}/$PREFIX-$pid".*
        swept=$((swept + 1))
    done
    echo "swept $swept namespace(s) left by earlier runs"
}

cleanup() {
    local rc=$? ns
    trap - EXIT INT TERM
    [[ -n $JOB ]] && kill -KILL "$JOB" 2>/dev/null || true
    for ns in $(our_namespaces $$); do
        remove_namespace "$ns"
    done
    if [[ -n $(our_namespaces $$) ]]; then
        echo "cleanup: namespaces left behind: $(our_namespaces $$ | paste -sd' ')"
        rc=1
    fi
    [[ -n $WORK ]] && rm -rf "$WORK"
    exit "$rc"
}

make_hosts() {               # count
    local i br=$TAG-br
    ip -n "$br" link add br0 type bridge
    ip -n "$br" link set br0 up
    for ((i = 0; i < $1; i++)); do
        ip netns add "$TAG-h$i"
        ip -n "$br" link add "v$i" type veth peer name eth0 netns "$TAG-h$i"
        ip -n "$br" link set "v$i" master br0 up
        ip -n "$TAG-h$i" addr add "$NET.$((i + 1))/24" dev eth0
        ip -n "$TAG-h$i" link set eth0 up
        ip -n "$TAG-h$i" link set lo up
    done
}

link_bytes() {               # host -> "rx tx" of its link
    ip netns exec "$TAG-h$1" cat /sys/class/net/eth0/statistics/rx_bytes \
        /sys/class/net/eth0/statistics/tx_bytes | paste -sd' '
}

# ---- MPI across the hosts ---------------------------------------------------

write_launcher() {           # hydra: LAUNCHER [-x] HOST "proxy" args...
    cat >"$WORK/launch" <<EOF
#!/bin/sh
# hydra quotes the proxy command for a remote shell: run it through sh -c
[ "\$1" = -x ] && shift
host=\$1
shift
case \$host in
    $NET.*) exec ip netns exec "$TAG-h\$((\${host##*.} - 1))" sh -c "\$*" ;;
esac
echo "launch: unknown host \$host" >&2
exit 1
EOF
    chmod +x "$WORK/launch"
}

machinefile() {              # hosts ppn -> path
    local i file=$WORK/hosts-$1x$2
    for ((i = 1; i <= $1; i++)); do
        echo "$NET.$i:$2"
    done >"$file"
    echo "$file"
}

mpi_start() {                # dir hosts ppn seconds command...: in the background
    local dir=$1 hosts=$2 ppn=$3 limit=$4
    shift 4
    (cd "$dir" && exec timeout -k 5 "$limit" ip netns exec "$TAG-h0" \
        env "${MPI_ENV[@]}" "$VENV/bin/mpiexec" -f "$(machinefile "$hosts" "$ppn")" \
        -launcher ssh -launcher-exec "$WORK/launch" -n $((hosts * ppn)) "$@") &
    JOB=$!
}

mpi_wait() {                 # the job's exit status (in `wait`, a signal's
    local rc=0               # trap runs at once, not when the job ends)
    wait "$JOB" || rc=$?
    JOB=
    return "$rc"
}

mpirun() {                   # dir hosts ppn seconds command...: from host 0
    mpi_start "$@"
    mpi_wait
}

probe() {                    # hosts ppn: the payload must cross every link
    local hosts=$1 ppn=$2 i before=() rx tx rx0 tx0 need
    for ((i = 0; i < hosts; i++)); do
        before+=("$(link_bytes "$i")")
    done
    mpirun "$WORK" "$hosts" "$ppn" "$HANG_LIMIT" "$VENV/bin/python" \
        "$CI_DIR/hosts_probe.py" "$ppn" "$PROBE_BYTES"
    need=$((ppn * PROBE_BYTES))
    for ((i = 0; i < hosts; i++)); do
        read -r rx0 tx0 <<<"${before[i]}"
        read -r rx tx <<<"$(link_bytes "$i")"
        printf '  host %d link: +%d bytes in, +%d out (payload %d each way)\n' \
            "$i" $((rx - rx0)) $((tx - tx0)) "$need"
        if ((rx - rx0 < need || tx - tx0 < need)); then
            echo "FAIL: host $i's link carried less than the payload: the"
            echo "ranks did not talk over TCP (shared memory across the"
            echo "namespaces?); MPI environment: ${MPI_ENV[*]}"
            exit 1
        fi
    done
}

suite() {                    # hosts ppn: probe, the MPI-marked tests, the demo
    local hosts=$1 ppn=$2 log=$WORK/suite-$1x$2.log start=$(date +%s) counts
    echo "-- $hosts hosts x $ppn rank(s)"
    probe "$hosts" "$ppn"
    if ((hosts * ppn > 4)); then
        # as in the clients step: some of them need 4 or fewer processes
        echo "  the tests marked mpi run on 2 to 4 processes: the demo only"
        demo "$hosts" "$ppn"
        SUITES+=("$hosts hosts x $ppn: probe and demo")
        return
    fi
    mpirun "$WORK/tests" "$hosts" "$ppn" "$HANG_LIMIT" "$VENV/bin/python" -m pytest \
        -q -p no:cacheprovider --with-mpi -m mpi "${MPI_FILES[@]}" >"$log" 2>&1 ||
        { cat "$log"; echo "FAIL: the tests marked mpi on $hosts hosts x $ppn"; exit 1; }
    # one summary per rank (hydra may join lines of different ranks); the
    # ranks share pytest's temporary folder, and a warning that one could
    # not remove another's leftovers is no difference
    counts=$(grep -oE '[0-9]+ passed(, [0-9]+ [a-z]+)* in ' "$log" |
             sed -E 's/, [0-9]+ warnings?//; s/ in $//' | sort | uniq -c |
             sed 's/^ *//')
    if [[ $(wc -l <<<"$counts") != 1 || ${counts%% *} != $((hosts * ppn)) ]]; then
        cat "$log"
        echo "FAIL: expected the same summary from each of $((hosts * ppn)) ranks: $counts"
        exit 1
    fi
    echo "  pytest on each of the $((hosts * ppn)) ranks: ${counts#* } ($(( $(date +%s) - start )) s)"
    demo "$hosts" "$ppn"
    SUITES+=("$hosts hosts x $ppn: ${counts#* } per rank")
}

demo() {                     # hosts ppn: the heat equation, checked by itself
    local log=$WORK/demo-$1x$2.log
    mpirun "$WORK" "$1" "$2" "$HANG_LIMIT" "$VENV/bin/python" -m bufferext demo \
        --size 128 --steps 20 >"$log" 2>&1 ||
        { cat "$log"; echo "FAIL: the demo on $1 hosts x $2"; exit 1; }
    grep -E 'rank\(s\)|error' "$log" | sed 's/^/  demo: /'
}

link_down() {                # 2 hosts x 2 ranks; host 1's link goes down
    local log=$WORK/link-down.log start down seconds rc=0
    echo "-- 2 hosts x 2 ranks: host 1's link goes down during an Allreduce"
    cp "$CI_DIR/hosts_link_down.py" "$WORK/tests/tests/test_hosts_link_down.py"
    start=$(date +%s)
    mpi_start "$WORK/tests" 2 2 "$HANG_LIMIT" env \
        BUFFEREXT_HOSTS_READY="$WORK/ready" BUFFEREXT_HOSTS_DOWN="$WORK/down" \
        BUFFEREXT_MPI_TEST_TIMEOUT=$LINK_TIMEOUT "$VENV/bin/python" -m pytest \
        -q -p no:cacheprovider --with-mpi tests/test_hosts_link_down.py >"$log" 2>&1
    # however long four ranks take to start on a loaded machine (they wait
    # for the link to go down before the test, and its watchdog, start):
    # the job's own limit ends a start that hangs
    while [[ ! -e $WORK/ready ]] && kill -0 "$JOB" 2>/dev/null; do
        sleep 0.1
    done
    [[ -e $WORK/ready ]] || { cat "$log"; echo "FAIL: the collective never started"; exit 1; }
    ip -n "$TAG-h1" link set eth0 down
    touch "$WORK/down"
    down=$(date +%s)
    echo "  link of host 1 down $((down - start)) s after the start"
    mpi_wait || rc=$?
    seconds=$(( $(date +%s) - down ))
    cat "$log" | sed 's/^/  | /'
    ip -n "$TAG-h1" link set eth0 up
    if ((rc == 0)) || grep -qE '[0-9]+ passed' "$log"; then
        echo "FAIL: the Allreduces finished with host 1's link down (exit"
        echo "$rc): the traffic between the hosts did not use the links"
        exit 1
    fi
    if ((rc == 124 || rc == 137 || seconds > LINK_BOUND)); then
        echo "FAIL: the job ended $seconds s after the link went down (exit"
        echo "$rc); the guard's watchdog should have ended it within $LINK_BOUND s"
        exit 1
    fi
    grep -q "bufferext MPI: rank 0 of 4: TIMEOUT after $LINK_TIMEOUT s in tests/test_hosts_link_down.py::test_allreduce_after_a_link_went_down" "$log" ||
        { echo "FAIL: no TIMEOUT message of the MPI guard from rank 0"; exit 1; }
    echo "  ended $seconds s after the link went down (exit $rc, bound $LINK_BOUND s) with the guard's TIMEOUT message"
    LINK_SECONDS=$seconds
}

# ---- main ----------------------------------------------------------------------

main() {
    local start=$(date +%s) hosts ppn i most=0 rx tx totals=() counts
    CI_DIR=$ROOT/.ci
    [[ $(id -u) == 0 ]] || skip "network namespaces need root (ip netns)"
    command -v ip >/dev/null || skip "no ip command (iproute2)"
    ip netns list >/dev/null 2>&1 || skip "ip netns does not work here"
    sweep
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    local err
    err=$(ip netns add "$TAG-br" 2>&1) ||
        skip "cannot create a network namespace: $err"
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/$TAG.XXXXXX")
    if [[ -z $VENV ]]; then
        VENV=$ROOT/.ci-venvs/hosts
        echo "-- a virtual environment of its own: $VENV"
        rm -rf "$VENV"
        python3 -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q "$SRC[mpi]" pytest hypothesis 2>&1 |
            { grep -v "^WARNING: Location 'file:" || true; }
    fi
    "$VENV/bin/python" -c 'import bufferext, mpi4py, pytest_mpi
print("bufferext", bufferext.__version__, "from", bufferext.__file__)'
    "$VENV/bin/mpichversion" | grep -E 'Version|Device'
    echo "MPI environment: ${MPI_ENV[*]}"
    mkdir -p "$WORK/tests"
    cp -a "$SRC/tests" "$SRC/pyproject.toml" "$WORK/tests/"
    # the files with tests marked mpi (collecting the whole suite on every
    # rank costs more than the MPI tests themselves)
    MPI_FILES=($(cd "$WORK/tests" && grep -l 'mark\.mpi' tests/test_*.py))
    echo "files with tests marked mpi: ${MPI_FILES[*]}"
    # a stuck test: the watchdog writes, waits GRACE and aborts; should it
    # not get the GIL, faulthandler ends the rank FALLBACK_MARGIN later
    LINK_BOUND=$(cd "$WORK/tests/tests" && "$VENV/bin/python" -c "import _mpi_guard as g
print(int($LINK_TIMEOUT + g.GRACE + g.FALLBACK_MARGIN + 10))")

    for hosts in "${HOST_COUNTS[@]}"; do
        ((hosts > most)) && most=$hosts
    done
    make_hosts "$most"
    echo "$most hosts: namespaces $TAG-h0..h$((most - 1)) ($NET.1-$most/24), bridge in $TAG-br"
    write_launcher

    SUITES=()
    for hosts in "${HOST_COUNTS[@]}"; do
        for ppn in 1 2; do
            suite "$hosts" "$ppn"
        done
    done
    link_down
    for ((i = 0; i < most; i++)); do
        read -r rx tx <<<"$(link_bytes "$i")"
        totals+=("h$i $((rx >> 20))/$((tx >> 20))")
    done
    echo "bytes on the links over the run (MiB in/out): ${totals[*]}"
    printf '%s\n' "${SUITES[@]}"
    counts=${HOST_COUNTS[*]}
    echo "NOTE: ${counts// /+} hosts x 1,2 ranks over TCP (links: ${totals[*]} MiB in/out); ${SUITES[0]#*: }; link down: guard ended it in ${LINK_SECONDS} s; $(( $(date +%s) - start )) s"
}

main
