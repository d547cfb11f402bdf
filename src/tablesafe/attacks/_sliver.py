"""The table-differencing (sliver) attack of Li & Krenzke (2016), seed 004 Section 3.

An intruder asks for the same table in a subgroup ``A`` and in ``B_i = A``
minus one record ``i``, and differences the two protected tables. Without
protection the difference, the *sliver table*, is 1 in the cell of record
``i`` and 0 elsewhere, revealing the record's categories. The harness runs
the attack for every record of ``A`` (or a sample of them) and reports, as
the paper does:

* unweighted tables: the percent of *correct zeros* (cells where the true
  sliver is 0 and the differenced protected counts are 0), *correct ones*
  (the record's cell shows exactly 1) and *correct sliver tables* (every
  inner cell right);
* weighted tables, with the paper's criteria: a cell counts as a zero when
  the absolute difference is below the 10th percentile of the weights in
  ``A``, as a one when it is within 10% of the record's weight; and the
  success rates of two guessing strategies of an intruder who knows the
  record's weight: (1) the cell with the largest positive difference,
  (2) the cell whose difference is closest to that weight.

The aggregates of ``B_i`` are those of ``A`` minus record ``i``'s
contributions (counts, key sums and weights are sums), so each pair costs
one protection, not one query. Record-level drop/add-up-to-q also chooses
records inside cells; for it the harness gives the table builder an
in-memory engine holding ``B_i``'s records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tablesafe._builder import Protection, TableBuilder
from tablesafe._errors import ParameterError, RequestError
from tablesafe._random import resolve_generator
from tablesafe._request import TableRequest
from tablesafe.catalog._catalog import Code
from tablesafe.catalog._dataset import Dataset
from tablesafe.cells._aggregates import KEY_MODULUS, CellAggregates
from tablesafe.cells._plan import TabulationPlan
from tablesafe.engines import MemoryEngine
from tablesafe.output._table import ProtectedTable

__all__ = ["SliverResult", "sliver_attack"]


@dataclass(frozen=True)
class SliverResult:
    """What the sliver attack achieved against one protection.

    Attributes:
        method: The protection's name.
        pairs: Number of differenced pairs (A, B_i).
        correct_zeros: Percent of true-zero inner cells shown as 0 (unweighted).
        correct_ones: Percent of pairs whose record cell shows exactly 1 (unweighted).
        correct_tables: Percent of pairs whose whole sliver table is right (unweighted).
        weighted_correct_zeros: As above with the weighted criterion (|diff| < p10 of weights).
        weighted_correct_ones: Record cell within 10% of the record's weight.
        weighted_correct_tables: Every cell right by the weighted criteria.
        strategy1: Percent of pairs where the largest positive weighted
            difference is the record's cell.
        strategy2: Percent where the difference closest to the record's weight is its cell.
    """

    method: str
    pairs: int
    correct_zeros: float
    correct_ones: float
    correct_tables: float
    weighted_correct_zeros: float | None
    weighted_correct_ones: float | None
    weighted_correct_tables: float | None
    strategy1: float | None
    strategy2: float | None

    def as_dict(self) -> dict[str, Any]:
        """The result as a plain dictionary."""
        return dict(self.__dict__)


def _without(
    agg: CellAggregates, cell: tuple[int, ...], key: int, w: float, reps: np.ndarray | None
) -> CellAggregates:
    """The aggregates of the universe without one record in inner cell ``cell``."""
    k = len(cell)
    n = agg.n.copy()
    keys = agg.cell_key.astype(np.int64)
    ws = None if agg.weight_sum is None else agg.weight_sum.copy()
    w2 = None if agg.weight_sq_sum is None else agg.weight_sq_sum.copy()
    rs = None if agg.replicate_sums is None else agg.replicate_sums.copy()
    totals = tuple(s - 1 for s in agg.shape)
    for mask in range(2**k):
        idx = tuple(totals[i] if mask >> i & 1 else cell[i] for i in range(k))
        n[idx] -= 1
        keys[idx] = (keys[idx] - key) % KEY_MODULUS
        if ws is not None:
            ws[idx] -= w
        if w2 is not None:
            w2[idx] -= w * w
        if rs is not None and reps is not None:
            where: tuple[Any, ...] = (slice(None), *idx)
            rs[where] -= reps
    return replace(
        agg,
        n=n,
        cell_key=keys.astype(np.uint32),
        weight_sum=ws,
        weight_sq_sum=w2,
        replicate_sums=rs,
    )


@dataclass
class _Universe:
    """Subgroup ``A`` as the harness holds it: its records, their cells, its protected table."""

    request: TableRequest
    plan: TabulationPlan
    aggregates: CellAggregates
    records: Any  # the records of A (a pandas DataFrame)
    cells: tuple[np.ndarray, ...]  # per dimension, each record's inner index
    shape: tuple[int, ...]
    table: ProtectedTable
    builder: TableBuilder  # on the memory engine holding the dataset
    weights: np.ndarray | None
    replicates: np.ndarray | None
    keys: np.ndarray


def _universe(
    dataset: Dataset,
    universe: Mapping[str, Sequence[Code]],
    dimensions: Sequence[str],
    protection: Protection,
) -> _Universe:
    """Tabulate and protect the table in ``A``, and read A's records (weights, keys, cells).

    Raises:
        RequestError: for an invalid table or a universe of fewer than two records.
    """
    catalog = dataset.catalog
    request = TableRequest(tuple(dimensions), universe=universe, statistic="both")
    if catalog.weight is None:
        request = replace(request, statistic="count")
    plan = request.bind(catalog)
    full = replace(plan, grouping_sets=replace(request, margins="all").grouping_sets())
    memory = MemoryEngine()
    agg_a = memory.tabulate(dataset, full)
    records, flat, shape = memory._cells(dataset, full)
    if len(records) < 2:
        raise RequestError("the universe of the attack must hold at least two records")
    base = TableBuilder(dataset, protection, engine=memory)
    table_a = base.protect(request, plan, agg_a)
    weights = records[catalog.weight].to_numpy(dtype=float) if catalog.weight else None
    reps = (
        records[list(catalog.replicates.columns)].to_numpy(dtype=float)
        if catalog.replicates and plan.replicates
        else None
    )
    return _Universe(
        request=request,
        plan=plan,
        aggregates=agg_a,
        records=records,
        cells=np.unravel_index(flat, shape),
        shape=shape,
        table=table_a,
        builder=base,
        weights=weights,
        replicates=reps,
        keys=records[catalog.record_key].to_numpy().astype(np.int64),
    )


def _table_without(
    dataset: Dataset, protection: Protection, a: _Universe, i: int
) -> tuple[ProtectedTable, tuple[int, ...], float]:
    """The protected table of ``B_i``: ``A`` without record ``i``.

    Returns:
        The table, record ``i``'s inner cell and its weight (0 unweighted).
    """
    cell = tuple(int(c[i]) for c in a.cells)
    w_i = float(a.weights[i]) if a.weights is not None else 0.0
    reps = None if a.replicates is None else a.replicates[i]
    agg_b = _without(a.aggregates, cell, int(a.keys[i]), w_i, reps)
    if protection.record_level:
        # Record-level methods choose records inside cells: B_i's own records.
        frame_b = a.records.drop(index=a.records.index[int(i)])
        engine_b = MemoryEngine(frames={str(dataset.path): frame_b})
        builder = TableBuilder(dataset, protection, engine=engine_b)
        return builder.protect(a.request, a.plan, agg_b), cell, w_i
    return a.builder.protect(a.request, a.plan, agg_b), cell, w_i


@dataclass
class _Tally:
    """The paper's success counts, summed over the pairs."""

    zeros: int = 0
    zeros_right: int = 0
    ones_right: int = 0
    tables_right: int = 0
    wz: int = 0
    wz_right: int = 0
    wo_right: int = 0
    wt_right: int = 0
    s1: int = 0
    s2: int = 0

    def count(
        self, a: _Universe, table_b: ProtectedTable, cell: tuple[int, ...], w_i: float, p10: float
    ) -> None:
        """Add one pair: the sliver table ``A - B_i`` against the truth (1 in ``cell``)."""
        table_a, shape = a.table, a.shape
        inner = tuple(slice(0, s) for s in shape)
        truth = np.zeros(shape)
        truth[cell] = 1.0
        assert table_a.counts is not None and table_b.counts is not None
        diff = (table_a.counts - table_b.counts)[inner]
        is_zero = truth == 0
        self.zeros += int(is_zero.sum())
        self.zeros_right += int((diff[is_zero] == 0).sum())
        self.ones_right += int(diff[cell] == 1)
        self.tables_right += int(np.array_equal(diff, truth))
        if a.weights is None or table_a.weighted is None or table_b.weighted is None:
            return
        wdiff = (table_a.weighted - table_b.weighted)[inner]
        ok_zero = np.abs(wdiff) < p10
        ok_one = abs(wdiff[cell] - w_i) < 0.1 * w_i
        self.wz += int(is_zero.sum())
        self.wz_right += int(ok_zero[is_zero].sum())
        self.wo_right += int(ok_one)
        self.wt_right += int(ok_one and bool(ok_zero[is_zero].all()))
        self.s1 += int(np.unravel_index(int(np.argmax(wdiff)), shape) == cell)
        self.s2 += int(np.unravel_index(int(np.argmin(np.abs(wdiff - w_i))), shape) == cell)

    def result(self, method: str, pairs: int, weighted: bool) -> SliverResult:
        """The percentages of the report."""

        def pct(a: int, b: int) -> float:
            return round(100.0 * a / b, 2) if b else 0.0

        return SliverResult(
            method=method,
            pairs=pairs,
            correct_zeros=pct(self.zeros_right, self.zeros),
            correct_ones=pct(self.ones_right, pairs),
            correct_tables=pct(self.tables_right, pairs),
            weighted_correct_zeros=pct(self.wz_right, self.wz) if weighted else None,
            weighted_correct_ones=pct(self.wo_right, pairs) if weighted else None,
            weighted_correct_tables=pct(self.wt_right, pairs) if weighted else None,
            strategy1=pct(self.s1, pairs) if weighted else None,
            strategy2=pct(self.s2, pairs) if weighted else None,
        )


def sliver_attack(
    dataset: Dataset,
    universe: Mapping[str, Sequence[Code]],
    dimensions: Sequence[str],
    protection: Protection,
    *,
    limit: int | None = None,
    rng: np.random.Generator | int | None = 0,
    progress: Callable[[int, int], None] | None = None,
    name: str | None = None,
) -> SliverResult:
    """Run the sliver attack against ``protection`` on table ``dimensions`` in ``universe``.

    Args:
        dataset: The dataset (the data owner's: the harness reads records).
        universe: Subgroup ``A``.
        dimensions: The table's variables, e.g. ``("AGEGRP", "SEX")``.
        protection: The protection to attack (``Protection(None)`` for none).
        limit: Attack only this many records of ``A`` (a random sample).
        rng: Generator (or seed) for that sample.
        progress: Called with (done, total) after each pair.
        name: A name for the report (default: the mechanism's).

    Raises:
        RequestError: for an invalid table or an empty universe.
    """
    a = _universe(dataset, universe, dimensions, protection)
    p10 = float(np.percentile(a.weights, 10)) if a.weights is not None else 0.0
    order = np.arange(len(a.records))
    if limit is not None:
        if limit < 1:
            raise ParameterError("limit must be at least 1")
        order = resolve_generator(rng).permutation(len(a.records))[:limit]
    tally = _Tally()
    for step, i in enumerate(order):
        table_b, cell, w_i = _table_without(dataset, protection, a, int(i))
        tally.count(a, table_b, cell, w_i, p10)
        if progress is not None:
            progress(step + 1, len(order))
    method = name or str(protection.describe().get("name"))
    return tally.result(method, len(order), a.weights is not None)
