#!/usr/bin/env bash
# .ci/mutation.sh -- a bounded mutation run (mutmut) over the Python modules
# that judge what others hand us: _check.py, _bridges.py and
# distarray/_protocol.py.  Not part of .ci/run (it takes ~10 min on two
# cores); run it when those modules or their tests change:
#
#   bash .ci/mutation.sh            prints killed/survived per module
#   MUTATION_KEEP=DIR bash .ci/mutation.sh   keeps the work (mutmut show ...)
#   bash .ci/mutation.sh 'bufferext._check.x_load_target*'   only those
#   MUTATION_FILES="src/bufferext/_dtypes.py" MUTATION_TESTS="tests/test_lowp.py" \
#       bash .ci/mutation.sh 'bufferext._dtypes.x_host_view*'   other code
#   MUTATION_EXTRA="mpi4py mpich" MUTATION_FILES=src/bufferext/distarray/_comm.py \
#       MUTATION_TESTS=tests/test_launcher.py bash .ci/mutation.sh \
#       'bufferext.distarray._comm.x_launched*'   the launcher's proof
#
# mutmut wants the package under src/: the work happens in a copy of the
# tracked files with Lib/ renamed, the C extension built in place.  Tests
# that start a child interpreter in another directory (the CLI's) cannot
# see the mutant and are left out.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${MUTATION_KEEP:-$(mktemp -d "${TMPDIR:-/tmp}/bufferext-mutation.XXXXXX")}
PY=${PYTHON:-python3}
[[ -n ${MUTATION_KEEP:-} ]] || trap 'rm -rf "$WORK"' EXIT

rm -rf "$WORK/tree" "$WORK/venv"
mkdir -p "$WORK/tree"
git -C "$ROOT" ls-files -z | (cd "$ROOT" && xargs -0 tar -cf -) |
    tar -C "$WORK/tree" -xf -
"$PY" -m venv "$WORK/venv"
# MUTATION_EXTRA: more packages for the selected tests ("mpi4py mpich" for
# the launcher's, which start ranks under mpiexec)
"$WORK/venv/bin/python" -m pip install -q "mutmut>=3.3" numpy pytest \
    hypothesis "setuptools>=77" ml_dtypes pyarrow ${MUTATION_EXTRA:-} 2>&1 |
    { grep -v "^WARNING: Location" || true; }

cd "$WORK/tree"
# the extension and the installed header layout, in place under Lib/
"$WORK/venv/bin/python" setup.py -q build_ext --inplace >/dev/null
mkdir -p Lib/bufferext/include
cp -r Include/. Lib/bufferext/include/
mv Lib src
# MUTATION_FILES / MUTATION_TESTS (space-separated, under src/ and tests/)
# replace the modules and the tests, e.g. for the code one issue changed
files=${MUTATION_FILES:-"src/bufferext/_check.py src/bufferext/_bridges.py
    src/bufferext/distarray/_protocol.py"}
tests=${MUTATION_TESTS:-"tests/test_check.py tests/test_bridges.py
    tests/test_bridges_cuda.py tests/test_bridges_fuzz.py
    tests/test_bridges_messages.py tests/test_distarray_protocol.py
    tests/test_distarray_messages.py tests/test_distarray_examples.py
    tests/test_distarray_roundtrip.py tests/test_conformance_protocols.py
    tests/test_gate.py"}
{
    echo "[mutmut]"
    echo "source_paths=src/bufferext"
    echo "only_mutate="
    printf '    %s\n' $files
    echo "also_copy=tests"
    echo "pytest_add_cli_args_test_selection="
    printf '    %s\n' $tests
} >setup.cfg
cat >>setup.cfg <<'CFG'
pytest_add_cli_args=
    -p
    no:cacheprovider
    -k
CFG
# tests whose child interpreter cannot see the mutant (it imports the
# installed layout from elsewhere), as one -k expression
echo "    ${MUTATION_DESELECT:-not test_cli_reports_and_exits_0_for_a_conforming_producer}" >>setup.cfg
# Children of the tests import the mutated package too; the folder must
# exist before the interpreter starts (an absent path is cached as such).
mkdir -p mutants/src
PYTHONPATH=$PWD/mutants/src "$WORK/venv/bin/mutmut" run \
    --max-children "$(nproc)" "$@" >"$WORK/mutmut.log" 2>&1 || {
    tail -40 "$WORK/mutmut.log"; exit 1; }
cat >"$WORK/score.py" <<'PY'
import collections
import re
import sys

count = collections.defaultdict(collections.Counter)
for line in sys.stdin:
    m = re.match(r"bufferext\.([\w.]+?)\.x.*: (\w[\w ]*)$", line.strip())
    if m:
        count[m.group(1)][m.group(2)] += 1
for module, c in sorted(count.items()):
    tested = sum(c.values()) - c["no tests"] - c["not checked"]
    detected = tested - c["survived"] - c["timeout"]
    print(f"{module:22} detected {detected:4} of {tested:4} tested "
          f"({100 * detected / max(tested, 1):.1f} %): killed {c['killed']}, "
          f"survived {c['survived']}, timeout {c['timeout']}, "
          f"other {detected - c['killed']}; no tests {c['no tests']}")
PY
"$WORK/venv/bin/mutmut" results --all true 2>/dev/null |
    "$WORK/venv/bin/python" "$WORK/score.py"
