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


def _draw(ax: Any, values: np.ndarray, colours: np.ndarray, cmap: Any, nprocs: int,
          padding: Optional[np.ndarray] = None) -> None:
    values, colours = _as_2d(values), _as_2d(colours)
    rgba = cmap(np.where(colours >= 0, colours, 0) % cmap.N)
    rgba[colours < 0] = (0.85, 0.85, 0.85, 1.0)
    if padding is not None:
        rgba[_as_2d(padding), 3] = 0.35
    ax.imshow(rgba, interpolation="nearest", aspect="equal")
    if values.size <= 400:
        for (i, j), v in np.ndenumerate(values):
            ax.text(j, i, str(v), ha="center", va="center", fontsize=7)
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
    faded.  Returns the matplotlib Figure.  Raises ImportError if matplotlib
    is missing.
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
    panels = 1 + (len(sections) if local else 0)
    fig, axes = plt.subplots(1, panels, figsize=(2.2 + 1.9 * panels, 2.6),
                             squeeze=False)
    _draw(axes[0, 0], values, owners, cmap, len(sections))
    axes[0, 0].set_title("global (colour = owner rank)", fontsize=8)
    if local:
        for ax, d in zip(axes[0, 1:], sections):
            vals = d.local
            owned = np.zeros(d.local_shape, dtype=bool)
            owned[tuple(m.owned_slice for m in d.maps)] = True
            _draw(ax, vals, owners.reshape(-1)[vals.reshape(-1)].reshape(vals.shape),
                  cmap, len(sections), padding=~owned)
            ax.set_title(f"rank {d.rank} {d.grid_coords}", fontsize=8)
    letters = dist if isinstance(dist, str) else "".join(dist)
    fig.suptitle(title or f"dist={letters!r} on grid {tuple(grid_shape)}", fontsize=9)
    fig.tight_layout()
    return fig
