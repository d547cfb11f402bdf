"""Averaging attacks: many equivalent tables of the same records (issue 25, DESIGN decision 2).

A determined user does not ask one table. They ask the same small cells
again and again, in forms that hold the same records: a universe widened by
categories of the classifying variable that the target cells do not use,
the dimensions in another order, an extra one-category custom grouping,
other margins. If the noise of a cell depended on anything but its record
set (Li & Krenzke's dynamic seeds hash the margins' and the universe's key
sums), each form gives a fresh draw, and the maximum-likelihood count over
the published values converges to the truth. Under record-set consistency
every form gives the same value, and the estimate after 250 tables is the
estimate after one.

:func:`averaging_attack` runs that attack against one protection, through a
``build`` function (a :class:`~tablesafe.TableBuilder`, or a site's rules and
guard), and reports per target cell the distinct values published and
whether the maximum-likelihood count is exact after one table and after all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tablesafe._errors import ParameterError, RefusedError
from tablesafe._request import Item, Margins, TableRequest
from tablesafe.catalog._catalog import Code
from tablesafe.catalog._custom import CustomGroup, CustomGrouping
from tablesafe.output._table import ProtectedTable

__all__ = ["AveragingCell", "AveragingResult", "averaging_attack", "likelihoods"]

#: The largest true count the intruder's estimate considers.
MAX_COUNT = 60


@dataclass(frozen=True)
class AveragingCell:
    """What the intruder learnt about one target cell.

    Attributes:
        cell: The cell's categories (dimension name -> code).
        true: Its true count (the data owner's view; 0 in a published report).
        distinct: How many distinct counts were published for it.
        estimate_first: Maximum-likelihood count from the first table.
        estimate_all: Maximum-likelihood count from every table (published
            values taken as independent draws, as the intruder hopes).
        sum_distinct: Distinct published sums of the magnitude (if asked).
        sum_error_first: |first published sum - true sum| (if asked).
        sum_error_mean: |mean of the published sums - true sum| (if asked).
    """

    cell: Mapping[str, Code]
    true: int
    distinct: int
    estimate_first: int
    estimate_all: int
    sum_distinct: int = 0
    sum_error_first: float = 0.0
    sum_error_mean: float = 0.0


@dataclass(frozen=True)
class AveragingResult:
    """The averaging attack against one protection.

    Attributes:
        method: The protection's name and seeds.
        tables: Tables asked.
        refused: Tables refused (by the site's rules, when run through them).
        cells: One entry per target cell.
    """

    method: str
    tables: int
    refused: int
    cells: tuple[AveragingCell, ...]

    @property
    def exact_first(self) -> int:
        """Target cells whose estimate from the first table is exact."""
        return sum(c.estimate_first == c.true for c in self.cells)

    @property
    def exact_all(self) -> int:
        """Target cells whose estimate from every table is exact."""
        return sum(c.estimate_all == c.true for c in self.cells)

    @property
    def max_distinct(self) -> int:
        """The most distinct values any target cell took."""
        return max((c.distinct for c in self.cells), default=0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "method": self.method,
            "tables": self.tables,
            "refused": self.refused,
            "target_cells": len(self.cells),
            "exact_after_one_table": self.exact_first,
            "exact_after_all_tables": self.exact_all,
            "most_distinct_values": self.max_distinct,
            "cells": [
                {
                    "cell": dict(c.cell),
                    "true": c.true,
                    "distinct": c.distinct,
                    "estimate_first": c.estimate_first,
                    "estimate_all": c.estimate_all,
                    **(
                        {
                            "sum_distinct": c.sum_distinct,
                            "sum_error_first": c.sum_error_first,
                            "sum_error_mean": c.sum_error_mean,
                        }
                        if c.sum_distinct
                        else {}
                    ),
                }
                for c in self.cells
            ],
        }


def likelihoods(mechanism: Any, published: int) -> np.ndarray:
    """``P(published | true n)`` for ``n = 0 .. MAX_COUNT`` under a count mechanism.

    Cell-wise mechanisms give their ptable rows (``distribution``);
    record-level drop/add-up-to-q publishes ``n + d`` with ``d`` uniform on
    ``-q(n) .. q(n)``.

    Raises:
        ParameterError: for a mechanism with neither.
    """
    out = np.zeros(MAX_COUNT + 1)
    dist = getattr(mechanism, "distribution", None)
    q = getattr(mechanism, "q", None)
    for n in range(MAX_COUNT + 1):
        if mechanism is None:
            out[n] = float(n == published)
        elif dist is not None:
            out[n] = dist(n).get(published, 0.0)
        elif q is not None:
            qn = int(q(np.array([n]))[0])
            out[n] = 1.0 / (2 * qn + 1) if abs(published - n) <= qn else 0.0
        else:
            raise ParameterError(f"no likelihood for mechanism {mechanism!r}")
    return out


def _estimate(loglik: np.ndarray) -> int:
    # Ties go to the smallest count (argmax takes the first).
    return int(np.argmax(loglik))


def _requests(
    variable: str,
    targets: Sequence[Code],
    pad: Sequence[Code],
    universe: Mapping[str, Sequence[Code]],
    second: str,
    grouping_of: str | None,
    grouping_codes: Sequence[Code],
    magnitude: str | None,
    tables: int,
    rng: np.random.Generator,
) -> list[TableRequest]:
    """Equivalent forms of the target cells: widened universes, orders, groupings, margins."""
    out = []
    for t in range(tables):
        k = int(rng.integers(2, 7)) if t else 0
        extra = [pad[i] for i in sorted(rng.choice(len(pad), size=min(k, len(pad)), replace=False))]
        u = {**{k_: list(v) for k_, v in universe.items()}, variable: [*targets, *extra]}
        dims: list[str] = [variable, second] if t % 2 == 0 else [second, variable]
        groupings: tuple[CustomGrouping, ...] = ()
        if grouping_of is not None and t % 3 == 1:
            # One group holding every category: the same records, another table.
            groupings = (
                CustomGrouping(
                    "ALLOF", grouping_of, (CustomGroup("all", "all", tuple(grouping_codes)),)
                ),
            )
            dims.insert(int(rng.integers(0, len(dims) + 1)), "ALLOF")
        margins = tuple(Margins)[t % 3]  # all, none, total in turn
        out.append(
            TableRequest(
                tuple(dims),
                universe=u,
                margins=margins,
                groupings=groupings,
                magnitudes=(Item("sum", (magnitude,)),) if magnitude else (),
            )
        )
    return out


def _cells(table: ProtectedTable, keep: Sequence[str]) -> dict[tuple[Any, ...], tuple[int, float]]:
    """Inner cells of ``table`` by their categories of ``keep``: (count, sum or NaN)."""
    dims = table.dimensions
    pos = [next(i for i, d in enumerate(dims) if d.name == name) for name in keep]
    assert table.counts is not None
    sums = next(iter(table.magnitudes.values())) if table.magnitudes else None
    out = {}
    for idx in np.ndindex(*(len(d.codes) for d in dims)):
        if not table.computed[idx]:
            continue
        key = tuple(dims[p].codes[idx[p]] for p in pos)
        s = float(sums[idx]) if sums is not None else math.nan
        out[key] = (int(table.counts[idx]), s)
    return out


def averaging_attack(
    build: Callable[[TableRequest], ProtectedTable],
    truth: Callable[[TableRequest], ProtectedTable],
    mechanism: Any,
    *,
    method: str,
    variable: str,
    targets: Sequence[Code],
    pad: Sequence[Code],
    universe: Mapping[str, Sequence[Code]],
    second: str,
    grouping_of: str | None = None,
    grouping_codes: Sequence[Code] = (),
    magnitude: str | None = None,
    tables: int = 250,
    rng: np.random.Generator | None = None,
) -> AveragingResult:
    """Ask the target cells in ``tables`` equivalent forms and estimate their counts.

    Every table is ``variable x second`` (in either order, sometimes with a
    one-category grouping of ``grouping_of`` as a third dimension), inside
    ``universe`` with ``variable`` restricted to the target categories plus
    2 to 6 random categories of ``pad`` (the first table: the targets only),
    with margins all, none or total in turn. The target cells are the inner
    cells ``(target, category of second)``: the same records in every table.

    Args:
        build: Builds the published table (refusals raise RefusedError).
        truth: Builds the unprotected table of a request (the owner's view).
        mechanism: The count mechanism as applied (``Protection.effective_mechanism()``).
        method: Name for the report.
        variable: The classifying variable of the targets (e.g. ``AGE``).
        targets: The target categories of ``variable``.
        pad: Categories that may widen the universe.
        universe: The other universe conditions.
        second: The second dimension.
        grouping_of: A variable for one-category custom groupings (optional).
        grouping_codes: All of its codes.
        magnitude: A continuous variable whose sums are averaged too (optional).
        tables: How many tables to ask.
        rng: Draws the widening and the order (default: seed 0).
    """
    if tables < 1:
        raise ParameterError(f"tables must be >= 1, not {tables}")
    rng = rng if rng is not None else np.random.default_rng(0)
    requests = _requests(
        variable,
        targets,
        pad,
        universe,
        second,
        grouping_of,
        grouping_codes,
        magnitude,
        tables,
        rng,
    )
    keep = (variable, second)
    first_truth = _cells(truth(requests[0]), keep)
    wanted = {k for k in first_truth if k[0] in set(targets)}
    seen, refused = _published(build, requests, keep, wanted)
    cells = _estimates(mechanism, keep, sorted(wanted, key=str), seen, first_truth)
    return AveragingResult(method, tables, refused, tuple(cells))


def _published(
    build: Callable[[TableRequest], ProtectedTable],
    requests: Sequence[TableRequest],
    keep: tuple[str, str],
    wanted: set[tuple[Any, ...]],
) -> tuple[dict[tuple[Any, ...], list[tuple[int, float]]], int]:
    """Ask every request: the values published for each wanted cell, and the refusals.

    Returns:
        Per wanted cell, its (count, sum or NaN) in each table that was
        answered, in the order asked; and the number of tables refused.
    """
    seen: dict[tuple[Any, ...], list[tuple[int, float]]] = {k: [] for k in wanted}
    refused = 0
    for request in requests:
        try:
            table = build(request)
        except RefusedError:
            refused += 1
            continue
        for key, value in _cells(table, keep).items():
            if key in seen:
                seen[key].append(value)
    return seen, refused


def _estimates(
    mechanism: Any,
    keep: tuple[str, str],
    wanted: Sequence[tuple[Any, ...]],
    seen: Mapping[tuple[Any, ...], list[tuple[int, float]]],
    first_truth: Mapping[tuple[Any, ...], tuple[int, float]],
) -> list[AveragingCell]:
    """The intruder's estimates of each wanted cell published at least once, in order."""
    cells = []
    cache: dict[int, np.ndarray] = {}
    for key in wanted:
        values = seen[key]
        true_n, true_s = first_truth[key]
        if not values:
            continue
        logs = []
        for y, _ in values:
            if y not in cache:
                with np.errstate(divide="ignore"):
                    cache[y] = np.log(likelihoods(mechanism, y))
            logs.append(cache[y])
        sums = [s for _, s in values if not math.isnan(s)]
        cells.append(
            AveragingCell(
                cell=dict(zip(keep, key, strict=True)),
                true=true_n,
                distinct=len({y for y, _ in values}),
                estimate_first=_estimate(logs[0]),
                estimate_all=_estimate(np.sum(logs, axis=0)),
                sum_distinct=len(set(sums)),
                sum_error_first=abs(sums[0] - true_s) if sums else 0.0,
                sum_error_mean=abs(float(np.mean(sums)) - true_s) if sums else 0.0,
            )
        )
    return cells
