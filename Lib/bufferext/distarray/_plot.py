"""Pictures of a distribution: which process owns which element.

matplotlib is optional; it is imported only when a picture is drawn.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from ._array import DistArray

__all__ = ["plot_distribution"]


def _pyplot() -> Any:
    try:
        import matplotlib  # noqa: F401
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plot_distribution needs matplotlib "
                          "(pip install matplotlib)") from exc
    return plt


def _sections(global_shape: Tuple[int, ...], kwargs: Any) -> Tuple[np.ndarray,
                                                                  List[DistArray]]:
    values = np.arange(int(np.prod(global_shape)), dtype=np.int64).reshape(global_shape)
    nprocs = int(np.prod(kwargs["grid_shape"]))
    sections = [DistArray.from_global(values, rank=r, **kwargs) for r in range(nprocs)]
    return values, sections


def _owners(global_shape: Tuple[int, ...], sections: List[DistArray]) -> np.ndarray:
    owners = np.full(global_shape, -1, dtype=np.int64)
    for d in reversed(sections):         # lowest rank wins for shared 'u' indices
        where = [m.owned_global() for m in d.maps]
        owners[np.ix_(*where)] = d.rank
    return owners


def _as_2d(a: np.ndarray) -> np.ndarray:
    return a.reshape(1, -1) if a.ndim == 1 else a


#: Layout, in inches: the largest cell, the margins around the figure, the
#: gap between panels, the room above a panel (its title) and above all
#: panels (the figure's title); and the widest figure drawn.
_CELL, _MARGIN, _GAP, _PANEL_TITLE, _TITLE, _MAX_WIDTH = 0.34, 0.15, 0.3, 0.3, 0.4, 14.0


def _label_size(cell: float, values: np.ndarray) -> float:
    """Font size (points) at which the widest label fits its cell, or 0
    when it would be too small to read."""
    digits = max((len(str(v)) for v in values.reshape(-1)), default=1)
    points = cell * 72.0
    size = min(8.0, 0.55 * points, 0.85 * points / (0.62 * digits))
    return size if size >= 4.0 else 0.0


def _draw(ax: Any, values: np.ndarray, colours: np.ndarray, cmap: Any, cell: float,
          padding: Optional[np.ndarray] = None) -> None:
    values, colours = _as_2d(values), _as_2d(colours)
    rgba = cmap(np.where(colours >= 0, colours, 0) % cmap.N)
    rgba[colours < 0] = (0.85, 0.85, 0.85, 1.0)
    if padding is not None:
        rgba[_as_2d(padding), 3] = 0.35
    ax.imshow(rgba, interpolation="nearest", aspect="equal")
    size = _label_size(cell, values)
    if size:
        for (i, j), v in np.ndenumerate(values):
            ax.text(j, i, str(v), ha="center", va="center", fontsize=size)
    ax.set_xticks([])
    ax.set_yticks([])


def plot_distribution(global_shape: Sequence[int], *, dist: Any, grid_shape: Sequence[int],
                      block_size: Any = None, padding: Any = None, periodic: Any = None,
                      indices: Any = None, split: str = "balanced", local: bool = True,
                      title: Optional[str] = None) -> Any:
    """Draw which process owns which element of a 1-D or 2-D array.

    Takes the layout arguments of :meth:`DistArray.from_global`.  The first
    panel shows the global array, each element coloured by its owner's rank
    and labelled with its flat global index; with ``local=True`` one more
    panel per process shows its local buffer in local order, padding cells
    faded.  Every panel is drawn at the same scale (one cell is the same
    size everywhere, so a local block looks as big as it is next to the
    global array); labels shrink to fit their cells and are left out when
    they would be too small to read.  Returns the matplotlib Figure.
    Raises ImportError if matplotlib is missing (``pip install
    matplotlib``).
    """
    plt = _pyplot()
    shape = tuple(int(n) for n in global_shape)
    if len(shape) not in (1, 2):
        raise ValueError(f"global_shape={global_shape!r}: only 1-D and 2-D "
                         "distributions can be drawn")
    kwargs = dict(dist=dist, grid_shape=tuple(grid_shape), block_size=block_size,
                  padding=padding, periodic=periodic, indices=indices, split=split)
    values, sections = _sections(shape, kwargs)
    owners = _owners(shape, sections)
    cmap = plt.get_cmap("tab20" if len(sections) > 10 else "tab10")
    flat = owners.reshape(-1)
    panels: List[Tuple[Any, Any, Any, str]] = [
        (values, owners, None, "global (colour = owner rank)")]
    if local:
        for d in sections:
            owned = np.zeros(d.local_shape, dtype=bool)
            owned[tuple(m.owned_slice for m in d.maps)] = True
            vals = d.local
            panels.append((vals, flat[vals.reshape(-1)].reshape(vals.shape), ~owned,
                           f"rank {d.rank} {d.grid_coords}"))
    sizes = [_as_2d(v).shape for v, _, _, _ in panels]
    columns = sum(max(c, 1) for _, c in sizes)
    room = _MAX_WIDTH - 2 * _MARGIN - _GAP * (len(panels) - 1)
    cell = min(_CELL, room / columns)
    widths = [max(c, 1) * cell for _, c in sizes]
    heights = [max(r, 1) * cell for r, _ in sizes]
    fig_w = 2 * _MARGIN + sum(widths) + _GAP * (len(panels) - 1)
    fig_h = _MARGIN + max(heights) + _PANEL_TITLE + _TITLE
    fig = plt.figure(figsize=(fig_w, fig_h))
    top = fig_h - _TITLE - _PANEL_TITLE         # panels hang from one line
    x = _MARGIN
    for (vals, colours, pad, name), w, h in zip(panels, widths, heights):
        ax = fig.add_axes((x / fig_w, (top - h) / fig_h, w / fig_w, h / fig_h))
        _draw(ax, vals, colours, cmap, cell, padding=pad)
        # a title no wider than its panel and the gap beside it
        room_pts = (w + _GAP) * 72.0
        ax.set_title(name, fontsize=min(8.0, room_pts / (0.6 * len(name))), pad=3)
        x += w + _GAP
    letters = dist if isinstance(dist, str) else "".join(dist)
    fig.suptitle(title or f"dist={letters!r} on grid {tuple(grid_shape)}", fontsize=9,
                 y=1 - 0.12 / fig_h, va="top")
    return fig
