"""Benchmarks of bufferext.distarray against the issue's anchors.

* vectorised ``owner`` / ``global_to_local`` over 10**7 indices, as a ratio
  to one plain numpy elementwise pass over the same array (``g + 1``);
  target >= 0.2 (block, cyclic, block-cyclic, unstructured);
* ``__distarray__`` + ``validate`` of a 3-D section: target <= 20 us;
* ``DistArray.from_distarray`` (import): target <= 20 us.

Run: ``python benchmarks/bench_distarray.py [--quick]``.  ``run(quick)``
returns one dict per measurement.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Dict, List

import numpy as np

from bufferext.distarray import DistArray, validate


def _best(fn: Callable[[], Any], repeat: int, number: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def _map_cases(n: int) -> List[Dict[str, Any]]:
    size, grid = n, 4
    rng = np.random.default_rng(0)
    glob = np.empty(0)
    perm = rng.permutation(size)
    parts = np.array_split(perm, grid)
    cases = []
    for label, kwargs in [
        ("block", dict(dist="b")),
        ("cyclic", dict(dist="c")),
        ("block-cyclic", dict(dist="c", block_size=64)),
        ("unstructured", dict(dist="u", indices=[list(p) for p in parts] if n <= 10 else parts)),
    ]:
        m = _layout_map(size, grid, kwargs)
        g = rng.integers(0, size, n)
        mine = m.owned_global()
        local_g = mine[rng.integers(0, mine.size, n)]
        cases.append(dict(label=label, map=m, g=g, local_g=local_g))
    del glob
    return cases


def _layout_map(size: int, grid: int, kwargs: Dict[str, Any]) -> Any:
    # a 1-element-wide global array would cost size*8 bytes; build the map only
    from bufferext.distarray._spec import _dim_maker
    dist = kwargs["dist"]
    return _dim_maker(dist, size, grid, kwargs.get("block_size"), None, None,
                      kwargs.get("indices"), "balanced", 0)(1)


def bench_maps(quick: bool) -> List[Dict[str, Any]]:
    n = 10**6 if quick else 10**7
    repeat = 3 if quick else 5
    out = []
    for case in _map_cases(n):
        g, m = case["g"], case["map"]
        base = _best(lambda: np.add(g, 1), repeat)
        for op, fn in (("owner", lambda: m.owner(g)),
                       ("global_to_local", lambda: m.global_to_local(case["local_g"]))):
            t = _best(fn, repeat)
            out.append(dict(name=f"{op}[{case['label']}]", n=n, seconds=t,
                            numpy_pass_seconds=base, ratio=base / t, target=">= 0.2",
                            ok=base / t >= 0.2))
    return out


def bench_protocol(quick: bool) -> List[Dict[str, Any]]:
    glob = np.zeros((40, 50, 60))
    d = DistArray.from_global(glob, dist="bcb", grid_shape=(2, 3, 2), rank=7,
                              block_size=4, padding=((1, 1), None, (2, 2)))
    number = 2000 if quick else 20000

    def export_validate() -> None:
        validate(d.__distarray__())

    data = d.__distarray__()

    def imp() -> None:
        DistArray.from_distarray(data)

    def imp_local() -> None:
        DistArray.from_distarray(data).local

    out = []
    for name, fn, target in (("export+validate 3-D", export_validate, 20e-6),
                             ("import 3-D (from_distarray)", imp, 20e-6),
                             ("import 3-D + numpy view", imp_local, None)):
        t = _best(fn, 5, number)
        out.append(dict(name=name, seconds=t, target=None if target is None
                        else f"<= {target * 1e6:.0f} us",
                        ok=None if target is None else t <= target))
    return out


def run(quick: bool = False) -> List[Dict[str, Any]]:
    """Every measurement, one dict each (name, seconds, ratio/target, ok)."""
    return bench_maps(quick) + bench_protocol(quick)


def row(r: Dict[str, Any]) -> str:
    """One measurement as a line: name, time, ratio, target and verdict (a
    figure with no target says so)."""
    extra = (f"ratio {r['ratio']:.2f} (numpy pass {r['numpy_pass_seconds'] * 1e3:.1f} ms)"
             if "ratio" in r else "")
    t = r["seconds"]
    shown = f"{t * 1e3:8.2f} ms" if t > 1e-3 else f"{t * 1e6:8.2f} us"
    target = "no target" if r["target"] is None else f"target {r['target']}"
    verdict = "" if r["ok"] is None else "OK" if r["ok"] else "MISSED"
    return f"{r['name']:32s} {shown}  {extra:38s} {target}  {verdict}".rstrip()


def main(argv: List[str]) -> int:
    for r in run(quick="--quick" in argv):
        print(row(r))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
