"""Issue 32's two walks, measured: which files a call goes through, in order.

Walk 1 (C): a C consumer's extended get -- ``BufferExt_GetBuffer(obj, &ext,
PyBUF_FULL_RO | PyBUF_DEVICE)`` then ``BufferExt_Release`` -- on a
``bufferext.CUDABuffer`` (over the stand-in CUDA driver of
tests/cuda_standin, so no GPU is needed).  Measured: the files of the
extension (Modules/*.c, and the headers whose inline functions run) entered,
in order, from a ``-finstrument-functions`` build at -O0.

Walk 2 (Python): ``as_buffer(torch.arange(n))`` -> ``DistArray`` on one
process -> ``redistribute`` (first call, then a second one, its plan cached).
Measured with ``sys.setprofile``: the bufferext Python files entered (C
calls of the extension shown as ``C``), crossings of the C/Python line,
returns and calls into ``_array.py`` from an engine module, and (from the
instrumented build) entries into Modules/adapter.c.

Usage (a measurement tool, not a CI step; it rebuilds the tree's extension
IN PLACE, instrumented, so rebuild it normally afterwards)::

    python benchmarks/walks.py TREE [TREE ...]    # e.g. two git worktrees
    python benchmarks/walks.py TREE --no-build    # reuse the instrumented build
    python benchmarks/walks.py TREE --verbose     # every C function, too

TREE defaults to this checkout.  Needs gcc, addr2line, numpy and torch (CPU)
in the running interpreter; mpi4py is not needed (one process, no launcher).
Each TREE is built with ``CFLAGS="-O0 -g -finstrument-functions ..."
setup.py build_ext --inplace --force``, and the walks run in a child
interpreter with ``PYTHONPATH=TREE/Lib``.  The tool's C side (the hooks and
the consumer) is benchmarks/_walks.c, built against TREE's headers.

Reading the output: a "sequence" is the files execution is in, one entry
per run of events in the same file.  A "re-entry" is a call into a file that
the walk had already entered and left (the walk went down and back more
than once); a "call back" is a call into a file that is still on the stack
below another file (a lower layer calling a higher one).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from typing import Any, Dict, List, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINES = ("_redistribute.py", "_halo.py", "_collective.py")
ARRAY = os.path.join("distarray", "_array.py")
SIZE = 1000             # walk 2's tensor (the warm-up uses another size)


# -- the parent: build, run the child, report --------------------------------

def instrument_flags() -> str:
    """-O0 (every function a call) and the hooks around each, but not in
    system or Python headers."""
    skip = ["/usr/include", "/usr/lib/gcc", sysconfig.get_paths()["include"]]
    return ("-O0 -g -finstrument-functions "
            "-finstrument-functions-exclude-file-list=" + ",".join(skip))


def header_dir(tree: str) -> str:
    """bufferext.h as get_include() gives it, or the tree's Include/ (a
    checkout that was never installed editable has no Lib/bufferext/include)."""
    installed = os.path.join(tree, "Lib", "bufferext", "include")
    if os.path.isfile(os.path.join(installed, "bufferext.h")):
        return installed
    return os.path.join(tree, "Include")


def build_tree(tree: str) -> None:
    """TREE's extension, instrumented, in place (Lib/bufferext/)."""
    env = dict(os.environ, CFLAGS=instrument_flags())
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace",
                    "--force"], cwd=tree, env=env, check=True)


def build_helpers(tree: str, scratch: str) -> Tuple[str, str]:
    """The tool's module (against TREE's headers) and the stand-in CUDA
    driver (TREE's, else this checkout's), into ``scratch``; their paths."""
    cc = os.environ.get("CC") or "gcc"
    module = os.path.join(scratch, "_walks" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([cc, "-shared", "-fPIC", *instrument_flags().split(),
                    "-Wall", "-Wextra", "-I" + header_dir(tree),
                    "-I" + sysconfig.get_paths()["include"],
                    os.path.join(HERE, "_walks.c"), "-o", module, "-ldl",
                    "-lpthread"], check=True)
    standin = os.path.join(tree, "tests", "cuda_standin", "standin_cuda.c")
    if not os.path.isfile(standin):
        standin = os.path.join(HERE, "..", "tests", "cuda_standin",
                               "standin_cuda.c")
    driver = os.path.join(scratch, "libstandin_cuda.so")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-std=c11", standin, "-o",
                    driver, "-lpthread"], check=True)
    return module, driver


def measure(tree: str, build_it: bool) -> Dict[str, Any]:
    """Both walks on TREE, in a child interpreter."""
    if build_it:
        build_tree(tree)
    scratch = tempfile.mkdtemp(prefix="bufferext-walks-")
    try:
        module, driver = build_helpers(tree, scratch)
        env = dict(os.environ, BUFFEREXT_CUDA_DRIVER=driver, LD_PRELOAD=module,
                   PYTHONPATH=os.pathsep.join([os.path.join(tree, "Lib"),
                                               scratch]))
        out = subprocess.run([sys.executable, os.path.abspath(__file__),
                              "--child", tree], env=env, cwd=scratch,
                             stdout=subprocess.PIPE, check=True, text=True)
        return json.loads(out.stdout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def report(tree: str, r: Dict[str, Any], verbose: bool) -> None:
    print(f"== {tree}  ({r['commit']})")
    print("walk 1: C consumer, extended get + release of a CUDABuffer "
          f"(device memory: {r['walk1']['device']})")
    for op in r["walk1"]["ops"]:
        _print_c(op, verbose)
    print("walk 2: as_buffer(torch tensor) -> DistArray -> redistribute")
    for phase in r["walk2"]:
        print(f"  -- {phase['name']}")
        print(f"     C/Python crossings: {phase['crossings']} "
              f"(Python->C {phase['py_to_c']}, C->Python {phase['c_to_py']})")
        for line in phase["crossing_list"]:
            print(f"        {line}")
        into_c, into_py = phase["c_crossings"]
        print(f"     as the instrumented build sees them (type slots too): "
              f"Python->C {into_c}, C->Python {into_py}")
        print(f"     entries into Modules/adapter.c: {phase['adapter_entries']}")
        print(f"     into _array.py from an engine: {phase['array_returns']} "
              f"returns, {phase['array_calls']} calls")
        print(f"     Python files ({len(phase['py_sequence']) - 1} transitions, "
              f"re-entries {phase['py_reentries']}, call backs "
              f"{phase['py_callbacks']}):")
        print("        " + " > ".join(phase["py_sequence"]))
        _print_c(phase["c"], verbose, indent="     ")


def _print_c(op: Dict[str, Any], verbose: bool, indent: str = "  ") -> None:
    for title, shape in ((op["name"], op), ("  without leaf calls",
                                            op["layers"])):
        seq = shape["sequence"]
        print(f"{indent}{title}: {len(seq) - 1} file transitions, "
              f"{shape['reentries']} re-entries, {shape['callbacks']} call "
              f"backs, {shape['calls']} calls")
        print(f"{indent}   " + " > ".join(seq))
    if verbose:
        for depth, fn, path in op["calls_list"]:
            print(f"{indent}     {'  ' * depth}{fn or '(Python)'}  ({path})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="*", default=[os.path.dirname(HERE)])
    parser.add_argument("--no-build", action="store_true",
                        help="the trees' extensions are already instrumented")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        json.dump(child(os.path.abspath(args.child)), sys.stdout)
        return 0
    results = {}
    for tree in args.trees:               # serially: builds are heavy
        tree = os.path.abspath(tree)
        results[tree] = measure(tree, not args.no_build)
        report(tree, results[tree], args.verbose)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


# -- the child: the walks ----------------------------------------------------

class Symbols:
    """(object path, offset) -> (function, file relative to the tree)."""

    def __init__(self, tree: str) -> None:
        self.tree = tree
        self.known: Dict[Tuple[str, int], Tuple[str, str]] = {}

    def resolve(self, log: List[Tuple[bool, str, int]]) -> None:
        wanted: Dict[str, set] = {}
        for _, path, off in log:
            if (path, off) not in self.known:
                wanted.setdefault(path, set()).add(off)
        self.known[("", 0)] = ("", "Python")     # a mark (_walks.mark)
        wanted.pop("", None)
        for path, offs in wanted.items():
            offs_l = sorted(offs)
            out = subprocess.run(["addr2line", "-f", "-e", path] +
                                 [hex(o) for o in offs_l], check=True,
                                 stdout=subprocess.PIPE, text=True).stdout.split("\n")
            for i, off in enumerate(offs_l):
                fn, where = out[2 * i], out[2 * i + 1].split(":")[0]
                self.known[(path, off)] = (fn, self.rel(where))

    def rel(self, path: str) -> str:
        path = os.path.normpath(path)
        for base in (self.tree, os.path.join(self.tree, "Lib", "bufferext")):
            if path.startswith(base + os.sep):
                path = os.path.relpath(path, base)
        return path.replace("include" + os.sep, "Include" + os.sep, 1) \
            if path.startswith("include" + os.sep) else path

    def events(self, log: List[Tuple[bool, str, int]]
               ) -> List[Tuple[bool, str, str]]:
        self.resolve(log)
        return [(enter, *self.known[(path, off)]) for enter, path, off in log]


def walk_shape(name: str, events: List[Tuple[bool, str, str]],
               top: str) -> Dict[str, Any]:
    """The file sequence of a log of (enter, function, file) events, with
    its re-entries and call backs; and the same without leaf calls."""
    out = _shape(events, top)
    out.update(name=name, layers=_shape(no_leaves(events), top))
    return out


def no_leaves(events: List[Tuple[bool, str, str]]
              ) -> List[Tuple[bool, str, str]]:
    """The log less the C calls that call nothing (an accessor, a header's
    one-liner): the layers a walk goes through, without their helpers."""
    leaf = set()
    for i in range(len(events) - 1):
        (enter, fn, path), nxt = events[i], events[i + 1]
        if enter and not nxt[0] and nxt[1:] == (fn, path) and path != "Python":
            leaf.update((i, i + 1))
    return [ev for i, ev in enumerate(events) if i not in leaf]


def _shape(events: List[Tuple[bool, str, str]], top: str) -> Dict[str, Any]:
    stack: List[str] = [top]
    seq = [top]
    left: set = set()               # files entered and since returned from
    reentries = callbacks = calls = 0
    calls_list = []
    for enter, fn, path in events:
        if enter:
            calls += path != "Python"
            calls_list.append((len(stack) - 1, fn, path))
            if path != stack[-1]:
                if path in stack:
                    callbacks += 1
                elif path in left:
                    reentries += 1
            stack.append(path)
        else:
            done = stack.pop()
            if done not in stack:
                left.add(done)
        if stack[-1] != seq[-1]:
            seq.append(stack[-1])
    return {"sequence": seq, "reentries": reentries, "callbacks": callbacks,
            "calls": calls, "calls_list": calls_list}


def entries(events: List[Tuple[bool, str, str]], path: str) -> int:
    """Calls into ``path`` from another file (or from outside the
    extension)."""
    stack: List[str] = []
    count = 0
    for enter, _, where in events:
        if enter:
            count += where == path and (not stack or stack[-1] != path)
            stack.append(where)
        else:
            stack.pop()
    return count


def c_crossings(events: List[Tuple[bool, str, str]]) -> Tuple[int, int]:
    """(calls from Python into the extension, calls from it into Python),
    as the instrumented build sees them: buffer slots and other type slots
    included, which sys.setprofile does not report."""
    stack: List[str] = ["Python"]
    into_c = into_py = 0
    for enter, _, path in events:
        if enter:
            into_c += stack[-1] == "Python" and path != "Python"
            into_py += stack[-1] != "Python" and path == "Python"
            stack.append(path)
        else:
            stack.pop()
    return into_c, into_py


def split_top(events: List[Tuple[bool, str, str]]
              ) -> List[List[Tuple[bool, str, str]]]:
    """The log cut into its top-level calls."""
    out: List[List[Tuple[bool, str, str]]] = []
    depth = 0
    for ev in events:
        if depth == 0:
            out.append([])
        out[-1].append(ev)
        depth += 1 if ev[0] else -1
    return out


def child(tree: str) -> Dict[str, Any]:
    # _walks is preloaded (LD_PRELOAD): its hooks come before glibc's empty
    # ones in the lookup order; the programs this child runs go without it
    os.environ.pop("LD_PRELOAD", None)
    import _walks
    import numpy as np
    import torch
    import bufferext
    from bufferext.distarray import DistArray

    if not bufferext.__file__.startswith(os.path.join(tree, "Lib") + os.sep):
        raise SystemExit(f"bufferext imported from {bufferext.__file__}, "
                         f"not {tree}")
    commit = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"],
                            stdout=subprocess.PIPE, text=True).stdout.strip()
    symbols = Symbols(tree)

    # walk 1: one warm-up (lazy set-up), then the walk
    buf = bufferext.CUDABuffer((4, 5), "float32")
    _walks.get_release(buf)
    _walks.start()
    device = _walks.get_release(buf)
    log = _walks.stop()
    ops = [walk_shape(name, part, "consumer")
           for name, part in zip(("BufferExt_GetBuffer", "BufferExt_Release"),
                                 split_top(symbols.events(log)))]
    del buf
    walk1 = {"device": device, "ops": ops}

    # walk 2: a warm-up of another size (imports, first-use set-up; its plans
    # are not the measured ones), then as_buffer -> DistArray -> two
    # redistributes, each measured alone
    def steps(n: int, run: Any) -> None:
        t = torch.arange(n, dtype=torch.float32)
        maps = DistArray.from_global(np.zeros(n, np.float32), dist="b").maps
        d = run("as_buffer(tensor) -> DistArray",
                lambda: DistArray(bufferext.as_buffer(t), maps))
        e = run("redistribute, first call", lambda: d.redistribute(
            dist="c", block_size=4))
        again = run("redistribute, second call (plan cached)",
                    lambda: d.redistribute(dist="c", block_size=4))
        assert np.array_equal(np.asarray(e.local), t.numpy()[:]), "wrong result"
        assert np.array_equal(np.asarray(again.local), t.numpy()[:])

    steps(SIZE + 1, lambda name, fn: fn())
    phases: List[Dict[str, Any]] = []

    def run(name: str, fn: Any) -> Any:
        prof = Profile(tree, _walks.mark)
        _walks.start()
        sys.setprofile(prof)
        try:
            return fn()
        finally:
            sys.setprofile(None)
            log = _walks.stop()
            phase = prof.figures(name)
            events = symbols.events(log)
            phase["c"] = walk_shape("C side", events, "Python")
            phase["adapter_entries"] = entries(events, os.path.join("Modules",
                                                                    "adapter.c"))
            phase["c_crossings"] = c_crossings(events)
            phases.append(phase)

    steps(SIZE, run)
    return {"commit": commit, "walk1": walk1, "walk2": phases}


class Profile:
    """A sys.setprofile function keeping a stack of Python frames and C
    calls, each labelled: a bufferext Python file (relative to the
    package), ``C`` for a function of bufferext's extension, or ``other``."""

    def __init__(self, tree: str, mark: Any) -> None:
        self.mark = mark
        self.pkg = os.path.join(tree, "Lib", "bufferext") + os.sep
        self.stack: List[str] = []
        self.seq = ["caller"]
        self.py_to_c = self.c_to_py = 0
        self.crossings: List[str] = []
        self.array_returns = self.array_calls = 0
        self.left: set = set()
        self.reentries = self.callbacks = 0

    def label_code(self, frame: Any) -> str:
        path = frame.f_code.co_filename
        return path[len(self.pkg):] if path.startswith(self.pkg) else "other"

    @staticmethod
    def is_bufferext_c(fn: Any) -> bool:
        if getattr(fn, "__module__", None) == "bufferext._bufferext":
            return True
        owner = getattr(fn, "__self__", None)
        if owner is None:
            return False
        owner = owner if isinstance(owner, type) else type(owner)
        mod = getattr(owner, "__module__", "") or ""
        return (mod.split(".")[0] == "bufferext" and
                not hasattr(owner.__dict__.get(fn.__name__), "__code__") and
                owner.__flags__ & (1 << 9) == 0)   # not a Python class

    def location(self) -> str:
        """The innermost bufferext label (Python file or C) on the stack."""
        return next((s for s in reversed(self.stack) if s != "other"), "caller")

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        top = self.stack[-1] if self.stack else "caller"
        before = self.location()
        if event == "call":
            self.mark(True)
            label = self.label_code(frame)
            if top == "C":
                self.c_to_py += 1
                self.crossings.append(f"C -> {frame.f_code.co_qualname} "
                                      f"({label})")
        elif event == "c_call":
            label = "C" if self.is_bufferext_c(arg) else "other"
            if label == "C":
                self.py_to_c += 1
                self.crossings.append(f"{top} -> C {arg.__qualname__}")
        elif self.stack:                # a return of any kind
            if event == "return":
                self.mark(False)
            done = self.stack.pop()
            if done not in self.stack:
                self.left.add(done)
            label = ""
        else:                           # the frame that started the profile
            return
        if label:
            self.enter(label, before)
        after = self.location()
        if after == before:
            return
        self.seq.append(after)
        if after == ARRAY:
            if before.endswith(ENGINES) and label:
                self.array_calls += 1
            elif before.endswith(ENGINES):
                self.array_returns += 1

    def enter(self, label: str, before: str) -> None:
        if label not in ("other", before):
            if label in self.stack:
                self.callbacks += 1
            elif label in self.left:
                self.reentries += 1
        self.stack.append(label)

    def figures(self, name: str) -> Dict[str, Any]:
        return {"name": name, "py_to_c": self.py_to_c, "c_to_py": self.c_to_py,
                "crossings": self.py_to_c + self.c_to_py,
                "crossing_list": self.crossings,
                "array_returns": self.array_returns,
                "array_calls": self.array_calls,
                "py_sequence": self.seq, "py_reentries": self.reentries,
                "py_callbacks": self.callbacks}


if __name__ == "__main__":
    sys.exit(main())
