"""Fuzz harness: exporters that fill the buffer fields with anything.

The configurable liar of the compiled test extension (tests/capi/testcapi.c,
``Configurable``) answers every request with fields drawn from the input:
ndim, shape, strides and suboffsets (NULL or any values), item size, len,
format, offset, read-only flag, device name and device_info.  Each goes
through ``get_buffer`` and ``as_buffer`` (and the adapter's ``get_buffer``
and ``__dlpack__``).  A refusal is a normal return; a crash, a sanitizer
report or another exception is a finding.  ``prepare()`` builds the test
extension with the running interpreter (CFLAGS/LDFLAGS from the
environment, so the sanitizer runs build it instrumented).
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
from typing import Any, Callable, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Source, main  # noqa: E402

REFUSALS = (BufferError, ValueError, TypeError, OverflowError, RuntimeError)
FORMATS = [None, "d", "f", "i", "B", "<l", ">i", "!h", "e", "Zd", "?",
           "T{i:a:}", "(2)f", "3s", "\x01", "d" * 300, ""]
DEVICES = [None, None, "bufferext.cuda", "bufferext.ve", "example.tpu"]
INFOS = ["valid", "null", "bad_version"]
BLOCK = 256

bufferext: Any = None
Configurable: Any = None


def dims(src: Source, ndim: int) -> Optional[Tuple[int, ...]]:
    kind = src.byte() % 4
    if kind == 0:
        return None
    n = max(0, min(ndim + src.byte() % 3 - 1, 70))
    if kind == 1:
        return tuple(src.byte() % 9 - 1 for _ in range(n))
    return tuple(src.small_int() for _ in range(n))


def configuration(src: Source) -> dict:
    ndim = src.pick([0, 1, 1, 2, 2, 3, 4, -1, 64, 65, 200])
    itemsize = src.pick([1, 2, 4, 8, 16, 3, 0, -1, src.small_int()])
    return dict(block_size=BLOCK, ndim=ndim, itemsize=itemsize,
                len=src.pick([BLOCK, 0, 8, 16, 32, 64, src.small_int()]),
                shape=dims(src, ndim), strides=dims(src, ndim),
                suboffsets=dims(src, ndim) if src.chance(4) else None,
                format=src.pick(FORMATS), readonly=src.chance(),
                device=src.pick(DEVICES), info=src.pick(INFOS),
                offset=src.byte() % (BLOCK + 1))


def read_inside(view: Any, x: Any, suboffsets: Any) -> None:
    """Read a CPU view's bytes when they lie inside the liar's block."""
    if view.device is not None or suboffsets is not None or 0 in view.shape:
        return
    low = sum(s * (n - 1) for n, s in zip(view.shape, view.strides) if s < 0)
    high = sum(s * (n - 1) for n, s in zip(view.shape, view.strides) if s > 0)
    if x.address <= view.ptr + low and \
            view.ptr + high + view.itemsize <= x.address + BLOCK:
        assert len(view.tobytes()) == view.nbytes


def test_one_input(data: bytes) -> None:
    src = Source(data)
    config = configuration(src)
    try:
        x = Configurable(**config)
    except (ValueError, TypeError, OverflowError):
        return
    try:
        with bufferext.get_buffer(x) as view:
            read_inside(view, x, config["suboffsets"])
    except REFUSALS:
        pass
    try:
        adapter = bufferext.as_buffer(x, readonly=src.chance())
    except REFUSALS:
        adapter = None
    if adapter is not None:
        with bufferext.get_buffer(adapter) as view:
            read_inside(view, x, config["suboffsets"])
        try:
            capsule = adapter.__dlpack__(max_version=(1, 0))
        except REFUSALS:
            pass
        else:
            del capsule
        del adapter
    if x.exports:           # only a cycle could still hold one
        gc.collect()
    assert x.exports == 0, x.exports


def prepare() -> Callable[[bytes], None]:
    """Import bufferext and build the test extension (after atheris.Setup
    when fuzzing)."""
    global bufferext, Configurable
    import bufferext as module
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "capi"))
    import build
    result = build.build(
        [build.module_command("c99", tempfile.mkdtemp(prefix="bx-fuzz-"))])[0]
    bufferext, Configurable = module, build.load_module(result).Configurable
    return test_one_input


if __name__ == "__main__":
    main(prepare, lambda: [test_one_input, configuration, dims, read_inside])
