"""What benchmarks/bench_distarray.py prints for a measurement: a figure
with no target says so (it printed "target None")."""

from __future__ import annotations

import importlib.util
import os

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "benchmarks", "bench_distarray.py")


@pytest.fixture(scope="module")
def bench():
    if not os.path.isfile(SCRIPT):
        pytest.skip("benchmarks/ is not beside the tests")
    spec = importlib.util.spec_from_file_location("bench_distarray", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_row_names_its_target_or_that_it_has_none(bench) -> None:
    figure = dict(name="import 3-D + numpy view", seconds=19.4e-6, target=None, ok=None)
    assert bench.row(figure) == f"{'import 3-D + numpy view':32s}    19.40 us  " \
                                f"{'':38s} no target"
    timed = dict(name="import 3-D", seconds=15.25e-6, target="<= 20 us", ok=False)
    assert bench.row(timed).endswith("    15.25 us  " + " " * 38 + " target <= 20 us  MISSED")
    ratio = dict(name="owner[block]", seconds=3.38e-3, ratio=0.36,
                 numpy_pass_seconds=1.2e-3, target=">= 0.2", ok=True)
    assert bench.row(ratio) == (f"{'owner[block]':32s}     3.38 ms  "
                                f"{'ratio 0.36 (numpy pass 1.2 ms)':38s} target >= 0.2  OK")
