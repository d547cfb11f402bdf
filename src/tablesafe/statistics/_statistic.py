"""What a published statistic is to the builder, and what it reads and fills.

A :class:`Statistic` is one kind of figure a table publishes (counts,
weighted counts, percentages, sums and means, quantiles, the bases of
variables with item non-response). It declares

* what it adds to the plan the engine runs (:meth:`Statistic.full_plan`);
* how it is protected, from the protected counts, with its standard errors
  and intervals, and the columns it publishes (:meth:`Statistic.publish`,
  into a :class:`TableWork`'s :class:`Columns`);
* how the small-cell rule treats its columns (:meth:`Statistic.small_cells`;
  the precision rule marks every estimate published with a standard error,
  a column ``X`` beside ``X_se``).

The builder runs them as a loop (:mod:`tablesafe.statistics`' registry, in
its order) over each group of protected figures an estimate may rest on:
the table's own, then each base (:class:`Figures`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from tablesafe._request import Item, Statistic, TableRequest
from tablesafe._rounding import Rounding
from tablesafe.cells._aggregates import CellAggregates, all_grouping_sets
from tablesafe.cells._plan import TabulationPlan
from tablesafe.mechanisms._additivity import aggregate_margins
from tablesafe.output._table import ProtectedTable
from tablesafe.statistics._source import Source

__all__ = [
    "Columns",
    "Figures",
    "PublishedStatistic",
    "TableWork",
    "round_figures",
    "roundings",
]

Array = np.ndarray
Mask = npt.NDArray[np.bool_]


def roundings(site: Rounding, request: TableRequest) -> tuple[Rounding, ...]:
    """The site's rounding, then the request's where it asks for another (never finer)."""
    extra = request.rounding
    if extra is None or Rounding.parse(extra) == site:
        return (site,)
    return (site, Rounding.parse(extra))


def round_figures(
    values: Array, steps: Sequence[Rounding], computed: Mask, *, additive: bool
) -> Array:
    """Round as the site says, then as the request asks (on top: never finer).

    In an additive table rounded to a base, margins are the sums of the
    rounded inner cells, so the published table still adds up.

    Args:
        values: Protected weighted figures (or sums), unrounded.
        steps: The roundings, in order (:func:`roundings`).
        computed: The table's cells (the rest is NaN, or 0 in an additive table).
        additive: Whether the table adds up.
    """
    out = values
    for r in steps:
        out = r.apply(out)
    if additive and all(r.base is not None for r in steps):
        out = aggregate_margins(out, all_grouping_sets(values.ndim))
    return np.where(computed, out, np.nan if not additive else 0.0)


@dataclass
class Figures:
    """The protected figures a group of estimates rests on: the table's, or a base's.

    Attributes:
        variable: ``None`` for the table's own figures; for a base, the
            magnitude whose records with a value it counts.
        plan: The plan (its universe; for a base, only records with a value).
        agg: The exact aggregates of that plan (every grouping set).
        counts: The protected counts.
        weighted: The published (rounded) weighted figures, or ``None``.
        raw: The unrounded protected weighted figures, or ``None``.
        reps: Their replicate figures, or ``None``.
        noise: The protection's variance of the weighted figures, or ``None``.
    """

    variable: str | None
    plan: TabulationPlan
    agg: CellAggregates
    counts: Array
    weighted: Array | None = None
    raw: Array | None = None
    reps: Array | None = None
    noise: Array | None = None

    def rests(self, item: Item, missing: list[str]) -> bool:
        """Whether ``item`` rests on these figures (variables without a base: the table's)."""
        if self.variable is not None:
            return item.variable == self.variable
        return item.variable not in missing


@dataclass
class Columns:
    """What a table publishes, filled statistic by statistic (:class:`ProtectedTable`'s fields)."""

    counts: Array | None = None
    perturbed: Mask | None = None
    adjusted: Mask | None = None
    weighted: Array | None = None
    replicate_weighted: Array | None = None
    se: Array | None = None
    ci_low: Array | None = None
    ci_high: Array | None = None
    percentages: dict[str, Array] | None = None
    magnitudes: dict[str, Array] | None = None
    sensitive: dict[str, Mask] | None = None
    #: By magnitude or quantile column, the protected counts it rests on.
    rests_on: dict[str, Array] = field(default_factory=dict)
    suppressed_bases: dict[str, Mask] | None = None


@dataclass
class TableWork:
    """One table being protected: what every statistic reads, and the columns it fills.

    Attributes:
        source: The dataset, its engine and protection.
        request: The request the table is built for.
        plan: Its plan.
        whole: The plan with every grouping set and every magnitude asked for
            (a base tabulates its variable's records with a value from it).
        agg: The exact aggregates of every grouping set.
        computed: The cells of the table.
        structural_zero: Its structural zeros.
        withheld: Inner cells the account withholds (margins add up the rest), or ``None``.
        missing: The variables asked for with item non-response (each has a base), in order.
        meta: The table's metadata, as the statistics add to it.
        columns: What the table publishes.
    """

    source: Source
    request: TableRequest
    plan: TabulationPlan
    whole: TabulationPlan
    agg: CellAggregates
    computed: Mask
    structural_zero: Mask
    withheld: Mask | None
    missing: list[str]
    meta: dict[str, Any]
    columns: Columns = field(default_factory=Columns)

    def __post_init__(self) -> None:
        if self.request.magnitudes or self.request.quantiles:
            self.columns.magnitudes, self.columns.sensitive = {}, {}

    def add_columns(self, figures: Figures, columns: Mapping[str, Array]) -> None:
        """Publish ``columns`` of continuous variables, resting on ``figures``' protected counts."""
        assert self.columns.magnitudes is not None
        self.columns.magnitudes.update(columns)
        self.columns.rests_on.update({c: figures.counts for c in columns})

    @property
    def is_inner(self) -> Mask:
        """The inner cells."""
        return self.agg.is_inner()

    @property
    def weighted(self) -> bool:
        """Whether the table has weighted figures (asked for, and the data has weights)."""
        return self.request.statistic != Statistic.COUNT and self.agg.weight_sum is not None

    @property
    def roundings(self) -> tuple[Rounding, ...]:
        """The site's rounding, then the request's where it asks for another (:func:`roundings`)."""
        return roundings(self.source.protection.round, self.request)

    def round(self, values: Array, *, additive: bool) -> Array:
        """``values`` rounded as the table's :attr:`roundings` say (:func:`round_figures`)."""
        return round_figures(values, self.roundings, self.computed, additive=additive)

    def table(self, *, protected: bool) -> ProtectedTable:
        """The protected table of the columns filled (before the rules and withheld cells)."""
        c = self.columns
        assert c.counts is not None and c.perturbed is not None and c.adjusted is not None
        request, computed = self.request, self.computed
        rests_on = {name: np.where(computed, v, 0) for name, v in c.rests_on.items()}
        return ProtectedTable(
            request=request,
            dimensions=self.plan.dimensions,
            computed=computed,
            counts=None
            if request.statistic == Statistic.WEIGHTED
            else np.where(computed, c.counts, 0),
            weighted=c.weighted,
            perturbed=c.perturbed,
            adjusted=c.adjusted,
            structural_zero=self.structural_zero & computed,
            mechanism=self.source.protection.describe(),
            metadata=self.meta,
            replicate_weighted=c.replicate_weighted,
            se=c.se,
            ci_low=c.ci_low,
            ci_high=c.ci_high,
            roundings=self.roundings,
            percentages=c.percentages,
            magnitudes=c.magnitudes,
            sensitive=c.sensitive,
            base_counts=np.where(computed, c.counts, 0),
            estimate_counts=rests_on or None,
            suppressed_bases=c.suppressed_bases,
            catalog=self.source.dataset.catalog,
            protected=protected,
        )


class PublishedStatistic(ABC):
    """One kind of published figure: what it adds to the plan, how it is protected, its columns.

    Subclasses set :attr:`name` and, where the request names them as items
    (``sum:VAR``), :attr:`kinds`; the registry (:mod:`tablesafe.statistics`)
    lists one instance of each, in the order the builder runs them.
    """

    #: The statistic's name (the registry's key).
    name: ClassVar[str]
    #: The item kinds of the request it publishes, with their number of variables.
    kinds: ClassVar[Mapping[str, int]] = {}

    def full_plan(self, source: Source, plan: TabulationPlan) -> TabulationPlan:
        """What the statistic adds to the plan the engine runs (default: nothing)."""
        return plan

    @abstractmethod
    def publish(self, work: TableWork, figures: Figures) -> None:
        """Protect and publish the statistic's figures that rest on ``figures`` into ``work``."""

    def small_cells(self, table: ProtectedTable, small: Mask) -> dict[str, Any]:
        """How the small-cell rule treats its columns: the table's fields it changes.

        Args:
            table: The table the rule applies to.
            small: The cells whose protected count the rule hides.
        """
        return {}
