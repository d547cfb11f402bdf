"""The table builder: the path of one table, every stage downward (DESIGN, "The path of one table").

:class:`~tablesafe.Protection` is the data owner's choice of protection
(never the user's). :class:`TableBuilder` applies it to every request:

1. The request is checked against the site's limits and bound to the catalog
   once, into the plan of the table and the plan the engine runs (every
   grouping set: dynamic seeds need the key sums of the margins a cell
   belongs to, and weighted figures of empty cells the mean weights of their
   margins), before any microdata is read.
2. The engine tabulates the exact aggregates of every cell and margin, once.
3. The counts are protected (:mod:`tablesafe.statistics._counts`), then each
   statistic of the registry (:mod:`tablesafe.statistics`) is protected from
   them and publishes its columns, over the table's own figures and each base.
4. The rules apply (limits, small cells, precision, the universe size) and
   the :class:`~tablesafe.ProtectedTable` is returned.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tablesafe._protection import CellwiseMechanism, Protection
from tablesafe._request import MAX_DIMENSIONS, Margins, Statistic, TableRequest, TabulationPlan
from tablesafe.catalog._custom import check_grouping_limits
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._definitions import DefinitionSpace
from tablesafe.catalog._units import Unit
from tablesafe.cells._aggregates import CellAggregates, computed_cells
from tablesafe.cells._zeros import structural_zero_mask
from tablesafe.mechanisms._magnitudes import MagnitudeMethod, MagnitudeProtection
from tablesafe.output._footnotes import SE_UNWEIGHTED
from tablesafe.output._table import ProtectedTable
from tablesafe.output._tabulation import Tabulation, refuse_item_nonresponse
from tablesafe.output._withheld import withhold
from tablesafe.statistics import STATISTICS, PublishedStatistic, Source, TableWork
from tablesafe.statistics._bases import figure_groups, item_nonresponse, without_bases
from tablesafe.statistics._counts import protect_counts

if TYPE_CHECKING:
    # The rules are a pydantic model: a table without a site's rules imports no pydantic.
    from tablesafe._settings import RuleSettings
    from tablesafe.engines._base import Engine

__all__ = [
    "Built",
    "CellwiseMechanism",
    "Prepared",
    "Protection",
    "TableBuilder",
    "structural_zero_mask",
]


@dataclass(frozen=True)
class Prepared:
    """A request checked and bound, its grouping sets tabulated: before any protection.

    Attributes:
        request: The checked request.
        work: The request the table is built for (with replicates where the
            precision rule needs standard errors not asked for).
        plan: Its plan.
        full: The plan the engine ran (every grouping set).
        aggregates: The exact aggregates of every grouping set (the owner's).
        whole: The plan with every grouping set and every magnitude asked for
            (the bases of variables with item non-response tabulate from it).
        computed: The table's cells.
        structural_zero: Its structural zeros (of every cell, computed or not).
    """

    request: TableRequest
    work: TableRequest
    plan: TabulationPlan
    full: TabulationPlan
    aggregates: CellAggregates
    whole: TabulationPlan
    computed: npt.NDArray[np.bool_]
    structural_zero: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Built:
    """One table's path, run: the checked request, its plan, the exact aggregates, the table.

    The aggregates are the data owner's (the server's guard reads them); only
    the table is published.
    """

    request: TableRequest
    plan: TabulationPlan
    aggregates: CellAggregates
    table: ProtectedTable


class TableBuilder:
    """Build protected tables from one dataset.

    Args:
        dataset: The dataset.
        protection: The data owner's protection profile.
        engine: An engine (a new DuckDB engine by default).
        max_dimensions: The largest number of dimensions allowed.
        magnitudes: The protection of sums and means of continuous variables
            (:class:`~tablesafe.mechanisms._magnitudes.MagnitudeProtection`); by default
            the cell-key method for magnitudes, or exact sums when
            ``protection`` has no mechanism.
        rules: A site's disclosure rules (:class:`~tablesafe._settings.RuleSettings`):
            the request limits, the universe-size rule and the small-cell rule
            then apply on the path, as the server applies them (the sliver guard,
            which depends on what was published, is the server's).
        statistics: The statistics tables may publish, in the order they are
            built (:data:`tablesafe.statistics.STATISTICS`, the registry).
    """

    def __init__(
        self,
        dataset: Dataset,
        protection: Protection,
        *,
        engine: Engine | None = None,
        max_dimensions: int = MAX_DIMENSIONS,
        magnitudes: MagnitudeProtection | None = None,
        rules: RuleSettings | None = None,
        statistics: tuple[PublishedStatistic, ...] = STATISTICS,
    ) -> None:
        if engine is None:
            from tablesafe.engines import DuckDBEngine  # DuckDB loads only where it is used

            engine = DuckDBEngine()
        if magnitudes is None:
            exact = protection.mechanism is None
            magnitudes = MagnitudeProtection(
                method=MagnitudeMethod.NONE if exact else MagnitudeMethod.CKM
            )
        self.dataset = dataset
        self.protection = protection
        self.engine = engine
        self.rules = rules
        self.max_dimensions = min(max_dimensions, rules.max_dimensions) if rules else max_dimensions
        self.magnitude_protection = magnitudes
        self.statistics = statistics
        self.source = Source(dataset, engine, protection, magnitudes, rules)

    # -- the data owner's views --------------------------------------------------

    def tabulate(self, request: TableRequest) -> Tabulation:
        """The unprotected tabulation (true values, for the data owner only)."""
        plan = request.bind(self.dataset.catalog, max_dimensions=self.max_dimensions)
        refuse_item_nonresponse(self.dataset, plan)
        return Tabulation(request, self.engine.tabulate(self.dataset, plan), self.dataset.name)

    def overall_mean_weights(self, unit: Unit | None = None) -> tuple[float, np.ndarray | None]:
        """The dataset's overall mean weight (and per replicate); public constants.

        Args:
            unit: Of the units of a table of another unit than the records'
                (households: the mean household weight), ``None`` for the records'.
        """
        return self.source.overall_mean_weights(unit)

    # -- the path of one table ---------------------------------------------------------

    def build(self, request: TableRequest) -> ProtectedTable:
        """Build the protected table answering ``request`` (:meth:`run`'s table)."""
        return self.run(request).table

    def check(self, request: TableRequest) -> TableRequest:
        """``request`` checked against the catalog and the rules, codes in the catalog's types.

        Runs before any microdata is read.

        Raises:
            RequestError, RefusedError: for a request the catalog or rules do not allow.
        """
        catalog = self.dataset.catalog
        if self.rules is not None:
            from tablesafe.rules._rules import check_request_limits

            check_grouping_limits(
                request.groupings,
                max_groups=self.rules.max_custom_groups,
                max_categories=self.rules.max_categories_per_group,
            )
            check_request_limits(request, catalog, self.rules)
        return request.coerced(catalog)

    def run(
        self, request: TableRequest, *, checked: bool = False, universe_rule: bool = True
    ) -> Built:
        """The path of one table, every stage downward (DESIGN, "The path of one table").

        Check the request (unless ``checked``: :meth:`check` gave it), bind it
        into a plan, tabulate every grouping set (:meth:`prepare`), then
        protect and apply the rules where the builder has them (:meth:`finish`).

        Args:
            request: The table asked for.
            checked: Whether :meth:`check` already gave ``request``.
            universe_rule: Whether to apply the universe-size rule here.

        Raises:
            RequestError, RefusedError, ComputationError: with a message for the user.
        """
        return self.finish(self.prepare(request, checked=checked), universe_rule=universe_rule)

    def prepare(self, request: TableRequest, *, checked: bool = False) -> Prepared:
        """Check and bind ``request``, and tabulate every grouping set of its plan.

        Raises:
            RequestError, RefusedError, ComputationError: with a message for the user.
        """
        if not checked:
            request = self.check(request)
        # The precision rule decides on standard errors, asked for or not.
        work = replace(request, replicates=True) if self._precision_needs_se(request) else request
        plan, full, whole = self._plans(work)
        agg = self.engine.tabulate(self.dataset, full)
        computed = computed_cells(agg.shape, plan.grouping_sets)
        zeros = structural_zero_mask(self.dataset.catalog, plan)
        return Prepared(request, work, plan, full, agg, whole, computed, zeros)

    def cells(self, prepared: Prepared) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """A prepared table's cells (computed), and its structural zeros among them."""
        return prepared.computed, prepared.computed & prepared.structural_zero

    def finish(
        self,
        prepared: Prepared,
        withheld: npt.NDArray[np.bool_] | None = None,
        *,
        universe_rule: bool = True,
    ) -> Built:
        """Protect a prepared table, withholding ``withheld``, then apply the builder's rules.

        The universe-size rule (on the table's protected total), the small-cell
        rule on the protected counts and the precision rule, where the builder
        has rules.
        """
        request, plan, agg = prepared.request, prepared.plan, prepared.aggregates
        cells = (prepared.computed, prepared.structural_zero)
        table = self._protect(prepared.work, plan, agg, prepared.whole, withheld, cells)
        rules = self.rules
        if rules is not None:
            from tablesafe.rules._precision import apply_precision_rule
            from tablesafe.rules._rules import (
                apply_small_cell_rule,
                check_universe_size,
                table_universe_size,
            )

            if universe_rule:
                # On the table's own protected total: no figure beyond the table's.
                check_universe_size(table_universe_size(table), rules)
            table = apply_small_cell_rule(table, rules, self.statistics)
            table = apply_precision_rule(table, rules, publish_se=request.replicates)
            table = replace(table, request=request)
        return Built(request, plan, agg, table)

    def _precision_needs_se(self, request: TableRequest) -> bool:
        """Whether the site's precision rule needs standard errors the request did not ask for."""
        cat = self.dataset.catalog
        return (
            self.rules is not None
            and self.rules.max_rse is not None
            and not request.replicates
            and cat.replicates is not None
            and request.statistic != Statistic.COUNT
        )

    def plans(
        self, request: TableRequest, *, max_dimensions: int | None = None
    ) -> tuple[TabulationPlan, TabulationPlan]:
        """The plan of a coerced ``request``, and the plan the engine runs for it.

        The engine computes every grouping set (dynamic seeds hash the margins
        a cell belongs to) and what each statistic adds (:meth:`~tablesafe.statistics.
        PublishedStatistic.full_plan`): only as many largest contributions of
        each magnitude as the protection and rules use; magnitudes with item
        non-response are left out (each base tabulates its own).
        """
        plan, full, _ = self._plans(request, max_dimensions=max_dimensions)
        return plan, full

    def _plans(
        self, request: TableRequest, *, max_dimensions: int | None = None
    ) -> tuple[TabulationPlan, TabulationPlan, TabulationPlan]:
        """:meth:`plans`, and the whole plan (every magnitude kept): the request bound once."""
        plan = request.bind(
            self.dataset.catalog, max_dimensions=max_dimensions or self.max_dimensions
        )
        every_set = replace(request, margins=Margins.ALL).grouping_sets()
        whole = replace(plan, grouping_sets=every_set)
        for statistic in self.statistics:
            whole = statistic.full_plan(self.source, whole)
        return plan, without_bases(self.source, whole), whole

    def protect(
        self,
        request: TableRequest,
        plan: TabulationPlan,
        agg: CellAggregates,
        withheld: npt.NDArray[np.bool_] | None = None,
    ) -> ProtectedTable:
        """Protect aggregates computed for every grouping set of ``plan``'s dimensions.

        Args:
            request: The request.
            plan: Its plan.
            agg: The aggregates of every grouping set.
            withheld: Cells the account of published figures withholds
                (:func:`tablesafe.rules._account.withheld_cells`): in an
                additive table the margins add up the inner cells published.
        """
        computed = computed_cells(agg.shape, plan.grouping_sets)
        zeros = structural_zero_mask(self.dataset.catalog, plan)
        whole = self._plans(request)[2]
        return self._protect(request, plan, agg, whole, withheld, (computed, zeros))

    def _protect(
        self,
        request: TableRequest,
        plan: TabulationPlan,
        agg: CellAggregates,
        whole: TabulationPlan,
        withheld: npt.NDArray[np.bool_] | None,
        cells: tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]],
    ) -> ProtectedTable:
        """:meth:`protect`: the counts, then every statistic of the registry, over each group."""
        computed, zeros = cells
        work = TableWork(
            self.source,
            request,
            plan,
            whole,
            agg,
            computed,
            zeros,
            withheld,
            [],
            self._metadata(request, plan),
        )
        work.missing = item_nonresponse(work)
        main, perturbed, adjusted = protect_counts(work, plan, agg, work.meta, withheld)
        work.columns.perturbed, work.columns.adjusted = perturbed, adjusted
        for figures in figure_groups(work, main):
            for statistic in self.statistics:
                statistic.publish(work, figures)
        table = work.table(protected=self.protects(request))
        if withheld is not None and withheld.any():
            table = withhold(table, withheld & computed, additive=self.source.additive)
        return table

    def protects(self, request: TableRequest) -> bool:
        """Whether every figure the table of ``request`` publishes is protected.

        From the protection objects: the counts' mechanism, and the magnitudes'
        protection where the request asks for sums, means or quantiles (a table
        with exact sums beside protected counts is not protected).
        """
        figures = bool(request.magnitudes or request.quantiles)
        return self.protection.protects and (not figures or self.magnitude_protection.protects)

    def _metadata(self, request: TableRequest, plan: TabulationPlan) -> dict[str, Any]:
        """The table's metadata as the dataset, its unit and the protection open it."""
        meta: dict[str, Any] = {
            "dataset": self.dataset.name,
            "additivity": str(self.protection.additivity),
        }
        catalog = self.dataset.catalog
        for key in ("citation", "reference_date", "updated"):
            if getattr(catalog, key):
                meta[key] = getattr(catalog, key)
        if plan.unit is not None:
            meta["unit"] = str(self.source.unit_of(plan))
        if request.replicates and request.statistic == Statistic.COUNT:
            # Asked for, none given: the table says why rather than leave them out silently.
            meta["se_unavailable"] = SE_UNWEIGHTED
        return meta

    def definitions(self, plan: TabulationPlan, mask: npt.NDArray[np.bool_]) -> list[bytes]:
        """The canonical definitions of the cells of ``mask`` (:meth:`Source.definitions`)."""
        return self.source.definitions(plan, mask)

    @property
    def definition_space(self) -> DefinitionSpace:
        """The catalog's columns, codes and declared zeros (canonical definitions)."""
        return self.source.definition_space
