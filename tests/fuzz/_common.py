"""Shared parts of the fuzz harnesses (tests/fuzz/fuzz_*.py).

Each harness defines ``test_one_input(data: bytes) -> None``: it must return
normally for every input, turning any rejection of the documented kinds into
a normal return; anything else (another exception, a crash, a sanitizer
report) is a finding.  ``main()`` hands the function to atheris (coverage
guided, libFuzzer options on the command line) with bufferext's Python
modules instrumented; without atheris, ``--replay FILES`` runs inputs
directly (what the everyday test suite does with a small corpus).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, List, Sequence

INT_EDGES = [0, 1, -1, 2, 7, 8, 16, 63, 64, 65, 255, 256, 2**31 - 1, -2**31,
             2**32, 2**63 - 1, -2**63, 2**63, 2**64 - 1, 2**64, 2**70, -2**70]


class Source:
    """Typed values drawn from fuzz bytes (a small FuzzedDataProvider that
    also works without atheris, so inputs replay anywhere)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def bytes(self, n: int) -> bytes:
        chunk = self.data[self.pos:self.pos + n]
        self.pos += len(chunk)
        return chunk + bytes(n - len(chunk))

    def uint(self, nbytes: int) -> int:
        return int.from_bytes(self.bytes(nbytes), "little")

    def sint(self, nbytes: int) -> int:
        return int.from_bytes(self.bytes(nbytes), "little", signed=True)

    def pick(self, options: List[Any]) -> Any:
        return options[self.byte() % len(options)]

    def chance(self, out_of: int = 2) -> bool:
        return self.byte() % out_of == 0

    def small_int(self) -> int:
        """Mostly small, sometimes an edge value."""
        b = self.byte()
        if b < 160:
            return b % 20 - 2
        if b < 224:
            return self.pick(INT_EDGES)
        return self.sint(8)

    def text(self, limit: int = 12) -> str:
        n = self.byte() % (limit + 1)
        return self.bytes(n).decode("latin-1")

    def value(self, depth: int = 0) -> Any:
        """Any small Python value: what a malformed dict may hold."""
        kind = self.byte() % 12
        if kind == 0:
            return None
        if kind == 1:
            return self.chance()
        if kind in (2, 3):
            return self.small_int()
        if kind == 4:
            return float(self.sint(2)) / 3
        if kind == 5:
            return self.text()
        if kind == 6:
            return self.bytes(self.byte() % 9)
        if depth < 2 and kind in (7, 8):
            return tuple(self.value(depth + 1) for _ in range(self.byte() % 5))
        if depth < 2 and kind == 9:
            return [self.value(depth + 1) for _ in range(self.byte() % 4)]
        if depth < 2 and kind == 10:
            return {self.text(3): self.value(depth + 1)
                    for _ in range(self.byte() % 3)}
        return object()


def main(prepare: Callable[[], Callable[[bytes], None]],
         instrument: Callable[[], Sequence[Callable[..., Any]]] = lambda: ()
         ) -> None:
    """Replay ``--replay FILE...`` or fuzz with atheris (sys.argv holds the
    libFuzzer options).

    ``prepare()`` imports bufferext and returns the harness function.  It
    runs after ``atheris.Setup()``, which loads atheris's libFuzzer with
    RTLD_GLOBAL: an extension built by clang with -fsanitize=fuzzer-no-link
    (the quality script's fuzz build) then resolves its coverage counters
    against it, and the C code guides the fuzzer too.  ``instrument()``
    names harness functions whose Python branches give feedback as well.
    """
    if len(sys.argv) > 1 and sys.argv[1] == "--replay":
        test_one_input = prepare()
        count = 0
        for path in sys.argv[2:]:
            names = ([os.path.join(path, n) for n in sorted(os.listdir(path))]
                     if os.path.isdir(path) else [path])
            for name in names:
                with open(name, "rb") as f:
                    test_one_input(f.read())
                count += 1
        print(f"replayed {count} input(s)")
        return
    import atheris
    target: List[Callable[[bytes], None]] = []
    atheris.Setup(sys.argv, lambda data: target[0](data))
    with atheris.instrument_imports(include=["bufferext"]):
        target.append(prepare())
    for func in instrument():
        atheris.instrument_func(func)
    atheris.Fuzz()
