"""Typical uses of bufferext, type-checked by .ci/run with mypy --strict
(and run, so the annotations below are also true at run time).

The ``reveal``-free assignments pin the stubs' types: if a stub changes a
return type, mypy reports the mismatch here."""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import numpy as np

import bufferext
from bufferext import BufferFlags


def main() -> None:
    buf = bufferext.CPUBuffer((2, 3), "float32")
    ro = bufferext.CPUBuffer(4, np.int16, readonly=True)
    supported: bool = bufferext.check_buffer_supports(buf, BufferFlags.DEVICE)
    mask: BufferFlags = bufferext.supported_flags(buf)
    assert supported and mask & BufferFlags.DEVICE
    with bufferext.get_buffer(buf, BufferFlags.FULL_RO) as view:
        shape: Tuple[int, ...] = view.shape
        device: Optional[str] = view.device
        info: Union[bufferext.CUDADeviceInfo, bufferext.VEDeviceInfo,
                    bufferext.OpaqueDeviceInfo, None] = view.device_info
        data: bytes = view.tobytes()
        mv: memoryview = view.memoryview()
        assert shape == (2, 3) and device is None and info is None
        assert len(data) == 24 and mv.nbytes == 24
        mv.release()
    assert view.released
    buf.copy_from_host(np.ones((2, 3), dtype=np.float32))
    host: np.ndarray[Any, np.dtype[Any]] = buf.to_host()
    arr = np.asarray(buf)
    m = memoryview(buf)          # CPUBuffer is a collections.abc.Buffer
    assert host.sum() == 6 and arr.shape == (2, 3) and m.shape == (2, 3)
    m.release()
    del arr
    dev: Tuple[int, int] = buf.__dlpack_device__()
    assert dev == (1, 0) and ro.readonly and buf.exports == 0
    buf.close()
    libs = bufferext.devices()
    assert all("device" in lib for lib in libs)
    try:
        raise bufferext.DeviceUnavailableError("test")
    except RuntimeError:
        pass
    include: str = bufferext.get_include()
    assert include.endswith("include")


if __name__ == "__main__":
    main()
    print("typecheck_usage: ok")
