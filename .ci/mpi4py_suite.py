"""Run mpi4py's own test suite with bufferext.CPUBuffer as its array backend.

usage: mpi4py_suite.py TESTDIR [--min-tests N] [main.py args]

TESTDIR is the test/ directory of mpi4py's sdist, of the mpi4py version that
is installed (.ci/run downloads it).  Nothing of mpi4py is patched or copied:
this script imports the suite's own ``arrayimpl`` module, replaces its list
of array backends by one that wraps bufferext.CPUBuffer, and runs the
suite's own ``main.py`` driver (its options, e.g. ``-v``, ``-x PATTERN``,
pass through).  Run it on one process or under ``mpiexec -n N``.

The backend hands MPI the CPUBuffer itself (mpi4py takes it through the
buffer protocol, as any message buffer); only the harness's own reads and
writes of element values go through a NumPy view of the same memory.

Exit status: non-zero when a test failed, or when fewer than --min-tests
tests handed a CPUBuffer to MPI (a run that silently stopped using our
backend -- a renamed hook, a module that no longer loops over arrayimpl --
must not pass).
"""

from __future__ import annotations

import argparse
import os
import sys
import unittest

# The modules whose tests loop over arrayimpl's backends; the rest of
# mpi4py's suite never builds a buffer from them (test_msgspec has array
# classes of its own) and would only add time.  A -i of the caller's
# replaces this list.
ARRAY_MODULES = (
    r"test_(p2p_buf|p2p_buf_matched|p2p_buf_part|cco_buf|cco_buf_inter"
    r"|cco_nb_buf|cco_nb_vec|cco_ngh_buf|cco_pr_buf|cco_pr_ngh_buf"
    r"|cco_pr_vec|cco_vec|cco_vec_inter|rma|rma_nb|pack|io)\b"
)

# mpi4py tests that cannot pass with a CPUBuffer for reasons that are not
# bufferext bugs, skipped by name (main.py's -x: "module.Class.method", the
# class a glob over the communicators a test case runs on) with the reason.
# Both kinds call as_raw() -- the CPUBuffer itself, handed to MPI -- and then
# read the received values off that object as if it were a sequence.  A
# CPUBuffer is an exporter, not a container: it has len() (the first
# dimension) but no __iter__/__getitem__ and no arithmetic; memoryview(buf),
# numpy.asarray(buf) or buf.to_host() give the values.  The MPI calls these
# tests make with CPUBuffers are the ones the other tests here make.
_ITERATES = "iterates the object as_raw() returned (`for v in buf`)"
_ALLCLOSE = ("allclose() iterates and subtracts the objects as_raw() "
             "returned (falls back to `x - y` on two CPUBuffers)")
EXCLUDED: dict[str, str] = {
    # (len(buf) on the same object works: CPUBuffer's first dimension)
    **{f"{module}.*.testBcastTypeIndexed": _ITERATES
       for module in ("test_cco_buf", "test_cco_nb_buf", "test_cco_pr_buf")},
    "test_pack.*.testPackUnpack": _ALLCLOSE,
    "test_pack.*.testPackUnpackExternal": _ALLCLOSE,
    **{f"{module}.*.test{op}v3": _ITERATES
       for module in ("test_cco_vec", "test_cco_nb_vec", "test_cco_pr_vec")
       for op in ("Gather", "Scatter", "Allgather", "Alltoall")},
}


def parse_args(argv):
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("testdir")
    parser.add_argument("--min-tests", type=int, default=1)
    return parser.parse_known_args(argv)


def make_backend(arrayimpl, numpy, bufferext):
    """The backend class, built on arrayimpl's own BaseArray interface."""

    # The typecodes both MPI and CPUBuffer know (long double and its complex
    # are not bufferext dtypes: CPUBuffer raises TypeError for 'g'/'G').
    typemap = {}
    for table in ("TypeMapBool", "TypeMapInteger", "TypeMapUnsigned",
                  "TypeMapFloat", "TypeMapComplex"):
        for code, datatype in getattr(arrayimpl, table).items():
            try:
                bufferext.CPUBuffer((1,), code)
            except TypeError:
                continue
            typemap[code] = datatype

    class BufferExtCPU(arrayimpl.BaseArray):
        backend = "bufferext-cpu"
        TypeMap = typemap
        handed = 0           # CPUBuffers given to MPI (as_raw), all tests

        def __init__(self, arg, typecode, shape=None, readonly=False):
            del readonly     # as the numpy backend: a CPUBuffer is writable
            scalar = isinstance(arg, (int, float, complex))
            if shape is None:
                shape = () if scalar else (len(arg),)
            else:            # an int or a sequence of them, as for numpy
                try:
                    shape = tuple(int(n) for n in shape)
                except TypeError:
                    shape = (int(shape),)
            self.buffer = bufferext.CPUBuffer(shape, typecode)
            self._typecode = typecode
            # the harness's element access: a view of the same memory
            self.array = numpy.asarray(self.buffer)
            assert self.array.itemsize == numpy.dtype(typecode).itemsize
            if scalar:
                self.array.fill(numpy.asarray(arg).astype(typecode))
            else:
                self.array[...] = numpy.asarray(arg).astype(typecode)

        @property
        def address(self):
            return self.array.__array_interface__["data"][0]

        @property
        def typecode(self):
            # the code asked for: CPUBuffer reports 'l' as int64 ('q'), and
            # mpidtype must stay MPI.LONG for it
            return self._typecode

        @property
        def itemsize(self):
            return self.array.itemsize

        @property
        def flat(self):
            return self.array.flat

        @property
        def size(self):
            return self.array.size

        def as_raw(self):
            # what MPI gets: the exporter itself, not the NumPy view
            BufferExtCPU.handed += 1
            Tracking.used.add(Tracking.current)
            return self.buffer

    return BufferExtCPU


class Tracking(unittest.TextTestResult):
    """Records which tests handed a CPUBuffer to MPI (see as_raw), and which
    failed: unittest counts each failed subTest, we count tests.  Under
    mpiexec a failure aborts the job: a rank that leaves a test early would
    leave the others waiting in its collectives until the timeout."""

    current = None
    used: set = set()
    bad: set = set()
    last = None          # the result of the run

    def startTest(self, test):
        Tracking.current = test.id()
        Tracking.last = self
        super().startTest(test)

    def failed(self, test, err, shown=None):
        Tracking.bad.add(test.id())
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        if world.Get_size() > 1:
            sys.stderr.write(f"mpi4py suite: rank {world.Get_rank()} of "
                             f"{world.Get_size()}: FAILED {shown or test}\n"
                             f"{self._exc_info_to_string(err, test)}\n")
            sys.stderr.flush()
            world.Abort(1)

    def addError(self, test, err):
        self.failed(test, err)
        super().addError(test, err)

    def addFailure(self, test, err):
        self.failed(test, err)
        super().addFailure(test, err)

    def addSubTest(self, test, subtest, err):
        if err is not None:
            self.failed(test, err, shown=subtest)
        super().addSubTest(test, subtest, err)


class Runner(unittest.TextTestRunner):
    resultclass = Tracking


def main(argv=None):
    args, rest = parse_args(sys.argv[1:] if argv is None else argv)
    testdir = os.path.abspath(args.testdir)
    sys.path.insert(0, testdir)
    # GPU array libraries are no part of this run (main.py drops them too
    # unless asked; arrayimpl, imported first here, would import them)
    sys.modules.setdefault("cupy", None)
    sys.modules.setdefault("numba", None)

    import numpy

    import arrayimpl    # mpi4py's test/arrayimpl.py
    import bufferext
    import main as mpi4py_main    # mpi4py's test/main.py
    from mpi4py import MPI

    backend = make_backend(arrayimpl, numpy, bufferext)
    # every loop over arrayimpl.loop() now runs with our backend only
    arrayimpl.ArrayBackends[:] = [backend]

    comm = MPI.COMM_WORLD
    verbose = "-v" in rest or "--verbose" in rest
    if verbose and comm.Get_rank() == 0:
        for pattern, why in EXCLUDED.items():
            print(f"excluded: {pattern}: {why}", file=sys.stderr)
    opts = list(rest)
    if "-i" not in opts:
        opts += ["-i", ARRAY_MODULES]
    for pattern in EXCLUDED:
        opts += ["-x", pattern]

    try:
        mpi4py_main.main(module=None, argv=[sys.argv[0], *opts],
                         testRunner=Runner)
    except SystemExit:
        pass

    result = Tracking.last
    if result is None:
        print("mpi4py suite: no test ran", file=sys.stderr)
        return 1
    failed = len(Tracking.bad)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    used = len(Tracking.used - {None})
    print(f"mpi4py suite, bufferext-cpu backend, rank {comm.rank} of "
          f"{comm.size}: {result.testsRun} tests run, {passed} passed, "
          f"{skipped} skipped, {failed} failed; {used} tests handed "
          f"{backend.handed} CPUBuffers to MPI; {len(EXCLUDED)} excluded "
          f"by name", file=sys.stderr, flush=True)
    if verbose:
        modules = {}
        for name in Tracking.used - {None}:
            mod = name.split(".")[0]
            modules[mod] = modules.get(mod, 0) + 1
        print(f"tests using the backend, by module: {modules}",
              file=sys.stderr)
    if used < args.min_tests:
        print(f"FAIL: only {used} tests used the bufferext backend "
              f"(at least {args.min_tests} expected)", file=sys.stderr)
        return 1
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
