"""Design matrices: z = X^T y for margins of a frequency table (Langsrud 2019, eq. 1).

``y`` holds the inner cells of a k-way table (C order); each column of the
sparse dummy matrix ``X`` (scipy.sparse, never dense) adds up the inner
cells of one element of ``z``: an inner cell, a margin cell, the overall
total, or the sum over a group of categories (a hierarchy from the
catalog's groupings).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import sparse

from tablesafe._errors import ParameterError

__all__ = ["DesignMatrix", "all_margins", "design_matrix"]


@dataclass(frozen=True, eq=False)
class DesignMatrix:
    """A dummy matrix X with z = X^T y.

    Attributes:
        x: Sparse (CSC) matrix of shape ``(inner cells kept, elements of z)``.
        shape: The inner table's shape.
        columns: For each column of X, the margin (kept dimensions) and the
            cell of that margin, as a tuple with ``None`` for a summed dimension
            (or ``("group", dim, g)`` entries for group sums).
        rows: Flat indices (C order) of the inner cells kept as rows.
    """

    x: sparse.csc_matrix
    shape: tuple[int, ...]
    columns: tuple[tuple[object, ...], ...]
    rows: npt.NDArray[np.int64]

    def margins(self, y: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Z = X^T y for inner cells ``y`` (full table or kept rows)."""
        v = np.asarray(y, dtype=np.float64).ravel()
        if v.size == int(np.prod(self.shape)):
            v = v[self.rows]
        return np.asarray(self.x.T @ v, dtype=np.float64)

    def full(self, y_rows: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The inner table from values of the kept rows (dropped rows are 0)."""
        out = np.zeros(int(np.prod(self.shape)))
        out[self.rows] = np.asarray(y_rows, dtype=np.float64)
        return out.reshape(self.shape)


def all_margins(k: int, order: int | None = None, *, total: bool = True) -> list[tuple[int, ...]]:
    """Margins of a k-way table: all of a given order (``order``), or every proper one.

    Args:
        k: Number of dimensions.
        order: Keep only margins over this many dimensions (e.g. 2 for all
            two-way margins); ``None`` for every margin of order 1..k-1.
        total: Include the overall total ``()``.
    """
    orders = [order] if order is not None else list(range(1, k))
    out = [m for r in orders for m in itertools.combinations(range(k), r)]
    if total and () not in out:
        out.append(())
    return out


def design_matrix(
    shape: Sequence[int],
    margins: Sequence[Sequence[int]],
    *,
    groupings: Mapping[int, Sequence[Sequence[int]]] | None = None,
    keep: npt.ArrayLike | None = None,
) -> DesignMatrix:
    """The dummy matrix of the given margins of a table of ``shape``.

    Args:
        shape: Inner table shape (categories per dimension).
        margins: Each margin as the dimensions it keeps; ``range(k)`` is the
            inner cells themselves, ``()`` the overall total.
        groupings: Per dimension, groups of its categories (a hierarchy);
            each margin that keeps that dimension also gets one column per
            group (and combination of the other kept dimensions).
        keep: Boolean mask (or flat indices) of inner cells to keep as rows;
            dropping the zero inner cells gives Langsrud's "data without
            zeros" variant.

    Raises:
        ParameterError: for a margin naming a dimension outside the table.
    """
    shape = tuple(int(s) for s in shape)
    k = len(shape)
    n = int(np.prod(shape))
    idx = np.arange(n).reshape(shape)
    rows_list: list[npt.NDArray[np.int64]] = []
    cols: list[tuple[object, ...]] = []
    for margin in margins:
        m = tuple(sorted(set(int(d) for d in margin)))
        if any(d < 0 or d >= k for d in m):
            raise ParameterError(f"margin {list(margin)} names a dimension outside 0..{k - 1}")
        # Member lists for each kept dimension: single categories, then groups.
        options: list[list[tuple[object, list[int]]]] = []
        for d in m:
            opts: list[tuple[object, list[int]]] = [(c, [c]) for c in range(shape[d])]
            for g, members in enumerate((groupings or {}).get(d, [])):
                opts.append((("group", g), [int(c) for c in members]))
            options.append(opts)
        for combo in itertools.product(*options):
            sel: list[object] = [slice(None)] * k
            label: list[object] = [None] * k
            for d, (lab, members) in zip(m, combo, strict=True):
                sel[d] = members
                label[d] = lab
            cells = idx[
                np.ix_(
                    *[
                        s if isinstance(s, list) else list(range(shape[i]))
                        for i, s in enumerate(sel)
                    ]
                )
            ].ravel()
            rows_list.append(cells)
            cols.append(tuple(label))
    if keep is None:
        kept = np.arange(n)
    else:
        kk = np.asarray(keep)
        kept = np.flatnonzero(kk.ravel()) if kk.dtype == bool else np.sort(kk.astype(np.int64))
    position = np.full(n, -1)
    position[kept] = np.arange(kept.size)
    data_rows, data_cols = [], []
    for j, cells in enumerate(rows_list):
        r = position[cells]
        r = r[r >= 0]
        data_rows.append(r)
        data_cols.append(np.full(r.size, j))
    r_all = np.concatenate(data_rows) if data_rows else np.zeros(0, dtype=np.int64)
    c_all = np.concatenate(data_cols) if data_cols else np.zeros(0, dtype=np.int64)
    x = sparse.csc_matrix((np.ones(r_all.size), (r_all, c_all)), shape=(kept.size, len(cols)))
    return DesignMatrix(x=x, shape=shape, columns=tuple(cols), rows=kept.astype(np.int64))
