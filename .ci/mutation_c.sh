#!/usr/bin/env bash
# .ci/mutation_c.sh -- the mutation score of the C code that holds the
# re-entrancy rule and the owner checks: every planted bug of
# .ci/mutants_c.py (a dropped pin, re-read, owner check or mark) built in
# turn, and the tests that must notice run against it.  Not part of
# .ci/run (about 1 min per mutant on two cores); run it when that code or
# its tests change:
#
#   bash .ci/mutation_c.sh            every mutant; prints killed/survived
#   bash .ci/mutation_c.sh 'copy'     only mutants whose name contains it
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${MUTATION_KEEP:-$(mktemp -d "${TMPDIR:-/tmp}/bufferext-mutation-c.XXXXXX")}
[[ -n ${MUTATION_KEEP:-} ]] || trap 'rm -rf "$WORK"' EXIT

pyenv_python() {
    local root
    root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
    ls -d "$root"/versions/"$1".*/bin/python 2>/dev/null | sort -V | tail -1
}

for minor in 3.11 3.12 3.13; do
    venv=$WORK/venv-$minor
    if [[ ! -x $venv/bin/python ]]; then
        "$(pyenv_python "$minor")" -m venv "$venv"
        # pyarrow and ml_dtypes: test_arrow.py and test_lowp.py skip without
        "$venv/bin/python" -m pip install -q numpy pytest hypothesis \
            "setuptools>=77" pyarrow ml_dtypes greenlet 2>&1 | { grep -v "^WARNING: Location" || true; }
    fi
done

python3 - "$ROOT" "$WORK" "${1:-}" <<'PY'
import os, shutil, subprocess, sys
root, work, only = sys.argv[1:4]
sys.path.insert(0, os.path.join(root, ".ci"))
from mutants_c import MUTANTS

files = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True,
                       text=True, check=True).stdout.split()
killed = survived = 0
for name, path, old, new, minor, tests in MUTANTS:
    if only and only not in name:
        continue
    tree = os.path.join(work, "tree")
    shutil.rmtree(tree, ignore_errors=True)
    for f in files:
        os.makedirs(os.path.dirname(os.path.join(tree, f)), exist_ok=True)
        shutil.copy2(os.path.join(root, f), os.path.join(tree, f))
    target = os.path.join(tree, path)
    text = open(target).read()
    pairs = old if new is None else [(old, new)]
    stale = [o for o, _ in pairs if text.count(o) != 1]
    if stale:
        print(f"STALE    {name}: a planted text does not occur exactly once")
        survived += 1
        continue
    for o, n in pairs:
        text = text.replace(o, n)
    open(target, "w").write(text)
    py = os.path.join(work, f"venv-{minor}", "bin", "python")
    build = subprocess.run([py, "setup.py", "-q", "build_ext", "--inplace"],
                           cwd=tree, capture_output=True, text=True)
    if build.returncode != 0:
        print(f"BUILD    {name}: does not compile (killed)\n{build.stderr[-400:]}")
        killed += 1
        continue
    shutil.copytree(os.path.join(tree, "Include"),
                    os.path.join(tree, "Lib", "bufferext", "include"))
    env = dict(os.environ, PYTHONPATH=os.path.join(tree, "Lib"),
               BUFFEREXT_HOOKS_EXAMPLES="30")
    run = subprocess.run([py, "-m", "pytest", "-x", "-q", "-p",
                          "no:cacheprovider", *tests], cwd=tree, env=env,
                         capture_output=True, text=True, timeout=1800)
    if run.returncode == 0:
        print(f"SURVIVED {name} ({minor}: {' '.join(tests)})")
        survived += 1
    else:
        last = [l for l in run.stdout.splitlines() if l.strip()][-1:]
        print(f"killed   {name} ({minor}, rc {run.returncode}: {last[0][:90] if last else ''})")
        killed += 1
    sys.stdout.flush()
print(f"mutation score: {killed} killed of {killed + survived}")
PY
