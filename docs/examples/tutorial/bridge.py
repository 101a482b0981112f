"""Tutorial, step 3: bridge a producer that speaks another protocol."""

import numpy as np

import bufferext


class Tensor:
    """Another library's array (torch, JAX, CuPy...): it speaks DLPack, not
    the buffer protocol."""

    def __init__(self, data: np.ndarray) -> None:
        self._data = data

    def __dlpack__(self, **kwargs):
        return self._data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()


tensor = Tensor(np.arange(4, dtype=np.int16))
try:
    bufferext.get_buffer(tensor)
except TypeError as exc:
    print(exc)

exporter = bufferext.as_buffer(tensor)           # zero-copy: the same memory
with bufferext.get_buffer(exporter) as view:
    print(view.format, view.shape, view.device)
print(np.asarray(exporter))
