"""Every performance figure in the docs comes from benchmarks/results.

The tables the pages include, and the chart, are made by
``benchmarks/chart.py`` from ``benchmarks/results/py*.json``: they must be
what it makes now.  Any
other figure a page quotes (a number with a unit of time, rate or ratio)
must be a value the results hold, to the precision it is quoted with.
``docs/changes.rst`` is left out: it is the project's history, whose
before-and-after figures are of the code of their day, not of the runs
in ``benchmarks/results``.
"""

from __future__ import annotations

import filecmp
import glob
import html
import importlib.util
import json
import os
import re
from typing import Dict, List, Set, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")
DOCS = os.path.join(ROOT, "docs")
GENERATED = os.path.join(DOCS, "_generated")

pytestmark = pytest.mark.skipif(
    not os.path.isfile(os.path.join(BENCH, "chart.py")) or
    not os.path.isdir(GENERATED),
    reason="benchmarks/ and docs/ are not beside the tests (a test copy of "
           "an installed wheel): the source tree's run checks the figures")

#: Pages that may quote figures without results behind them, and why.
LEFT_OUT = {"changes.rst": "the project's history: figures of past code"}
#: Quantities that are settings, not measurements: (page, text).
NOT_MEASURED = {
    ("mpi-internals.rst", "600 ms"): "the delay the CUDA stand-in is set to",
    # the review's estimates for designs never built, quoted as estimates
    ("extended-buffer.rst", "8–12 ns"): "estimate: a C thread-local cache",
    ("extended-buffer.rst", "2–4 ns"): "estimate: a core module's TLS",
    ("extended-buffer.rst", "1–3 ns"): "estimate: the typed entry",
}

UNITS = {"x": "ratio", "×": "ratio", "ns": "ns", "µs": "us", "us": "us",
         "ms": "ms", "GB/s": "rate", "MB/s": "rate", "M/s": "rate"}
NUMBER = r"\d+(?:\.\d+)?"
FIGURE = re.compile(
    rf"(?P<lo>{NUMBER})(?:\s*(?:-|–|to|against)\s*(?P<hi>{NUMBER}))?"
    r"(?:(?P<tight>x|×)|\s?(?P<unit>ns|µs|us|ms|GB/s|MB/s|M/s|×))(?![\w/])")
#: A figure after these is a target, not a measurement.
TARGET = re.compile(r"(<=|>=|≤|≥|target|at most|at least)\W*$")


def chart_module():
    spec = importlib.util.spec_from_file_location(
        "bufferext_bench_chart", os.path.join(BENCH, "chart.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def figures(text: str) -> List[Tuple[str, str, List[str]]]:
    """``(as written, kind, [numbers])`` of every figure in ``text`` that is
    not a target."""
    found = []
    for m in FIGURE.finditer(text):
        if TARGET.search(text[max(0, m.start() - 14):m.start()]):
            continue
        unit = m.group("tight") or m.group("unit")
        numbers = [m.group("lo")] + ([m.group("hi")] if m.group("hi") else [])
        found.append((m.group(0), UNITS[unit], numbers))
    return found


def held() -> Dict[str, List[float]]:
    """Every value of the results, by kind: benchmarks/run.py's rows (``ns``
    against an anchor, their ratio and target) and bench_cuda_gpu.py's
    (a ``value`` in its ``unit``, the ``figures`` it was made of)."""
    values: Dict[str, List[float]] = {kind: [] for kind in UNITS.values()}
    for path in glob.glob(os.path.join(BENCH, "results", "*.json")):
        with open(path) as f:
            for row in json.load(f)["rows"]:
                for key in ("ratio", "target"):
                    if row.get(key) is not None:
                        values["ratio"].append(row[key])
                if row.get("unit") == "ns/op":
                    values["ns"].append(row["ns"])
                    if row.get("anchor_ns") is not None:
                        values["ns"].append(row["anchor_ns"])
                measured = [(row["value"], row["unit"])] if "value" in row else []
                for value, unit in measured + list(row.get("figures", {}).values()):
                    values[UNITS[unit]].append(value)
    return values


def is_held(number: str, values: List[float]) -> bool:
    """Some value rounds to ``number`` at the precision it is written with."""
    places = len(number.split(".")[1]) if "." in number else 0
    half = 0.5 * 10 ** -places + 1e-9
    return any(abs(v - float(number)) <= half for v in values)


def pages() -> List[str]:
    found = sorted(glob.glob(os.path.join(DOCS, "*.rst")) +
                   glob.glob(os.path.join(DOCS, "pep", "*.rst")))
    found.append(os.path.join(ROOT, "README.md"))
    return [p for p in found if os.path.basename(p) not in LEFT_OUT]


def test_generated_tables_are_those_of_the_results(tmp_path):
    chart = chart_module()
    chart.write_tables(str(tmp_path))
    made = sorted(os.listdir(tmp_path))
    committed = sorted(os.listdir(GENERATED))
    assert made == committed, (made, committed)
    stale = [n for n in made if not filecmp.cmp(
        os.path.join(tmp_path, n), os.path.join(GENERATED, n), shallow=False)]
    assert not stale, (f"docs/_generated/{stale} differ from what "
                       "`python benchmarks/chart.py` makes of benchmarks/results")


def test_chart_draws_the_results():
    # the SVG's description holds what it draws (chart.chart_data); the
    # drawing itself depends on the matplotlib version, its data must not
    chart = chart_module()
    with open(os.path.join(DOCS, "_static", "benchmarks.svg"),
              encoding="utf-8") as f:
        found = re.search(r"<dc:description>(.*?)</dc:description>", f.read(),
                          re.S)
    assert found, "docs/_static/benchmarks.svg has no description"
    assert json.loads(html.unescape(found.group(1))) == chart.chart_data(
        chart.load()), "the chart is stale: run python benchmarks/chart.py"


def test_every_generated_table_is_included():
    included: Set[str] = set()
    for path in pages():
        with open(path, encoding="utf-8") as f:
            included.update(re.findall(r"^\.\. include:: _generated/(\S+)$",
                                       f.read(), re.M))
    assert included == set(os.listdir(GENERATED))


def test_pages_quote_only_figures_the_results_hold():
    values = held()
    wrong = []
    for path in pages():
        name = os.path.basename(path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for written, kind, numbers in figures(text):
            if (name, written) in NOT_MEASURED:
                continue
            if not all(is_held(n, values.get(kind, [])) for n in numbers):
                wrong.append(f"{name}: {written!r}")
    assert not wrong, ("figures the results in benchmarks/results do not "
                       f"hold (quote them through benchmarks/chart.py): {wrong}")


def test_the_scan_sees_figures_and_skips_targets():
    text = ("measured 0.47x and 12.5 ns, 3.1-3.7 ns, 13-20 GB/s, 120 µs; "
            "target <= 1.5x, ≥ 0.2×; version 0.10.x, flags 0x11c, 4x4 blocks")
    assert [(w, k) for w, k, _ in figures(text)] == [
        ("0.47x", "ratio"), ("12.5 ns", "ns"), ("3.1-3.7 ns", "ns"),
        ("13-20 GB/s", "rate"), ("120 µs", "us")]
    values = held()
    with open(os.path.join(BENCH, "results", "py3.11.json")) as f:
        fill = next(row["ratio"] for row in json.load(f)["rows"]
                    if row["name"].startswith("C exchange-API DLTensor fill"))
    assert is_held(f"{fill:.2f}", values["ratio"])   # py3.11's DLTensor fill
    assert not is_held("9.41", values["ratio"])  # a ratio no run measured
