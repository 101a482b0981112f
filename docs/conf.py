"""Sphinx configuration of the bufferext documentation.

The Python API pages use autodoc against the *installed* package (``pip
install .`` first), so the documented signatures are those users get.
"""

import bufferext

project = "bufferext"
author = "The bufferext developers"
copyright = "2026, The bufferext developers"
release = bufferext.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
]

# _generated/: tables benchmarks/chart.py makes, included by the pages
exclude_patterns = ["_build", "_generated"]
html_theme = "furo"
html_title = f"bufferext {release}"
html_static_path = ["_static"]
html_css_files = ["bufferext.css"]
primary_domain = "py"
default_role = "code"
highlight_language = "python3"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Every cross-reference must resolve (CI builds with -n -W).  C identifiers
# named in prose (Py_buffer, PyObject...) belong to CPython and are written
# as literals; the ones below appear in the C declarations' signatures, and
# numpy's types in the Python signatures' annotations: they are other
# projects' objects, and the build reads no other project's inventory
# (intersphinx would need the network).
nitpicky = True
nitpick_ignore = [("c:identifier", name) for name in (
    "PyObject", "PyTypeObject", "Py_buffer", "Py_ssize_t",
    "int32_t", "uint32_t", "int64_t", "uint64_t", "size_t")]
nitpick_ignore_regex = [
    ("py:class", r"(numpy|np)\.(ndarray|dtype|integer)"),
    ("py:class", r"bufferext\.distarray\._comm\.T"),    # agree's TypeVar
    # UnstructuredMap(table=): the owner tables another map made (internal)
    ("py:class", r"(bufferext\.distarray\._maps\.)?Owners"),
]
