"""Draw benchmarks/results/py*.json as one chart: for every operation with
a target, its ratio to its anchor divided by the target, per interpreter
(below 1: the target holds).  Writes docs/_static/benchmarks.png.

Run: ``python benchmarks/chart.py [OUT.png]`` (needs matplotlib).
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from typing import Dict, List, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, os.pardir, "docs", "_static", "benchmarks.png")


def load() -> Tuple[List[str], Dict[str, Dict[str, float]]]:
    """Interpreters in version order, and per operation ``{python: ratio /
    target}`` (the better one where a run measured an operation twice)."""
    runs = {}
    for path in glob.glob(os.path.join(HERE, "results", "py*.json")):
        minor = re.search(r"py(3\.\d+)\.json$", path)
        if minor:
            with open(path) as f:
                runs[minor.group(1)] = json.load(f)["rows"]
    pythons = sorted(runs, key=lambda v: tuple(int(p) for p in v.split(".")))
    ops: Dict[str, Dict[str, float]] = {}
    for py in pythons:
        for row in runs[py]:
            if row.get("target") and row.get("ratio") and row.get("exact") is None:
                mine = ops.setdefault(row["name"], {})
                mine[py] = min(mine.get(py, np.inf), row["ratio"] / row["target"])
    return pythons, ops


def main() -> int:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = sys.argv[1] if len(sys.argv) > 1 else OUT
    pythons, ops = load()
    names = sorted(ops)
    fig, ax = plt.subplots(figsize=(9.5, 0.42 * len(names) + 1.4))
    height = 0.8 / max(len(pythons), 1)
    cmap = plt.get_cmap("viridis")
    for k, py in enumerate(pythons):
        y = np.arange(len(names)) + (k - (len(pythons) - 1) / 2) * height
        x = [ops[n].get(py, np.nan) for n in names]
        ax.barh(y, x, height=height, color=cmap(k / max(len(pythons) - 1, 1)),
                label=f"CPython {py}")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(np.arange(len(names)))
    ax.set_yticklabels(names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ratio to the anchor / target  (left of the line: the target holds)",
                  fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=7, ncol=4, loc="lower center", bbox_to_anchor=(0.4, 1.0),
              frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}: {len(names)} operations x {len(pythons)} interpreters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
