"""Exact weighted quantiles of every cell, from the records' values sorted per cell.

A quantile is not a sum: no aggregate of a cell's parts gives it, so engines
return the records themselves (:class:`RecordValues`: each record's inner
cell, value, weight and record key, for the records of the universe) and the
order statistics are computed here, once, in numpy. The same records give
the same bits in every engine (DuckDB, Spark, memory, the cube cache), in
every row order: records are sorted by value, then record key (a total
order: two records never tie on both), and weights are added as fixed-point
integers (:mod:`tablesafe.cells._fixed`), so every comparison is exact.

The quantile ``p`` of a cell is the value of its record at rank ``r``, the
first rank (in that order) at which the cumulative weight reaches ``p`` of
the cell's total weight (unweighted: every weight 1)::

    r = min { i : w_(1) + ... + w_(i) >= p * (w_(1) + ... + w_(n)) }

the inverse of the cell's weighted empirical distribution function
(Hyndman & Fan 1996, definition 1, with weights). Its *window* is the
records of ranks ``r - h .. r + h`` (:class:`QuantileRanks`), which the
protection (:mod:`tablesafe.mechanisms._quantiles`) scales its noise to
and keys its draws by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tablesafe.cells._fixed import to_fixed

__all__ = [
    "QuantileRanks",
    "RecordValues",
    "SortedCells",
    "quantile_ranks",
    "ranks_at",
    "shares_at_or_below",
    "sort_cells",
]

#: Quantiles are asked for in hundredths (percentiles): ``p = percent / 100``.
PERCENT = 100


@dataclass(frozen=True, eq=False)
class RecordValues:
    """The records of a universe that hold a value of one continuous variable.

    Attributes:
        cell: Each record's inner cell, a flat index over the table's inner shape.
        x: Each record's value.
        weight: Each record's weight, or ``None`` (every weight 1).
        key: Each record's record key.
        replicate_fixed: Each record's replicate weights ``(R, records)`` in
            fixed point (:func:`~tablesafe.cells._fixed.to_fixed`; SQL engines
            convert them in the query), or ``None`` (listed only for the
            standard errors of quantiles).
    """

    cell: npt.NDArray[np.int64]
    x: npt.NDArray[np.float64]
    weight: npt.NDArray[np.float64] | None
    key: npt.NDArray[np.int64]
    replicate_fixed: npt.NDArray[np.int64] | None = None


@dataclass(frozen=True, eq=False)
class SortedCells:
    """The records of every computed cell (inner cells and margins), each cell's sorted.

    A record appears once per grouping set (in its inner cell and in each
    margin that holds it). Cells are consecutive runs of the arrays.

    Attributes:
        shape: The table's extended shape.
        x: Values, by cell (extended flat index), then value, then record key.
        key: Record keys in that order.
        cum_weight: Cumulative fixed-point weights over the whole array (int64).
        start: Per extended cell, where its run starts.
        count: Per extended cell, its number of records.
        record: Each position's record (its row of :class:`RecordValues`).
        replicate_fixed: The records' fixed-point replicate weights ``(R, records)``
            in :class:`RecordValues`' order, or ``None``.
    """

    shape: tuple[int, ...]
    x: npt.NDArray[np.float64]
    key: npt.NDArray[np.int64]
    cum_weight: npt.NDArray[np.int64]
    start: npt.NDArray[np.int64]
    count: npt.NDArray[np.int64]
    record: npt.NDArray[np.int64] | None = None
    replicate_fixed: npt.NDArray[np.int64] | None = None

    def weight_before(self, i: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The cumulative fixed-point weight up to (not including) positions ``i``."""
        before = np.zeros(i.shape, dtype=np.int64)
        inside = i > 0
        before[inside] = self.cum_weight[i[inside] - 1]
        return before

    def cells(self, flat: npt.NDArray[np.int64]) -> list[npt.NDArray[np.float64]]:
        """The sorted values of the cells ``flat`` (extended flat indices)."""
        return [self.x[s : s + c] for s, c in zip(self.start[flat], self.count[flat], strict=True)]


def sort_cells(
    values: RecordValues, shape: tuple[int, ...], grouping_sets: Sequence[tuple[int, ...]]
) -> SortedCells:
    """Every cell's records in (value, record key) order, for the cells of ``grouping_sets``.

    Args:
        values: The records (their inner cells over ``shape`` minus the totals).
        shape: The table's extended shape.
        grouping_sets: The grouping sets whose cells to fill.
    """
    inner_shape = tuple(s - 1 for s in shape)
    n = values.cell.size
    inner = (
        np.unravel_index(values.cell, inner_shape)
        if n
        else tuple(np.zeros(0, dtype=np.int64) for _ in shape)
    )
    cells = []
    for gs in grouping_sets:
        index = tuple(
            inner[i] if i in gs else np.full(n, s - 1, dtype=np.int64) for i, s in enumerate(shape)
        )
        cells.append(np.ravel_multi_index(index, shape) if n else np.zeros(0, dtype=np.int64))
    cell = np.concatenate(cells) if cells else np.zeros(0, dtype=np.int64)
    record = np.tile(np.arange(n, dtype=np.int64), len(cells))
    order = np.lexsort((values.key[record], values.x[record], cell))
    cell, record = cell[order], record[order]
    size = int(np.prod(shape))
    count = np.bincount(cell, minlength=size).astype(np.int64)
    start = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    weight = (
        np.full(n, 1 << 16, dtype=np.int64) if values.weight is None else to_fixed(values.weight)
    )
    return SortedCells(
        shape=shape,
        x=values.x[record],
        key=values.key[record],
        cum_weight=np.cumsum(weight[record], dtype=np.int64),
        start=start,
        count=count,
        record=record,
        replicate_fixed=values.replicate_fixed,
    )


@dataclass(frozen=True, eq=False)
class QuantileRanks:
    """Where one quantile lies in every cell: its record and its window.

    Attributes:
        percent: The quantile, in hundredths.
        window: ``h``: the records on each side of the quantile's that its window holds.
        position: Per extended cell, the position (into :class:`SortedCells`'
            arrays) of the quantile's record; -1 in a cell without weight.
        fits: Per extended cell, whether ``h`` records lie below and above it
            (so its window, ``2 h + 1`` records, is inside the cell).
    """

    percent: int
    window: int
    position: npt.NDArray[np.int64]
    fits: npt.NDArray[np.bool_]


def quantile_ranks(cells: SortedCells, percent: int, window: int) -> QuantileRanks:
    """The rank of quantile ``percent / 100`` in every cell (exact integer comparisons).

    Args:
        cells: The sorted cells.
        percent: The quantile in hundredths, 1 to 99.
        window: ``h``, the records each side of the quantile's record its window holds.
    """
    start, count = cells.start, cells.count
    end = start + count
    before = cells.weight_before(start)
    total = cells.weight_before(end) - before
    # The first i with 100 (C_i - before) >= percent * total, as integers:
    # C_i >= before + ceil(percent * total / 100) (total < 2**52: no overflow).
    target = before + -((-percent * total) // PERCENT)
    position = np.searchsorted(cells.cum_weight, target, side="left").astype(np.int64)
    live = (count > 0) & (total > 0)
    position = np.where(live, np.minimum(np.maximum(position, start), end - 1), -1)
    fits = live & (position - window >= start) & (position + window < end)
    return QuantileRanks(percent, window, position, fits)


def ranks_at(cells: SortedCells, share: npt.NDArray[np.float64], window: int) -> QuantileRanks:
    """The rank at which each cell's cumulative weight first reaches its own ``share`` of the total.

    The same definition as :func:`quantile_ranks` (Hyndman & Fan's first,
    with weights) at a share that differs from cell to cell (the ends of a
    quantile's interval): ``r = min { i : C_i >= ceil(share * total) }`` in
    fixed point, the product rounded up in double precision (the total is
    below 2**52, so every integer of it is exact). NaN shares give no rank.

    Args:
        cells: The sorted cells.
        share: Per extended cell (flat), the share in ``[0, 1]``, or NaN.
        window: ``h``, the records each side of the record its window holds.
    """
    start, count = cells.start, cells.count
    end = start + count
    before = cells.weight_before(start)
    total = cells.weight_before(end) - before
    live = (count > 0) & (total > 0) & np.isfinite(share)
    need = np.ceil(np.where(live, share, 0.0) * total.astype(np.float64)).astype(np.int64)
    position = np.searchsorted(cells.cum_weight, before + need, side="left").astype(np.int64)
    position = np.where(live, np.minimum(np.maximum(position, start), end - 1), -1)
    fits = live & (position - window >= start) & (position + window < end)
    return QuantileRanks(0, window, position, fits)


def _tie_ends(cells: SortedCells) -> npt.NDArray[np.int64]:
    """For every position, the last position of its cell holding the same value."""
    n = cells.x.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    cell = np.repeat(np.arange(cells.count.size, dtype=np.int64), cells.count)
    new_run = (cell[1:] != cell[:-1]) | (cells.x[1:] != cells.x[:-1])
    last = np.flatnonzero(np.concatenate([new_run, [True]])).astype(np.int64)
    run = np.concatenate([[0], np.cumsum(new_run)]).astype(np.int64)
    return last[run]


def shares_at_or_below(
    cells: SortedCells, position: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64] | None]:
    """Per cell, the share of its weight on records whose value is at most the one at ``position``.

    Woodruff's interval of a quantile ``q`` reads the estimated distribution
    function at ``q``, ``F(q)``, and its replicate estimates ``F_r(q)`` (the
    same share with replicate weight ``r``, ``q`` held fixed). Weights are
    added in fixed point, as the quantile's rank is found.

    Args:
        cells: The sorted cells (with their records' replicate weights for ``F_r``).
        position: Per extended cell (flat), a position in it, or -1.

    Returns:
        ``F`` per cell (NaN where ``position`` is -1) and ``F_r`` of shape
        ``(R, cells)`` (NaN where a replicate's weight of the cell is not
        positive), or ``None`` without replicate weights.
    """
    live = position >= 0
    at = np.where(live, position, 0)
    end = cells.start + cells.count
    upto = np.where(live, _tie_ends(cells)[at] + 1, cells.start) if cells.x.size else cells.start

    def share(cumulative: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        padded = np.concatenate([[0], cumulative])
        below = padded[upto] - padded[cells.start]
        whole = padded[end] - padded[cells.start]
        out = np.full(position.shape, np.nan)
        np.divide(below, whole, out=out, where=live & (whole > 0))
        return out

    main = share(cells.cum_weight)
    if cells.replicate_fixed is None or cells.record is None:
        return main, None
    return main, _replicate_shares(cells, upto, live)


def _replicate_shares(
    cells: SortedCells, upto: npt.NDArray[np.int64], live: npt.NDArray[np.bool_]
) -> npt.NDArray[np.float64]:
    """Step 2 of :func:`shares_at_or_below`: ``F_r`` of every cell, all replicates at once.

    Two sparse products of the cells' records with the replicate weights in
    fixed point: the weight at or below the quantile, and the cell's. The
    fixed-point integers and their sums (below 2**52) are exact in doubles,
    so any order of addition gives the same bits.
    """
    from scipy import sparse

    assert cells.replicate_fixed is not None and cells.record is not None
    size, n = cells.count.size, cells.replicate_fixed.shape[1]
    # (records, R), C order: a sparse matrix times a dense one runs row by row of it.
    fixed = np.ascontiguousarray(cells.replicate_fixed.T, dtype=np.float64)
    cell = np.repeat(np.arange(size, dtype=np.int64), cells.count)
    below = np.arange(cells.x.size, dtype=np.int64) < upto[cell]
    ones = np.ones(cell.size)
    member = sparse.csr_matrix((ones, (cell, cells.record)), shape=(size, n))
    at_or_below = sparse.csr_matrix(
        (ones[below], (cell[below], cells.record[below])), shape=(size, n)
    )
    whole = np.asarray(member @ fixed).T  # (R, cells)
    part = np.asarray(at_or_below @ fixed).T
    out = np.full(whole.shape, np.nan)
    np.divide(part, whole, out=out, where=live[None, :] & (whole > 0))
    return out
