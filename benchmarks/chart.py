"""The documentation's benchmark figures, made from benchmarks/results only.

Reads ``results/py*.json`` (one full ``run.py`` run per interpreter) and
writes

* ``docs/_generated/*.rst``: the tables the pages include (the foundation
  targets and times in ``docs/performance.rst``, the bridges' figures in
  ``docs/bridges.rst``, and from ``results/native-py*.json`` the draft in
  CPython against the backport on the same interpreter), with nothing but
  the standard library;
* ``docs/_static/benchmarks.svg``: for every operation with a target, its
  ratio to its anchor divided by the target, per interpreter (below 1: the
  target holds); needs matplotlib.

Run: ``python benchmarks/chart.py`` (both), ``--tables DIR`` (the tables
only, into DIR: what tests/test_docs_figures.py compares with the
committed ones).  No figure in the docs is typed by hand: a page quotes a
measurement through these files, and the test fails on a figure the
results do not hold.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import textwrap
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.join(HERE, os.pardir, "docs")
TABLES = os.path.join(DOCS, "_generated")
CHART = os.path.join(DOCS, "_static", "benchmarks.svg")

Rows = List[dict]

#: The foundation's rows with a target: (label, result name, anchors); the
#: anchors, where given, pick one of the rows a run measures one candidate
#: by against anchors with different targets.
TARGETS = [
    ("``PyObject_CheckBufferSupports(CPUBuffer)``",
     "C PyObject_CheckBufferSupports(CPUBuffer, 0x1011c)", ()),
    ("``BufferExt_GetBuffer`` + release, ``CPUBuffer``, ``FULL_RO|DEVICE``",
     "C BufferExt_GetBuffer+Release(CPUBuffer, FULL_RO|DEVICE)",
     ("GetBuffer+Release(CPUBuffer, FULL_RO)",)),
    ("``BufferExt_GetBuffer`` + release, ``CPUBuffer``, ``FULL_RO|DEVICE``",
     "C BufferExt_GetBuffer+Release(CPUBuffer, FULL_RO|DEVICE)",
     ("GetBuffer+Release(bytes, SIMPLE)",
      "GetBuffer+Release(bytes, FULL_RO)")),
    ("the same from a foreign consumer (``foreign_consumer.c``)",
     "foreign C BufferExt_GetBuffer+Release(CPUBuffer, FULL_RO|DEVICE)",
     ("C BufferExt_GetBuffer+Release(CPUBuffer, FULL_RO|DEVICE)",)),
    ("heap allocations per extended export",
     "C allocations per BufferExt_GetBuffer+Release(CPUBuffer)", ()),
    ("Python ``check_buffer_supports(CPUBuffer, int)``",
     "py check_buffer_supports(CPUBuffer, 0x1011c)", ()),
    ("exchange-API ``DLTensor`` fill of a ``CPUBuffer``",
     "C exchange-API DLTensor fill(CPUBuffer)", ()),
    ("``CPUBuffer.__dlpack__()``", "py CPUBuffer.__dlpack__()", ()),
    ("``as_buffer(ndarray)`` + C extended get/release",
     "as_buffer(ndarray) + C extended get/release", ()),
    ("Python ``with get_buffer(as_buffer(ndarray)): pass``",
     "py with get_buffer(as_buffer(ndarray)): pass", ()),
]

#: Times (ns per call) shown beside the ratios: candidates and anchors.
TIMES = [
    ("``PyObject_CheckBuffer(CPUBuffer)``", "PyObject_CheckBuffer(CPUBuffer)"),
    ("``PyObject_CheckBufferSupports(CPUBuffer)``",
     "C PyObject_CheckBufferSupports(CPUBuffer, 0x1011c)"),
    ("plain get/release of ``bytes`` (``SIMPLE``)",
     "GetBuffer+Release(bytes, SIMPLE)"),
    ("``BufferExt_GetBuffer`` + release, ``CPUBuffer``",
     "C BufferExt_GetBuffer+Release(CPUBuffer, FULL_RO|DEVICE)"),
    ("plain get/release of ``CPUBuffer`` (the producer alone)",
     "GetBuffer+Release(CPUBuffer, FULL_RO)"),
    ("exchange-API ``DLTensor`` fill of a ``CPUBuffer``",
     "C exchange-API DLTensor fill(CPUBuffer)"),
    ("``operator.is_(a, b)``", "operator.is_(a, b)"),
    ("Python ``check_buffer_supports(CPUBuffer, int)``",
     "py check_buffer_supports(CPUBuffer, 0x1011c)"),
    ("``bufferext.get_buffer(CPUBuffer)`` (a ``BufferView``)",
     "py bufferext.get_buffer(CPUBuffer)"),
    ("``ndarray.__dlpack__()``", "ndarray.__dlpack__()"),
    ("``CPUBuffer.__dlpack__()``", "py CPUBuffer.__dlpack__()"),
    ("``np.from_dlpack(ndarray)``", "py np.from_dlpack(ndarray)"),
    ("``as_buffer(ndarray)`` + C extended get/release",
     "as_buffer(ndarray) + C extended get/release"),
    ("Python ``with get_buffer(as_buffer(ndarray)): pass``",
     "py with get_buffer(as_buffer(ndarray)): pass"),
]

#: docs/bridges.rst's rows: (label, result name, allocation row or None).
BRIDGES = [
    ("exchange-API ``DLTensor`` fill of a ``CPUBuffer`` (C)",
     "C exchange-API DLTensor fill(CPUBuffer)",
     "C allocations per exchange-API fill(CPUBuffer)"),
    ("``CPUBuffer.__dlpack__()``", "py CPUBuffer.__dlpack__()", None),
    ("``as_buffer(ndarray)`` + extended get/release (C)",
     "as_buffer(ndarray) + C extended get/release", None),
    ("``with get_buffer(as_buffer(ndarray)): pass`` (Python)",
     "py with get_buffer(as_buffer(ndarray)): pass", None),
]


#: The rows of a run on a CPython that implements the draft (cpython/):
#: the header in native mode against the backport forced, one interpreter.
NATIVE = [
    ("native ``PyObject_CheckBufferSupports(CPUBuffer)`` (CPython's slots, "
     "read inline)",
     "native C PyObject_CheckBufferSupports(CPUBuffer, 0x1011c)"),
    ("the same, backport (the header's cache)",
     "backport C PyObject_CheckBufferSupports(CPUBuffer, 0x1011c)"),
    ("native extended get/release of a ``CPUBuffer`` (``FULL_RO|DEVICE``)",
     "native C BufferExt_GetBuffer+Release(CPUBuffer, FULL_RO|DEVICE)"),
    ("the same, backport",
     "backport C BufferExt_GetBuffer+Release(CPUBuffer, FULL_RO|DEVICE)"),
]
#: How the anchors of those rows read in the table.
NATIVE_ANCHORS = {
    "PyObject_CheckBuffer(CPUBuffer)": "a ``PyObject_CheckBuffer`` call",
    "GetBuffer+Release(CPUBuffer, FULL_RO)":
        "plain get/release of the same ``CPUBuffer``",
    "GetBuffer+Release(bytes, FULL_RO)": "plain get/release of ``bytes``",
    "native C BufferExt_GetBuffer+Release(CPUBuffer, FULL_RO|DEVICE)":
        "native (the row above)",
}


def load_native(root: str = HERE) -> Dict[str, Rows]:
    """``{python: rows}`` of every ``results/native-py*.json``."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(root, "results",
                                              "native-py*.json"))):
        minor = re.search(r"native-py(3\.\d+)\.json$", path)
        if minor:
            with open(path) as f:
                runs[minor.group(1)] = json.load(f)["rows"]
    return runs


def native_table(runs: Dict[str, Rows]) -> str:
    """The native run's rows: ns, the ratio to the anchor (its ns), the
    target."""
    body = []
    for py, rows in runs.items():
        for label, name in NATIVE:
            row = worst(rows, name)
            target = f"<= {row['target']:g}x" if row.get("target") else ""
            anchor = NATIVE_ANCHORS.get(row["anchor"], f"``{row['anchor']}``")
            body.append([label, fmt_ns(row["ns"]),
                         f"{fmt_ratio(row['ratio'])} of {anchor} "
                         f"({fmt_ns(row['anchor_ns'])} ns)", target])
    pythons = ", ".join(runs)
    return list_table(
        f"The draft in CPython {pythons}: native and the backport forced, "
        "one interpreter, one run", ["operation", "ns", "ratio", "target"],
        body, [40, 8, 40, 10])


def load(root: str = HERE) -> Dict[str, Rows]:
    """``{python: rows}`` of every ``results/py*.json``, in version order."""
    runs = {}
    for path in glob.glob(os.path.join(root, "results", "py*.json")):
        minor = re.search(r"py(3\.\d+)\.json$", path)
        if minor:
            with open(path) as f:
                runs[minor.group(1)] = json.load(f)["rows"]
    order = sorted(runs, key=lambda v: tuple(int(p) for p in v.split(".")))
    return {py: runs[py] for py in order}


def worst(rows: Rows, name: str, anchors: Tuple[str, ...] = ()) -> dict:
    """The row called ``name`` (against one of ``anchors``, where given)
    with a target; where a run measured it against two anchors, the one
    with the higher (worse) ratio."""
    found = [r for r in rows if r["name"] == name
             and (not anchors or r.get("anchor") in anchors)]
    if not found:
        raise KeyError(f"no row {name!r} against {anchors} in the results")
    found = [r for r in found if r.get("target")] or found
    return max(found, key=lambda r: r["ratio"] if r.get("ratio") else 0.0)


def time_of(rows: Rows, name: str) -> float:
    """ns per call of ``name``, as a candidate or as an anchor."""
    for r in rows:
        if r["name"] == name:
            return r["ns"]
        if r.get("anchor") == name and r.get("anchor_ns") is not None:
            return r["anchor_ns"]
    raise KeyError(f"no row or anchor {name!r} in the results")


def fmt_ns(value: float) -> str:
    """run.py's format: two decimals below 100 ns, whole ns above."""
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def fmt_ratio(value: float) -> str:
    return f"{value:.2f}x"


def target_text(row: dict) -> str:
    if row.get("exact") is not None:
        return f"== {row['exact']:g}"
    return f"<= {row['target']:g}x"


def measured(row: dict) -> str:
    """A target row's figure: the ratio, or the count for an exact one; a
    ratio the run holds to no target (on that interpreter) says so."""
    if row.get("exact") is not None:
        return f"{row['ns']:g}"
    if row.get("target") is None:
        return f"({fmt_ratio(row['ratio'])})"
    return fmt_ratio(row["ratio"])


def list_table(caption: str, header: List[str], body: List[List[str]],
               widths: Optional[List[int]] = None) -> str:
    out = [f".. list-table:: {caption}", "   :header-rows: 1",
           "   :stub-columns: 1", "   :class: bench-table"]
    if widths:
        out.append("   :widths: " + " ".join(map(str, widths)))
    out.append("")
    for line in [header] + body:
        out.append(f"   * - {line[0]}")
        out.extend(f"     - {cell}" for cell in line[1:])
    return "\n".join(out) + "\n"


def span(values: List[float], show) -> str:
    """``a-b`` over the interpreters (one value where they agree)."""
    lo, hi = show(min(values)), show(max(values))
    return lo if lo == hi else f"{lo.rstrip('x')}-{hi}"


def tables(runs: Dict[str, Rows]) -> Dict[str, str]:
    """``{file name: reStructuredText}`` of every generated table."""
    pythons = list(runs)
    head = "   (generated by benchmarks/chart.py from benchmarks/results: do not edit)"
    note = f"..\n{head}\n\n"
    missed = {py: [r["name"] for r in rows if r.get("verdict") == "MISS"]
              for py, rows in runs.items()}
    first, last = pythons[0], pythons[-1]
    if any(missed.values()):
        verdict = "Missed targets: " + "; ".join(
            f"{py}: {', '.join(names)}" for py, names in missed.items() if names) + "."
    else:
        verdict = (f"Every target holds on every interpreter, CPython {first} "
                   f"to {last}, in these runs.")
    ratios = []
    for label, name, anchors in TARGETS:
        rows = [worst(runs[py], name, anchors) for py in pythons]
        held = [r for r in rows if r.get("target") or r.get("exact") is not None]
        against = f" vs ``{held[0]['anchor']}``" if held[0]["anchor"] else ""
        where = ("" if len(held) == len(rows) else
                 ", on " + ", ".join(py for py, r in zip(pythons, rows) if r in held))
        ratios.append([f"{label}{against} ({target_text(held[0])}{where})"]
                      + [measured(r) for r in rows])
    times = [[label] + [fmt_ns(time_of(runs[py], name)) for py in pythons]
             for label, name in TIMES]
    bridges = []
    for label, name, allocs in BRIDGES:
        rows = [worst(runs[py], name) for py in pythons]
        cell = span([r["ratio"] for r in rows], fmt_ratio)
        if allocs:
            counts = {worst(runs[py], allocs)["ns"] for py in pythons}
            cell += ", " + "/".join(f"{c:g}" for c in sorted(counts)) + " allocations"
        bridges.append([label, f"``{rows[0]['anchor']}``", target_text(rows[0]), cell])
    made = {
        "foundation_ratios.rst": note + verdict + "\n\n" + list_table(
            "Ratio to the anchor (target in brackets; worse of two anchors "
            "where a run has two)", ["operation"] + pythons, ratios,
            [40] + [8] * len(pythons)),
        "foundation_times.rst": note + list_table(
            "Nanoseconds per call, candidates and anchors", ["operation"] + pythons,
            times, [40] + [8] * len(pythons)),
        "bridges.rst": note + list_table(
            f"Bridges: ratio to the anchor, lowest-highest over CPython {first} "
            f"to {last}", ["measurement", "anchor", "target", "measured"],
            bridges, [34, 26, 12, 28]),
    }
    native = load_native()
    if native:
        made["native.rst"] = note + native_table(native)
    return made


def write_tables(folder: str, runs: Optional[Dict[str, Rows]] = None) -> List[str]:
    """Write every table into ``folder``; the paths written."""
    os.makedirs(folder, exist_ok=True)
    written = []
    for name, text in tables(runs or load()).items():
        path = os.path.join(folder, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        written.append(path)
    return written


def chart_data(runs: Dict[str, Rows]) -> Dict[str, Dict[str, float]]:
    """What the chart draws: ``{operation: {python: ratio / target}}`` for
    every row with a ratio target (the allocation count's is a count)."""
    data = {}
    for label, name, anchors in TARGETS:
        rows = {py: worst(rows, name, anchors) for py, rows in runs.items()}
        if all(r.get("exact") is None for r in rows.values()):
            against = f" vs {anchors[0]}" if anchors else ""
            data[label.replace("``", "") + against] = {
                py: round(r["ratio"] / r["target"], 4)
                for py, r in rows.items() if r.get("target")}
    return data


def chart(out: str, runs: Dict[str, Rows]) -> None:
    """The SVG chart, sized for the page's column (about 730 px at a
    1280 px window), so that its text shows at about the page's own size.
    Its description holds :func:`chart_data`, which the test compares with
    the results."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pythons = list(runs)
    data = chart_data(runs)
    labels = [textwrap.fill(label, 30, break_long_words=False,
                            break_on_hyphens=False) for label in data]
    # text as SVG text (not glyph paths): the browser draws it at the page's
    # scale, and tools can read its size
    matplotlib.rcParams.update({"svg.hashsalt": "bufferext", "font.size": 11,
                                "svg.fonttype": "none"})
    fig, ax = plt.subplots(figsize=(7.6, 0.75 * len(labels) + 1.8))
    height = 0.8 / max(len(pythons), 1)
    cmap = plt.get_cmap("viridis")
    for k, py in enumerate(pythons):
        y = [i + (k - (len(pythons) - 1) / 2) * height for i in range(len(labels))]
        ax.barh(y, [ratios.get(py, 0.0) for ratios in data.values()], height=height,
                color=cmap(k / max(len(pythons) - 1, 1)), label=f"CPython {py}")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel("ratio to the anchor / target (left of 1: it holds)")
    fig.legend(ncol=4, loc="upper center", frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(out, format="svg", metadata={
        "Date": None, "Description": json.dumps(data, sort_keys=True)})
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", metavar="DIR",
                        help="write only the tables, into DIR")
    args = parser.parse_args()
    runs = load()
    if args.tables:
        for path in write_tables(args.tables, runs):
            print(f"wrote {path}")
        return 0
    for path in write_tables(TABLES, runs):
        print(f"wrote {os.path.relpath(path)}")
    chart(CHART, runs)
    print(f"wrote {os.path.relpath(CHART)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
