#!/bin/sh
# Check every example of the documentation against the INSTALLED bufferext:
#   docs/examples/check.sh [python]
# compiles example.c as C99 and C++11/17 with -Wall -Wextra -Werror, builds
# it as an extension module with the C compiler (the setuptools build of
# docs/capi.rst is the recipe's, which tests/test_recipes.py builds),
# runs test_example.py, runs the Python snippets (snippets/*.py) and compares
# what they print with snippets/*.out, and checks that the README's code
# blocks are these tested files (check_readme.py).
set -eu
PY=${1:-python}
case $PY in */*) PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY");; esac
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
INC=$("$PY" -c "import bufferext; print(bufferext.get_include())")
PYINC=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
CC=${CC:-cc}
CXX=${CXX:-c++}
for std in c99 c11; do
    "$CC" -std=$std -Wall -Wextra -Werror -fsyntax-only \
        -I"$INC" -I"$PYINC" "$HERE/example.c"
done
cp "$HERE/example.c" "$WORK/example.cpp"
for std in c++11 c++17; do
    "$CXX" -std=$std -Wall -Wextra -Werror -fsyntax-only \
        -I"$INC" -I"$PYINC" "$WORK/example.cpp"
done
EXT=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
"$CC" -shared -fPIC -O2 -Wall -Wextra -Werror -I"$INC" -I"$PYINC" \
    "$HERE/example.c" -o "$WORK/bufferext_example$EXT"
cp "$HERE/test_example.py" "$WORK/"
(cd "$WORK" && "$PY" test_example.py)
for snippet in "$HERE"/snippets/*.py; do
    (cd "$WORK" && "$PY" "$snippet" >"$WORK/out") ||
        { echo "FAILED: $snippet"; exit 1; }
    # the printed output is what the docs show next to the code
    diff -u "${snippet%.py}.out" "$WORK/out" ||
        { echo "FAILED: $snippet prints something else"; exit 1; }
    echo "ok: $(basename "$snippet")"
done
"$PY" "$HERE/check_readme.py" "$HERE/../../README.md" "$HERE"
