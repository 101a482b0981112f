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
# C identifiers named in prose (Py_buffer, PyObject...) belong to CPython;
# they are written as literals, not cross-references.
nitpicky = False
