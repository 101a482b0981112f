"""Every example of the protocol's 0.10.0 and 0.9.0 texts (and the layouts of
0.10.0's generated example pages) as fixtures, on all ranks, element by element."""

from __future__ import annotations

import numpy as np
import pytest

from bufferext.distarray import DistArray, ProtocolError, validate
from test_distarray_helpers import check_section, check_tiling, sections

G59 = np.arange(45.0).reshape(5, 9)


def _export(version, buffer, *dims):
    return {"__version__": version, "buffer": buffer, "dim_data": tuple(dims)}


def _b(size, grid, rank, start, stop, **extra):
    d = {"dist_type": "b", "size": size, "proc_grid_size": grid,
         "proc_grid_rank": rank, "start": start, "stop": stop}
    d.update(extra)
    return d


# -- 0.10.0: the padding table (4, 1), (1, 2), (2, 3), (3, 0) ---------------------

def test_spec_padding_table_all_ranks():
    glob = np.arange(30) * 10
    pads = [(4, 1), (1, 2), (2, 3), (3, 0)]
    parts = sections(glob, dist="b", grid_shape=(4,), padding=pads)
    for r, d in enumerate(parts):
        dd = d.dim_data[0]
        assert dd["padding"] == pads[r]
        validate(d.__distarray__())
        check_section(d, glob)
        imported = DistArray.from_distarray(d)
        check_section(imported, glob)
        assert np.shares_memory(imported.local, d.local)
    # neighbours' communication padding overlaps the neighbour's owned cells
    for left, right in zip(parts, parts[1:]):
        assert left.dim_data[0]["stop"] - right.dim_data[0]["start"] == \
            left.dim_data[0]["padding"][1] + right.dim_data[0]["padding"][0]
    check_tiling(parts, glob)
    assert parts[0].dim_data[0]["start"] == 0 and parts[3].dim_data[0]["stop"] == 30


def test_spec_empty_dict_alias():
    buf = np.arange(7.0)
    d = DistArray.from_distarray(_export("0.10.0", buf, {}))
    m = d.maps[0]
    assert (m.dist_type, m.size, m.grid_size, m.grid_rank, m.start, m.stop) == \
        ("b", 7, 1, 0, 0, 7)
    assert d.dim_data == ({},)
    check_section(d, buf)
    assert d.owner(6) == 0


def test_all_examples_padded_block_010():
    # all_examples.rst at 0.10.0: size 18, [0,10) and [8,18), padding (1, 1)
    glob = np.arange(18.0)
    ranks = [(_b(18, 2, 0, 0, 10, padding=(1, 1)), glob[0:10]),
             (_b(18, 2, 1, 8, 18, padding=(1, 1)), glob[8:18])]
    owned = []
    for dd, buf in ranks:
        d = DistArray.from_distarray(_export("0.10.0", buf.copy(), dd))
        check_section(d, glob)
        owned.append(d.maps[0].owned_global())
    np.testing.assert_array_equal(np.concatenate(owned), np.arange(18))
    ours = sections(glob, dist="b", grid_shape=(2,), padding=(1, 1))
    assert [p.dim_data[0] for p in ours] == [dict(dd, periodic=False) for dd, _ in ranks]


def test_all_examples_block_block_2x1():
    parts = sections(G59, dist="bb", grid_shape=(2, 1))
    assert [p.dim_data[0]["stop"] for p in parts] == [3, 5]
    for p in parts:
        check_section(p, G59)
    check_tiling(parts, G59)


# -- 0.10.0 generated example pages: 5x9 (and 5x9x3) arrays ----------------------

GENERATED = [
    ("bn", (3, 1), {}),
    ("nb", (1, 3), {}),
    ("bb", (2, 2), {}),
    ("bc", (2, 2), {}),
    ("cc", (2, 2), {}),
    ("cc", (2, 2), {"block_size": 2}),          # block-cyclic x block-cyclic
    ("uu", (2, 2), {"indices": [[[4, 0, 2], [1, 3]], [[8, 0, 3, 6, 4], [1, 2, 5, 7]]]}),
]


@pytest.mark.parametrize("dist,grid,extra", GENERATED)
@pytest.mark.parametrize("split", ["balanced", "ceil"])
def test_generated_examples(dist, grid, extra, split):
    parts = sections(G59, dist=dist, grid_shape=grid, split=split, **extra)
    for p in parts:
        validate(p.__distarray__())
        check_section(p, G59)
        check_section(DistArray.from_distarray(p.__distarray__()), G59)
    check_tiling(parts, G59)


def test_generated_irregular_block_by_hand():
    # irregular blocks cannot come from a split; write the dim_data by hand
    rows, cols = [(0, 1), (1, 5)], [(0, 7), (7, 9)]
    for r0, (a, b) in enumerate(rows):
        for r1, (c, e) in enumerate(cols):
            d = DistArray.from_distarray(_export(
                "0.10.0", G59[a:b, c:e].copy(), _b(5, 2, r0, a, b), _b(9, 2, r1, c, e)))
            check_section(d, G59)


def test_generated_cbc_on_2x2x2():
    glob = np.arange(135.0).reshape(5, 9, 3)
    parts = sections(glob, dist="cbc", grid_shape=(2, 2, 2))
    assert [p.rank for p in parts] == list(range(8))
    assert parts[5].grid_coords == (1, 0, 1)
    for p in parts:
        check_section(p, glob)
    check_tiling(parts, glob)


def test_generated_cyclic_matches_the_slice_rule():
    for p in sections(G59, dist="cc", grid_shape=(2, 2)):
        r0, r1 = p.grid_coords
        np.testing.assert_array_equal(p.local, G59[r0::2, r1::2])


# -- 0.9.0 examples (import only) -------------------------------------------------

def test_v090_block_nodist_example():
    glob = np.arange(20.0).reshape(2, 10)
    for rank in (0, 1):
        data = _export("0.9.0", glob[rank:rank + 1].copy(),
                       _b(2, 2, rank, rank, rank + 1), {"size": 10, "dist_type": "n"})
        d = DistArray.from_distarray(data)
        assert d.dim_data[1] == {}
        assert d.global_shape == (2, 10) and d.grid_shape == (2, 1)
        check_section(d, glob)
        assert d.__distarray__()["__version__"] == "0.10.0"
        validate(d.__distarray__())


def test_v090_padded_block_example():
    # 0.9: start/stop exclude communication padding: B 1..8 C | C 9..16 B
    glob = np.arange(18.0)
    data = [(_b(18, 2, 0, 0, 9, padding=(1, 1)), glob[0:10]),
            (_b(18, 2, 1, 9, 18, padding=(1, 1)), glob[8:18])]
    for dd, buf in data:
        d = DistArray.from_distarray(_export("0.9.0", buf.copy(), dd))
        check_section(d, glob)
        validate(d.__distarray__())
    first = DistArray.from_distarray(_export("0.9.0", glob[0:10].copy(), data[0][0]))
    assert (first.maps[0].start, first.maps[0].stop) == (0, 10)
    assert first.maps[0].owned_range == (0, 9)
    with pytest.raises(ProtocolError, match="stop - start"):
        validate(_export("0.10.0", glob[0:10].copy(), data[0][0]))


V09_U = [[19, 1, 0, 12, 2, 15, 4], [6, 13, 3],
         [10, 25, 5, 21, 7, 18, 11, 26, 29, 24, 23, 28, 14, 20, 9, 16, 27, 8, 17, 22]]


def test_v090_unstructured_example():
    glob = np.linspace(0.0, 1.0, 30)
    assert sorted(sum(V09_U, [])) == list(range(30))
    for rank, idx in enumerate(V09_U):
        dd = {"size": 30, "dist_type": "u", "proc_grid_rank": rank,
              "proc_grid_size": 3, "indices": idx}     # a list, as printed in 0.9.0
        d = DistArray.from_distarray(_export("0.9.0", glob[idx].copy(), dd))
        check_section(d, glob)
        assert d.owner(idx[0]) == rank
        with pytest.raises(IndexError, match="not held"):
            d.global_to_local(V09_U[(rank + 1) % 3][0])
    ours = sections(glob, dist="u", grid_shape=(3,), indices=V09_U)
    assert all(p.dim_data[0]["one_to_one"] for p in ours)
    check_tiling(ours, glob)
    assert ours[0].owner(6) == 1 and ours[2].owner(29) == 2


def test_v10_rejects_the_09_list_spellings():
    dd = {"size": 3, "dist_type": "u", "proc_grid_rank": 0, "proc_grid_size": 1,
          "indices": [0, 1, 2]}
    with pytest.raises(ProtocolError, match="indices"):
        validate(_export("0.10.0", np.zeros(3), dd))
    validate(_export("0.9.0", np.zeros(3), dd))
