"""Command line of bufferext: ``python -m bufferext [info|check|demo] ...``.

``info`` (the default) reports the installed version, the directory of the
C headers, the request-flag values, the Python and numpy versions, the
platform, and what was found of each device library (where it looked and
why it failed).  ``check MODULE:ATTR`` is a conformance report for any
producer (see :mod:`bufferext._check`).  ``demo`` runs a 2-D heat equation
on a distributed array with halo exchange (one process, or ``mpiexec -n N``),
checked against a serial run (see :mod:`bufferext._demo`).  The same entry
point is installed as the ``bufferext`` console script.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence, TextIO

import numpy

from . import _demo, _paths

__all__ = ["collect_info", "format_info", "main"]

# The flags shown by ``info``, in this order.
_SHOWN_FLAGS = (
    "SIMPLE", "WRITABLE", "FORMAT", "ND", "STRIDES", "C_CONTIGUOUS",
    "F_CONTIGUOUS", "ANY_CONTIGUOUS", "INDIRECT", "CONTIG", "CONTIG_RO",
    "STRIDED", "STRIDED_RO", "RECORDS", "RECORDS_RO", "FULL", "FULL_RO",
    "DEVICE", "REQUIRED", "LEGACY",
)


def collect_info() -> Dict[str, Any]:
    """Everything ``info`` reports, as a JSON-serialisable dict.

    Keys: ``version``, ``include``, ``abi_version``, ``mode`` (``"native"``
    where the interpreter implements the draft itself, else
    ``"backport"``), ``flags`` (name ->
    int), ``python``, ``implementation``, ``numpy`` (its version),
    ``platform``, ``devices`` (:func:`bufferext.devices`), and the optional
    parts: ``mpi4py`` (its version), ``mpi`` (the MPI library's version
    line), ``ml_dtypes`` and ``matplotlib`` (their versions), each None
    when not installed.
    """
    import bufferext
    from bufferext._bufferext import ABI_VERSION, NATIVE

    flags = {name: int(bufferext.BufferFlags[name]) for name in _SHOWN_FLAGS}
    return {
        "version": bufferext.__version__,
        "include": bufferext.get_include(),
        "abi_version": int(ABI_VERSION),
        "mode": "native" if NATIVE else "backport",
        "flags": flags,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "numpy": str(numpy.__version__),
        "platform": platform.platform(),
        "devices": bufferext.devices(),
        "mpi4py": _version_of("mpi4py"),
        "mpi": _mpi_library(),
        "ml_dtypes": _version_of("ml_dtypes"),
        "matplotlib": _version_of("matplotlib"),
    }


def _version_of(distribution: str) -> Optional[str]:
    """The installed version of ``distribution`` (not imported), or None."""
    from importlib import metadata
    try:
        return str(metadata.version(distribution))
    except metadata.PackageNotFoundError:
        return None


def _mpi_library() -> Optional[str]:
    """The first line of the MPI library's version, or None without mpi4py
    or MPI.  Asked in a child process (``python -m mpi4py
    --mpi-lib-version``): importing ``mpi4py.MPI`` here would start MPI in
    the caller's process, or, told not to, leave it unstarted for good."""
    if _version_of("mpi4py") is None:
        return None
    try:
        done = subprocess.run([sys.executable, "-m", "mpi4py", "--mpi-lib-version"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.strip().splitlines()
    return " ".join(lines[0].split()) if done.returncode == 0 and lines else None


def _format_device(entry: Dict[str, Any]) -> List[str]:
    state = "loaded" if entry.get("loaded") else "not loaded"
    lines = [f"  {entry.get('device')} ({entry.get('library')}): {state}"]
    if entry.get("loaded"):
        lines.append(f"    path:       {entry.get('path')}")
    looked = entry.get("looked_for") or []
    lines.append("    looked for: " + (", ".join(looked) if looked else "-"))
    lines.append(f"    override:   {entry.get('env_var')}=<path> (or 'none')")
    if entry.get("error"):
        lines.append(f"    why:        {entry['error']}")
    return lines


def format_info(info: Dict[str, Any]) -> str:
    """Render :func:`collect_info`'s dict as the human-readable report."""
    lines = [
        f"bufferext {info['version']} (extended buffer ABI "
        f"{info['abi_version']})",
        f"header directory: {info['include']}",
        f"python:           {info['python']} ({info['implementation']})",
        f"protocol:         {info['mode']} "
        + ("(the interpreter implements the draft: bf_supported_flags)"
           if info['mode'] == "native" else
           "(backported: the declaration is the type attribute "
           "__buffer_supported_flags__)"),
        f"numpy:            {info['numpy'] or 'not installed'}",
        f"mpi4py:           {info['mpi4py'] or 'not installed (pip install mpi4py mpich)'}",
        f"MPI library:      {info['mpi'] or '-'}",
        f"ml_dtypes:        {info['ml_dtypes'] or 'not installed (pip install ml_dtypes, for bfloat16 and float8 arrays)'}",
        f"matplotlib:       {info['matplotlib'] or 'not installed (pip install matplotlib, for plot_distribution)'}",
        f"platform:         {info['platform']}",
        "request flags (PyBUF_*):",
    ]
    width = max(len(name) for name in info["flags"])
    for name, value in info["flags"].items():
        lines.append(f"  {name.ljust(width)}  0x{value:05x}  {value}")
    lines.append("device libraries:")
    for entry in info["devices"]:
        lines.extend(_format_device(entry))
    return "\n".join(lines) + "\n"


def _cmd_info(args: argparse.Namespace, out: TextIO) -> int:
    info = collect_info()
    if args.json:
        json.dump(info, out, indent=2)
        out.write("\n")
    else:
        out.write(format_info(info))
    return 0


def _cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    from ._check import check, format_report, load_target

    if "" not in sys.path and os.getcwd() not in sys.path:
        # the console script's sys.path starts with its bin directory, not
        # the current one (python -m puts that first): a target's module
        # there is found, after everything installed
        sys.path.append(os.getcwd())
    try:
        obj = load_target(args.target, call=args.call)
    except BaseException as exc:   # SystemExit and KeyboardInterrupt too:
        sys.stderr.write(           # the target's, never a success
            f"check: cannot load {args.target!r}: "
            f"{type(exc).__name__}: {exc}\n")
        return 2
    try:
        report = check(obj, args.target)
    except BaseException as exc:
        sys.stderr.write(f"check: {args.target!r} raised "
                         f"{type(exc).__name__}: {exc} while checked\n")
        return 2
    if not report.protocols["buffer"]:
        what = (f"its instances are not buffer exporters (the class {obj.__name__!r})"
                if report.scope == "class" else
                f"is not a buffer exporter (a {type(obj).__name__!r})")
        sys.stderr.write(f"check: {args.target!r}: {what}\n")
    if args.json:
        json.dump(report.as_dict(), out, indent=2, default=repr)
        out.write("\n")
    else:
        out.write(format_report(report))
    return 0 if report.conformant else 1


def _prog() -> str:
    """How this command line was started: the ``bufferext`` console script,
    or ``python -m bufferext``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "bufferext" if name in ("bufferext", "bufferext.exe") else "python -m bufferext"


def _parser() -> argparse.ArgumentParser:
    from . import __version__
    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="The extended buffer protocol (draft PEP), backported. "
                    "Without a command: info.")
    parser.add_argument("--version", action="version",
                        version=f"bufferext {__version__}")
    parser.set_defaults(handler=_cmd_info, json=False)
    _paths.add_build_options(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = commands.add_parser(
        "info", help="version, header path, flag values, device libraries "
                     "(the default)")
    info.add_argument("--json", action="store_true",
                      help="print the report as JSON")
    info.set_defaults(handler=_cmd_info)
    check = commands.add_parser(
        "check", help="conformance report for a buffer exporter: MODULE:ATTR "
                      "or a Python expression such as "
                      "'bufferext.CPUBuffer((4,), \"f4\")' (evaluated)")
    check.add_argument("target", metavar="TARGET")
    check.add_argument("--call", action="store_true",
                       help="call the target without arguments to make the "
                            "exporter (a class or factory)")
    check.add_argument("--json", action="store_true",
                       help="print the report as JSON")
    check.set_defaults(handler=_cmd_check)
    demo = commands.add_parser(
        "demo", help="2-D heat equation on a distributed array with halo "
                     "exchange, checked against a serial run",
        description=_demo.DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _demo.add_arguments(demo)
    demo.set_defaults(handler=lambda args, out: _demo.run(args))
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``).

    Returns the exit status: 0 on success, 2 for a usage error (argparse's
    convention; the SystemExit it raises is turned into the return value),
    1 when the output's reader closed it early (no traceback).
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if args_list[:1] == ["--json"]:
        if args_list[1:2] in (["info"], ["check"]):
            # an option of the command, written before it
            args_list[:2] = [args_list[1], "--json"]
        else:
            args_list.insert(0, "info")   # `info` is the default command
    try:
        with _quiet_unless_first_rank():
            args = parser.parse_args(args_list)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        status = int(args.handler(args, sys.stdout))
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (`... | head`): end quietly, as a shell tool
        # does; stdout now points at devnull, so the flush at exit is silent
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1
    return status


#: Where launchers put a process's rank (MPICH/Hydra, Open MPI, PMIx, Slurm).
_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


@contextlib.contextmanager
def _quiet_unless_first_rank() -> Iterator[None]:
    """Under mpiexec, usage errors and --help print once (rank 0), not once
    per process: the other ranks' stdout and stderr go to /dev/null while
    the arguments are parsed."""
    rank = next((os.environ[v] for v in _RANK_VARIABLES if v in os.environ), "0")
    if rank.strip() in ("", "0"):
        yield
        return
    with open(os.devnull, "w") as null, contextlib.redirect_stderr(null), \
            contextlib.redirect_stdout(null):
        yield


if __name__ == "__main__":
    sys.exit(main())
