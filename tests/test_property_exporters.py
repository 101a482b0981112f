"""Generated exporters: whatever fields an exporter fills, bufferext never
crashes, refuses with a Python exception, and what it accepts is
consistent and never hands device memory to a CPU-only consumer.

hypothesis drives the configurable liar of the compiled test extension
(tests/capi/testcapi.c, ``Configurable``): random ndim (-2..70), shape and
strides (NULL or tuples of any length, negative and huge values included),
suboffsets, item size, ``len``, format, offset, read-only flag, device name
and device_info (valid, NULL, wrong version).  Each exporter goes through
``get_buffer`` and ``as_buffer`` (and the adapter's ``get_buffer`` and
``__dlpack__``).  ``BUFFEREXT_PROPERTY_EXAMPLES`` sets the number of
examples (default 300; the sanitizer runs of .ci/quality.sh use fewer).
"""

from __future__ import annotations

import gc
import os
from types import ModuleType
from typing import Any, Dict, Optional, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bufferext

EXAMPLES = int(os.environ.get("BUFFEREXT_PROPERTY_EXAMPLES", "300"))
# derandomize: the same examples on every run (a seed from the test's
# name), so the verdict does not change from one CI run to the next
BLOCK = 256
REFUSALS = (BufferError, ValueError, TypeError, OverflowError, RuntimeError)
FORMATS = [None, "d", "f", "i", "B", "b", "<d", ">i", "e", "Zd", "?",
           "T{i:a:}", "(2)f", "3s", "\x01", "d" * 300, ""]
DEVICES = [None, None, "bufferext.cuda", "bufferext.ve", "example.tpu"]

small = st.integers(-3, 8)
dims = st.one_of(st.none(), st.lists(small, max_size=8).map(tuple),
                 st.lists(st.integers(-2**63, 2**63 - 1), max_size=3)
                 .map(tuple))


@st.composite
def configurations(draw: Any) -> Dict[str, Any]:
    ndim = draw(st.one_of(st.integers(0, 4), st.integers(-2, 70)))
    itemsize = draw(st.sampled_from([1, 2, 4, 8, 16, 3, 0, -1]))
    shape = draw(st.one_of(
        st.lists(st.integers(0, 5), min_size=max(ndim, 0),
                 max_size=max(ndim, 0)).map(tuple), dims))
    strides = draw(st.one_of(st.none(), st.lists(
        st.integers(-64, 64), min_size=max(ndim, 0),
        max_size=max(ndim, 0)).map(tuple), dims))
    count = 1
    for n in (shape or ())[:max(ndim, 0)]:
        count *= n
    honest_len = count * itemsize if shape is not None else BLOCK
    return dict(
        block_size=BLOCK, ndim=ndim, itemsize=itemsize, shape=shape,
        strides=strides,
        suboffsets=draw(st.one_of(st.none(), st.none(), dims)),
        len=draw(st.one_of(st.just(honest_len),
                           st.integers(-8, 1 << 21))),
        format=draw(st.sampled_from(FORMATS)),
        readonly=draw(st.booleans()),
        device=draw(st.sampled_from(DEVICES)),
        info=draw(st.sampled_from(["valid", "valid", "null",
                                   "bad_version"])),
        offset=draw(st.integers(0, BLOCK)))


def span(view: Any) -> Optional[Tuple[int, int]]:
    """[low, high) bytes of the view's elements, relative to its pointer,
    or None when it has no element."""
    if 0 in view.shape:
        return None
    low = high = 0
    for n, s in zip(view.shape, view.strides):
        (low, high) = (low + s * (n - 1), high) if s < 0 else \
            (low, high + s * (n - 1))
    return low, high + view.itemsize


def check_view(view: Any, x: Any, config: Dict[str, Any]) -> None:
    count = 1
    for n in view.shape:
        assert n >= 0
        count *= n
    assert 0 <= view.ndim <= 64 and len(view.shape) == view.ndim
    assert view.itemsize > 0 and view.nbytes == count * view.itemsize
    if view.device is not None:
        assert config["device"] == view.device
        with pytest.raises(BufferError):
            view.tobytes()
        with pytest.raises(BufferError):
            memoryview(view)
        return
    extent = span(view)
    start = x.address
    inside = extent is None or (
        start <= view.ptr + extent[0] and view.ptr + extent[1] <= start + BLOCK)
    # (zero strides describe any size over a few bytes: a copy of more than
    # 16 MiB is not made, it could only end in MemoryError)
    if inside and config["suboffsets"] is None and view.nbytes <= 1 << 24:
        assert len(view.tobytes()) == view.nbytes


@pytest.fixture(scope="module")
def conf(capi_modules: Dict[str, ModuleType]) -> Any:
    return capi_modules["c99"].Configurable


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(config=configurations())
def test_generated_exporters(conf: Any, config: Dict[str, Any]) -> None:
    try:
        x = conf(**config)
    except (ValueError, TypeError, OverflowError, MemoryError):
        return                          # a configuration the liar refuses
    try:
        view = bufferext.get_buffer(x)
    except REFUSALS as exc:
        assert not isinstance(exc, BufferError) or "Configurable" in str(exc)
    else:
        with view:
            check_view(view, x, config)
    for readonly in (True, False):
        try:
            adapter = bufferext.as_buffer(x, readonly=readonly)
        except REFUSALS:
            continue
        with bufferext.get_buffer(adapter) as view:
            check_view(view, x, config)
        try:
            capsule = adapter.__dlpack__(max_version=(1, 0))
        except REFUSALS:
            pass
        else:
            del capsule
        del adapter
    if x.exports:           # only a cycle could still hold one
        gc.collect()
    assert x.exports == 0
