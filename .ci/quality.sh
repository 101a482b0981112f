#!/usr/bin/env bash
# .ci/quality.sh -- robustness jobs of bufferext: AddressSanitizer +
# UndefinedBehaviorSanitizer over the whole test suite (with the 10**6
# acquisition thread stress), fuzzing (atheris: coverage-guided on a plain
# build, its corpus replayed and more inputs run under the sanitizers),
# valgrind over the C-level tests on CPython 3.12, and a reference-leak run
# on a debug CPython (python3.11-dbg).
#
#   .ci/quality.sh                 every job, short fuzz budget (~8 min, 2 cores)
#   .ci/quality.sh --long          fuzz each harness FUZZ_LONG_SECONDS (600 s),
#                                  refleak and valgrind over all four C builds
#   .ci/quality.sh asan fuzz ...   only the named jobs
#
# Runs from a clean clone: installs what it needs (apt packages if missing,
# venvs under .ci-venvs/), builds from a copy of the tracked files (never
# from a stale build/), exits non-zero when any job fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CI_DIR=$ROOT/.ci
VENVS=$ROOT/.ci-venvs
# shellcheck source=lib.sh
source "$CI_DIR/lib.sh"          # ci_venv, ci_install, ci_tests, ci_snapshot
# .ci/run's scratch and snapshot when it runs this, else ones of its own
WORK=${CI_SCRATCH:-$VENVS/work}/quality
JOBS=(asan fuzz valgrind refleak)
LONG=0
FUZZ_SECONDS=${FUZZ_SECONDS:-12}
FUZZ_LONG_SECONDS=${FUZZ_LONG_SECONDS:-600}
STRESS=${BUFFEREXT_STRESS_ACQUIRES:-1000000}
# hypothesis examples of the re-entrancy harness (tests/test_hooks.py):
# the ASan job runs this many, valgrind a quarter
HOOKS_EXAMPLES=${BUFFEREXT_HOOKS_EXAMPLES:-250}
SAN_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
SAN_LDFLAGS="-fsanitize=address,undefined"
declare -a SUMMARY=()
FAILED=0

pyenv_python() {   # the newest pyenv CPython 3.$1
    local root
    root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
    ls -d "$root"/versions/3."$1".*/bin/python 2>/dev/null | sort -V | tail -1
}

banner() { printf '\n==== %s  [%s] ====\n' "$1" "$(date +%H:%M:%S)"; }

# unit NAME FUNCTION: run one job in a subshell, time it, record the outcome
unit() {
    local name=$1 start rc
    shift
    banner "$name"
    start=$(date +%s)
    set +e
    ( set -euo pipefail; "$@" )
    rc=$?
    set -e
    local took=$(( $(date +%s) - start ))
    if (( rc == 0 )); then
        SUMMARY+=("$(printf '%-10s ok      %5ss' "$name" "$took")")
    else
        SUMMARY+=("$(printf '%-10s FAILED  %5ss (exit %s)' "$name" "$took" "$rc")")
        FAILED=1
    fi
    printf -- '---- %s: exit %s after %ss\n' "$name" "$rc" "$took"
}

need_apt() {   # install Debian packages that are missing
    local missing=() pkg
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    (( ${#missing[@]} == 0 )) && return 0
    echo "apt-get install ${missing[*]}"
    ci_apt_get update -qq >/dev/null
    ci_apt_get install -y -qq "${missing[@]}" >/dev/null
}

hooks_report() {   # stats-file label: what the re-entrancy harness ran
    [[ -f $1 ]] || { echo "no harness figures in $1"; return 0; }
    python3 - "$1" "$2" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
total = {k: sum(r[k] for r in rows) for k in ("examples", "mutations",
                                            "hooks_fired")}
print(f"re-entrancy harness under {sys.argv[2]}: {total['examples']} operation "
      f"sequences, {total['mutations']} mutations, {total['hooks_fired']} "
      "hooks fired")
PY
}

san_env() {   # the environment every sanitized process runs with
    echo "LD_PRELOAD=$(gcc -print-file-name=libasan.so)" \
         "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1" \
         "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1" \
         "PYTHONMALLOC=malloc"
}

# ---- jobs -------------------------------------------------------------------

setup_asan() {
    local venv=$VENVS/asan so libs
    # bufferext builds without isolation (ci_install source): each venv
    # has what pyproject.toml's build-system requires (setuptools>=77)
    ci_venv "$venv" python3 numpy pytest hypothesis "setuptools>=77" wheel atheris pyarrow
    CC=gcc CFLAGS="$SAN_FLAGS" LDFLAGS="$SAN_LDFLAGS" ci_install "$venv" source
    so=$(ls "$venv"/lib/python3*/site-packages/bufferext/_bufferext*.so)
    # (ldd's output first: `ldd | grep -q` under pipefail fails whenever
    # grep exits before ldd has written everything)
    libs=$(ldd "$so")
    [[ $libs == *libasan* && $libs == *libubsan* ]] || {
        echo "the extension is not ASan+UBSan-instrumented: $so"; return 1; }
    echo "instrumented: $so"
}

do_asan() {
    setup_asan
    local log=$WORK/asan.log CI_LAUNCH
    rm -f "$WORK/hooks-asan.jsonl"
    # --capture=sys: the sanitizers report on fd 2, which pytest must not hold.
    # test_cpubuffer.py::test_no_leaks counts bytes with tracemalloc, whose
    # figures under PYTHONMALLOC=malloc (needed for ASan to see every heap
    # block) drift on exception paths with no leak; it runs in every plain
    # run, and the refleak job covers the same paths.
    CI_LAUNCH=(env $(san_env) timeout 1500)
    set +e
    BUFFEREXT_STRESS_ACQUIRES="$STRESS" BUFFEREXT_PROPERTY_EXAMPLES=150 \
        BUFFEREXT_HOOKS_EXAMPLES="$HOOKS_EXAMPLES" \
        BUFFEREXT_HOOKS_STATS="$WORK/hooks-asan.jsonl" \
        CFLAGS="$SAN_FLAGS" LDFLAGS="$SAN_LDFLAGS" \
        ci_tests "$VENVS/asan" all --capture=sys -rs --durations=5 \
        --deselect tests/test_cpubuffer.py::test_no_leaks 2>&1 \
        | tee "$log" | grep -v '^SKIPPED'
    local rc=${PIPESTATUS[0]}
    set -e
    grep -E 'acquisitions in' "$log" || true
    hooks_report "$WORK/hooks-asan.jsonl" "ASan+UBSan"
    if grep -qE 'ERROR: AddressSanitizer|runtime error:|LeakSanitizer' "$log"; then
        echo "sanitizer report in the log"; return 1
    fi
    return "$rc"
}

do_fuzz() {
    # Coverage-guided fuzzing needs atheris's own libFuzzer to own the
    # coverage symbols, which a preloaded libasan takes over: so the fuzzer
    # runs on a plain build, and every input it kept (the corpus: one per
    # new coverage feature) is then replayed under ASan+UBSan.
    local venv=$VENVS/fuzz tests=$WORK/tests-fuzz seconds=$FUZZ_SECONDS
    local corpus=$VENVS/fuzz-corpus name
    (( LONG )) && seconds=$FUZZ_LONG_SECONDS
    ci_venv "$venv" python3 numpy "setuptools>=77" wheel atheris
    ci_install "$venv" source
    [[ -x $VENVS/asan/bin/python ]] || setup_asan
    # the harnesses, out of the source tree: they import the installed package
    rm -rf "$tests" && mkdir -p "$tests" && cp -a "$CI_SRC/tests" "$tests/"
    cd "$tests"
    # The short (CI) run is reproducible: a fixed number of inputs from a
    # fixed seed, so it cannot fail one day and pass the next.  --long
    # explores for a fixed time from a random seed.  The corpus is kept
    # between runs (long runs build on short ones).
    local budget=(--runs 200000 --seed 1) asan_budget=(--runs 50000 --seed 1)
    if (( LONG )); then
        budget=(--seconds "$seconds")
        asan_budget=(--seconds $(( (seconds + 1) / 2 )))
    fi
    "$venv/bin/python" tests/fuzz/run.py "${budget[@]}" --workdir "$corpus"
    for name in fuzz_dlpack fuzz_interfaces fuzz_formats fuzz_dim_data \
            fuzz_exporters; do
        printf '%-16s under ASan+UBSan: ' "$name"
        env $(san_env) "$VENVS/asan/bin/python" "tests/fuzz/$name.py" \
            --replay "$corpus/$name/corpus"
    done
    # then mutations of that corpus under the sanitizers (libFuzzer without
    # coverage feedback there), half the time again
    env $(san_env) "$VENVS/asan/bin/python" tests/fuzz/run.py \
        "${asan_budget[@]}" --workdir "$VENVS/fuzz-asan" \
        --seed-corpus "$corpus"
}

do_valgrind() {
    local venv=$VENVS/py312 python CI_LAUNCH
    need_apt valgrind
    python=$(pyenv_python 12)
    [[ -n $python ]] || { echo "no CPython 3.12 found under pyenv"; return 1; }
    ci_venv "$venv" "$python" numpy pytest hypothesis "setuptools>=77" wheel
    ci_install "$venv" source
    CI_LAUNCH=(env PYTHONMALLOC=malloc timeout 1500 valgrind -q --error-exitcode=9
               --suppressions="$CI_DIR/quality.supp")
    # CPython 3.11.7 reports uninitialised reads in its own int code under
    # valgrind (tests/capi/README.md): 3.12 gives a clean baseline.
    local select="not c11 and not cxx11"
    (( LONG )) && select=""
    ci_tests "$venv" capi --capture=sys -k "$select"
    # the hostile-exporter corpus in this process (its children would escape
    # valgrind), the generated exporters, and the boundary regressions
    echo "-- valgrind: hostile corpus, generated exporters, boundaries"
    BUFFEREXT_CORPUS_IN_PROCESS=1 BUFFEREXT_PROPERTY_EXAMPLES=60 \
        ci_tests "$venv" hostile --capture=sys
    # the re-entrancy harness, in this process (the device part runs in a
    # child, which would escape valgrind: the ASan job covers it)
    echo "-- valgrind: the re-entrancy harness (tests/test_hooks.py)"
    rm -f "$WORK/hooks-valgrind.jsonl"
    BUFFEREXT_HOOKS_EXAMPLES=$(( HOOKS_EXAMPLES / 4 )) \
        BUFFEREXT_HOOKS_STATS="$WORK/hooks-valgrind.jsonl" \
        ci_tests "$venv" hooks --capture=sys -k "not device"
    hooks_report "$WORK/hooks-valgrind.jsonl" "valgrind"
}

do_refleak() {
    local venv=$VENVS/debug
    need_apt python3.11-dbg python3.11-venv
    ci_venv "$venv" python3.11-dbg numpy pytest "setuptools>=77" wheel
    "$venv/bin/python" -c 'import sys; assert hasattr(sys, "gettotalrefcount")'
    ci_install "$venv" source
    # numpy comes as a release-build wheel: its inline Py_INCREF does not
    # count in the debug interpreter's total while our Py_DECREF does, so
    # tests that create or export numpy arrays drift by construction and
    # are left out; every other C-level test runs 3+3 extra times.
    # The four builds of the test extension (C99, C11, C++11, C++17) run the
    # same header code: two of them by default, all four with --long.
    local select="not ndarray and not numpy_exporters"
    (( LONG )) || select="$select and not c11 and not cxx11"
    PYTHONPATH=$CI_DIR REFLEAK_WARMUP=3 REFLEAK_RUNS=3 PYTHONDEVMODE=1 \
        ci_tests "$venv" refleak -p refleak_plugin -W ignore::DeprecationWarning \
        -k "$select"
}

# ---- main -------------------------------------------------------------------

main() {
    local want=() job
    for arg in "$@"; do
        case $arg in
            --long) LONG=1 ;;
            -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}"; exit 0 ;;
            *) want+=("$arg") ;;
        esac
    done
    (( ${#want[@]} )) || want=("${JOBS[@]}")
    for job in "${want[@]}"; do
        [[ " ${JOBS[*]} " == *" $job "* ]] || { echo "unknown job '$job' (${JOBS[*]})"; exit 2; }
    done
    mkdir -p "$WORK"
    if [[ -z ${CI_SRC:-} ]]; then
        CI_SRC=$WORK/src
        ci_snapshot "$ROOT" "$CI_SRC" >/dev/null
    fi
    export CI_SRC CI_SCRATCH=$WORK
    echo "bufferext quality: $ROOT; jobs: ${want[*]}; fuzz $( (( LONG )) && echo "long ${FUZZ_LONG_SECONDS}" || echo "${FUZZ_SECONDS}") s per harness; thread stress $STRESS"
    local start=$(date +%s)
    for job in "${want[@]}"; do
        unit "$job" "do_$job"
    done
    banner "summary"
    printf '%s\n' "${SUMMARY[@]}"
    echo "total $(( $(date +%s) - start ))s"
    exit "$FAILED"
}

main "$@"
