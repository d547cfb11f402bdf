"""Exact per-cell sums of magnitudes and their largest contributions.

For each continuous variable a table asks for, an engine computes per cell
(inner cells and margins):

* the exact sum of the contributions, in fixed point
  (:func:`~tablesafe.catalog._magnitudes.magnitude_fixed`): a contribution
  is the value ``x`` or, in a weighted table, ``w x`` (the double product,
  which IEEE arithmetic gives the same in DuckDB, Spark and numpy);
* the ``K`` largest absolute contributions (``|x|`` or ``|w x|``), which the
  cell-key method for magnitudes and the dominance and p% rules need.

The largest contributions of a margin are the largest of the union of its
inner cells' lists, so engines return them for the inner cells only (per
group of raw codes, as ``K`` DOUBLE columns: no list goes through the
grouping sets), :func:`merge_top` merges groups of raw codes into their
inner cell and :func:`top_of_margins` derives every margin from the inner
cells: the result does not depend on row order or partitioning (a
multiset's largest elements are unique).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tablesafe.catalog._magnitudes import magnitude_fixed_sql
from tablesafe.cells._plan import MagnitudePlan

__all__ = [
    "MagnitudeSums",
    "magnitude_sql",
    "merge_top",
    "sums_from_records",
    "top_from_records",
    "top_of_margins",
]


@dataclass(frozen=True, eq=False)
class MagnitudeSums:
    """Exact aggregates of one magnitude, arrays of a table's extended shape.

    Attributes:
        total: Exact sums of the contributions (float64, from fixed point).
        top: The largest absolute contributions, shape ``(K, *shape)``,
            in decreasing order, 0 where a cell has fewer than ``K`` records.
    """

    total: npt.NDArray[np.float64]
    top: npt.NDArray[np.float64]


def magnitude_sql(
    mag: MagnitudePlan,
    i: int,
    ident: Callable[[str], str],
    top_inner: Callable[[str, int], str],
    top_item: Callable[[str, int], str],
) -> tuple[list[str], list[str]]:
    """The inner (per raw cell) and outer (per grouping set) select items of one magnitude.

    Columns: ``ts_m{i}`` (the fixed-point sum, BIGINT) and ``ts_t{i}_{j}`` for
    ``j = 1 .. top`` (the ``j``-th largest absolute contribution, DOUBLE, NULL
    where a cell has fewer records). The inner cells' list ``ts_l{i}`` stays
    inside the query: each inner cell is its own group in the first grouping
    set, so ``MAX`` of its ``j``-th item is that item; in margin rows the
    ``ts_t{i}_{j}`` are not the margin's and are ignored
    (:func:`top_of_margins` derives them from the inner cells).
    """
    x = f"CAST({ident(mag.column)} AS DOUBLE)"
    if mag.weight is not None:
        x = f"({x} * CAST({ident(mag.weight)} AS DOUBLE))"
    if mag.top == 0:
        # A sum alone (replicate sums serve standard errors only).
        return [f"SUM({magnitude_fixed_sql(x)}) AS ts_m{i}"], [
            f"CAST(SUM(ts_m{i}) AS BIGINT) AS ts_m{i}"
        ]
    if mag.top == 1:
        # The largest alone is a plain MAX: no list (DuckDB's max(x, k) and Spark's
        # sorted list cost many times a MAX per record).
        return [
            f"SUM({magnitude_fixed_sql(x)}) AS ts_m{i}",
            f"MAX(ABS({x})) AS ts_l{i}",
        ], [f"CAST(SUM(ts_m{i}) AS BIGINT) AS ts_m{i}", f"MAX(ts_l{i}) AS ts_t{i}_1"]
    inner = [
        f"SUM({magnitude_fixed_sql(x)}) AS ts_m{i}",
        f"{top_inner(f'ABS({x})', mag.top)} AS ts_l{i}",
    ]
    outer = [f"CAST(SUM(ts_m{i}) AS BIGINT) AS ts_m{i}"] + [
        f"MAX({top_item(f'ts_l{i}', j)}) AS ts_t{i}_{j}" for j in range(1, mag.top + 1)
    ]
    return inner, outer


def merge_top(
    cells: npt.NDArray[np.int64], values: npt.NDArray[np.float64], size: int, k: int
) -> npt.NDArray[np.float64]:
    """The ``k`` largest values per cell, shape ``(k, size)``, zero-padded.

    Args:
        cells: Flat cell index of each value.
        values: The values (absolute contributions, or partial top lists flattened).
        size: Number of cells.
        k: How many to keep.
    """
    out = np.zeros((k, size), dtype=np.float64)
    if values.size == 0:
        return out
    order = np.lexsort((-values, cells))
    c = cells[order]
    starts = np.searchsorted(c, c, side="left")
    rank = np.arange(c.size) - starts
    keep = rank < k
    out[rank[keep], c[keep]] = values[order][keep]
    return out


def sums_from_records(
    inner_cell: npt.NDArray[np.int64],
    fixed: npt.NDArray[np.int64],
    shape: tuple[int, ...],
    grouping_sets: Sequence[tuple[int, ...]],
) -> npt.NDArray[np.int64]:
    """Fixed-point sums of records for every cell of the extended shape (exact integers)."""
    inner_shape = tuple(s - 1 for s in shape)
    inner = np.zeros(int(np.prod(inner_shape)), dtype=np.int64)
    np.add.at(inner, inner_cell, fixed)
    a = inner.reshape(inner_shape)
    out = np.zeros(shape, dtype=np.int64)
    for gs in grouping_sets:
        dropped = tuple(i for i in range(len(shape)) if i not in gs)
        idx = tuple(slice(0, s - 1) if i in gs else slice(s - 1, s) for i, s in enumerate(shape))
        out[idx] = a.sum(axis=dropped, keepdims=True) if dropped else a
    return out


def top_of_margins(
    inner_top: npt.NDArray[np.float64],
    shape: tuple[int, ...],
    grouping_sets: Sequence[tuple[int, ...]],
) -> npt.NDArray[np.float64]:
    """The largest values of every cell of the extended shape from the inner cells'.

    A margin's ``k`` largest contributions are the ``k`` largest of the union
    of its inner cells' ``k`` largest (exact: no other value can be among them).

    Args:
        inner_top: Each inner cell's ``k`` largest values in decreasing order,
            zero-padded, shape ``(k, *inner_shape)`` with ``inner_shape = shape - 1``.
        shape: The extended shape (one more slot per axis for its total).
        grouping_sets: The grouping sets to fill (cells outside them stay 0).

    Returns:
        Shape ``(k, *shape)``, in decreasing order along the first axis.
    """
    k = inner_top.shape[0]
    d = len(shape)
    out = np.zeros((k, *shape), dtype=np.float64)
    if k == 0:
        return out
    for gs in grouping_sets:
        kept = [i for i in range(d) if i in gs]
        dropped = [i for i in range(d) if i not in gs]
        # Axes (kept..., k, dropped...) -> (kept..., k * prod(dropped)).
        a = np.transpose(inner_top, [1 + i for i in kept] + [0] + [1 + i for i in dropped])
        a = a.reshape((*a.shape[: len(kept)], -1))
        width = a.shape[-1]
        if width > k:
            a = np.partition(a, width - k, axis=-1)[..., width - k :]
        a = -np.sort(-a, axis=-1)
        idx = tuple(slice(0, s - 1) if i in gs else s - 1 for i, s in enumerate(shape))
        # a's last axis holds the j-th largest: move it first.
        out[(slice(None), *idx)] = np.moveaxis(a, -1, 0)
    return out


def top_from_records(
    inner_cell: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    shape: tuple[int, ...],
    grouping_sets: Sequence[tuple[int, ...]],
    k: int,
) -> npt.NDArray[np.float64]:
    """Largest absolute values of records for every cell of the extended shape.

    Args:
        inner_cell: Flat index of each record's inner cell (shape ``shape - 1``).
        values: Each record's contribution.
        shape: The extended shape (one more slot per axis for its total).
        grouping_sets: The grouping sets to fill.
        k: How many to keep.
    """
    inner_shape = tuple(s - 1 for s in shape)
    absval = np.abs(np.asarray(values, dtype=np.float64))
    inner_top = merge_top(inner_cell, absval, int(np.prod(inner_shape)), k)
    return top_of_margins(inner_top.reshape((k, *inner_shape)), shape, grouping_sets)
