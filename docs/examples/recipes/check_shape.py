"""Run by each recipe's test: the built consumer reads bufferext's producer."""

import bufferext
import bufferext_recipe

buf = bufferext.CPUBuffer((2, 3), "float32")
assert bufferext_recipe.shape(buf) == (2, 3), bufferext_recipe.shape(buf)
assert bufferext_recipe.shape(b"abcd") == (4,)
try:
    bufferext_recipe.shape(1)
except TypeError:
    pass
else:
    raise AssertionError("shape(1) did not raise TypeError")
print("bufferext_recipe: ok")
