"""Bases: the records that hold a value of a variable with item non-response, counted.

A magnitude that declares ``missing`` codes in the catalog has its sums,
means and quantiles over the records that hold a value. Those records are
tabulated (their counts, cell keys, weights and sums) and protected as the
table's counts and weighted figures are, so a base is a count like any
other: its noise comes from its own record set. It is published as
``n_VAR`` where the table has counts and ``weighted_VAR`` where it is
weighted; the site's small-cell rule leaves a base of 1 to
``min_cell_size - 1`` records blank (and says so: ``suppressed_bases``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from tablesafe._request import Statistic
from tablesafe.catalog._magnitudes import base_column
from tablesafe.cells._plan import TabulationPlan
from tablesafe.statistics._counts import protect_counts
from tablesafe.statistics._source import Source
from tablesafe.statistics._statistic import Figures, PublishedStatistic, TableWork
from tablesafe.statistics._weighted import complete_weighted

__all__ = ["Bases", "figure_groups", "item_nonresponse", "without_bases"]


class Bases(PublishedStatistic):
    """``n_VAR`` and ``weighted_VAR``: the protected bases of variables with item non-response."""

    name = "bases"

    def publish(self, work: TableWork, figures: Figures) -> None:
        """A base's columns (the table's own figures have none)."""
        name = figures.variable
        if name is None:
            return
        counts, computed = figures.counts, work.computed
        rules = work.source.rules
        small = np.zeros(counts.shape, dtype=bool)
        if rules is not None and rules.min_cell_size > 1:
            small = (counts >= 1) & (counts < rules.min_cell_size)
        columns = {}
        if work.request.statistic != Statistic.WEIGHTED:
            shown = np.where(small, np.nan, counts.astype(np.float64))
            columns[base_column(name, weighted=False)] = np.where(computed, shown, np.nan)
        if figures.weighted is not None:
            shown = np.where(small, np.nan, figures.weighted)
            columns[base_column(name, weighted=True)] = np.where(computed, shown, np.nan)
        work.add_columns(figures, columns)
        if rules is not None and rules.min_cell_size > 1:
            hidden = work.columns.suppressed_bases or {}
            k = rules.min_cell_size
            hidden.update({c: computed & (counts >= 1) & (counts < k) for c in columns})
            work.columns.suppressed_bases = hidden or None


def without_bases(source: Source, plan: TabulationPlan) -> TabulationPlan:
    """``plan`` without the sums of variables with item non-response: each base tabulates its own.

    The engine's plan of a table; a base's (:func:`figure_groups`) keeps its variable's.
    """
    magnitudes = source.dataset.catalog.magnitudes
    missing = {m.name for m in magnitudes.values() if m.missing is not None}
    return replace(plan, magnitudes=tuple(m for m in plan.magnitudes if m.variable not in missing))


def item_nonresponse(work: TableWork) -> list[str]:
    """The request's variables with item non-response (``missing`` in the catalog), in order."""
    request, cat = work.request, work.source.dataset.catalog
    names = [cat.magnitude(i.variable).name for i in (*request.magnitudes, *request.quantiles)]
    return [n for n in dict.fromkeys(names) if cat.magnitudes[n].missing is not None]


def figure_groups(work: TableWork, main: Figures) -> Iterator[Figures]:
    """The protected figures estimates rest on: the table's own, then each base.

    A base is made when it is reached: its records are tabulated, and their
    counts and weighted figures protected as the table's are.
    """
    yield main
    source = work.source
    for name in work.missing:
        base_plan = source.present_plan(work.whole, name)
        agg = source.engine.tabulate(source.dataset, base_plan)
        scratch: dict[str, Any] = {}
        figures, _, _ = protect_counts(work, base_plan, agg, scratch)
        figures.variable = name
        figures.plan = replace(work.plan, present=base_plan.present)
        if figures.raw is not None:
            complete_weighted(work, figures, scratch)
        yield figures
