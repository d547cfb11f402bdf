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
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tablesafe._protection import CellwiseMechanism, Protection
from tablesafe._release import (
    Release,
    ReleaseStore,
    check_release_request,
    open_release,
    released_table,
)
from tablesafe._request import MAX_DIMENSIONS, Margins, Statistic, TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._definitions import DefinitionSpace
from tablesafe.catalog._units import Unit
from tablesafe.cells._aggregates import CellAggregates, computed_cells
from tablesafe.cells._plan import TabulationPlan
from tablesafe.cells._zeros import structural_zero_mask
from tablesafe.engines import engine_or_default
from tablesafe.mechanisms._magnitudes import MagnitudeMethod, MagnitudeProtection
from tablesafe.output._table import ProtectedTable
from tablesafe.output._tabulation import Tabulation, refuse_item_nonresponse
from tablesafe.output._withheld import withhold
from tablesafe.rules._admit import OWNER, Admission
from tablesafe.rules._ledger import TableFigures, release_figures
from tablesafe.statistics import STATISTICS, PublishedStatistic, Source, TableWork
from tablesafe.statistics._bases import figure_groups, item_nonresponse, without_bases
from tablesafe.statistics._counts import protect_counts

if TYPE_CHECKING:
    # The rules are a pydantic model: a table without a site's rules imports no pydantic.
    from tablesafe._settings import RuleSettings
    from tablesafe.engines._base import Engine

__all__ = [
    "Bound",
    "Built",
    "CellwiseMechanism",
    "Prepared",
    "Protection",
    "TableBuilder",
    "structural_zero_mask",
]


@dataclass(frozen=True)
class Bound:
    """A request checked against the site's limits and bound to the catalog, once.

    Nothing of the microdata is read yet.

    Attributes:
        request: The checked request (codes in the catalog's types).
        work: The request the table is built for (with replicates where the
            precision rule needs standard errors not asked for).
        plan: Its plan.
        full: The plan the engine runs (every grouping set, what each statistic adds).
        whole: The plan with every grouping set and every magnitude asked for
            (the bases of variables with item non-response tabulate from it).
    """

    request: TableRequest
    work: TableRequest
    plan: TabulationPlan
    full: TabulationPlan
    whole: TabulationPlan


@dataclass(frozen=True)
class Prepared(Bound):
    """A bound request, its grouping sets tabulated: before any protection.

    Attributes:
        aggregates: The exact aggregates of every grouping set (the owner's).
        computed: The table's cells.
        structural_zero: Its structural zeros (of every cell, computed or not).
    """

    aggregates: CellAggregates
    computed: npt.NDArray[np.bool_]
    structural_zero: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Built:
    """One table's path, run: the checked request, its plan, the exact aggregates, the table.

    The aggregates are the data owner's; only the table is published (a
    table answered from a ``dp-marginals`` release reads no microdata: it has none).
    ``figures`` are its figures as the site's privacy ledger counted them
    (``None`` where the builder's admission keeps no ledger).
    """

    request: TableRequest
    plan: TabulationPlan
    aggregates: CellAggregates | None
    table: ProtectedTable
    figures: TableFigures | None = None


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
            the request limits, the small-cell, precision and universe-size rules
            then apply on the path, in the admission's order
            (:mod:`tablesafe.rules._admit`); those that depend on what was
            published (the account, the ledger, the putative-risk ceiling) apply
            where a site's service gives the admission its state store.
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
        engine = engine_or_default(engine)
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
        # Every rule that refuses or withholds, in its order (a site's service gives
        # it the state store: what was published decides).
        self.admission = Admission(self.source, rules, statistics=statistics)
        # dp-marginals: where the site keeps its release (the server's state store), and
        # the release once opened (tablesafe._release).
        self.release_store: ReleaseStore | None = None
        self._release: Release | None = None

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

        Runs before any microdata is read (the admission's limits, :meth:`Admission.check`).

        Raises:
            RequestError, RefusedError: for a request the catalog or rules do not allow.
        """
        checked = self.admission.check(request)
        if self.protection.fixed_budget:
            check_release_request(checked, self)
        return checked

    def bind(self, request: TableRequest | Bound) -> Bound:
        """``request`` checked against the limits and bound to the catalog, once.

        Raises:
            RequestError, RefusedError: for a request the catalog or rules do not allow.
        """
        if isinstance(request, Bound):
            return request
        catalog = self.dataset.catalog
        self.admission.check_groupings(request)
        # The precision rule decides on standard errors, asked for or not.
        work = replace(request, replicates=True) if self._precision_needs_se(request) else request
        plan = work.bind(catalog, max_dimensions=self.max_dimensions)
        self.admission.check_plan(plan)
        checked = request.coerced(catalog)
        if self.protection.fixed_budget:
            check_release_request(checked, self)
        full, whole = self._full_plans(work, plan)
        return Bound(checked, work.coerced(catalog), plan, full, whole)

    def run(
        self,
        request: TableRequest | Bound,
        *,
        key_id: str = OWNER,
        admission: Admission | None = None,
    ) -> Built:
        """The path of one table, every stage downward (DESIGN, "The path of one table").

        Check the request and bind it once (:meth:`bind`), tabulate every
        grouping set (:meth:`prepare`), protect it and hand it to the
        admission (:mod:`tablesafe.rules._admit`: every rule that refuses or
        withholds, in its order), which gives the table published.

        Args:
            request: The table asked for (or bound already: :meth:`bind`).
            key_id: Who asks (the API key's id; the account's and the ledger's key).
            admission: Another admission than the builder's (a dry run of it:
                :meth:`Admission.dry`).

        Raises:
            RequestError, RefusedError, ComputationError: with a message for the user.
        """
        admission = admission or self.admission
        bound = self.bind(request)
        if self.protection.fixed_budget:
            return self._released(bound, key_id, admission)
        admission.refused_before(bound.request, key_id)
        prepared = self.prepare(bound)
        protected = self._protect(prepared, None)
        admitted = admission.admit(
            prepared, protected, lambda withheld: self._protect(prepared, withheld), key_id
        )
        return Built(
            prepared.request, prepared.plan, prepared.aggregates, admitted.table, admitted.figures
        )

    def _released(self, bound: Bound, key_id: str, admission: Admission) -> Built:
        """A ``dp-marginals`` table: read from the site's release, no microdata, then admitted.

        :func:`tablesafe._release.released_table`; the admission spends the
        release's one figure (:meth:`Admission.released`).
        """
        release = self.release()
        assert release is not None
        plan = bound.plan
        computed = computed_cells(plan.shape, plan.grouping_sets)
        zeros = structural_zero_mask(self.dataset.catalog, plan) & computed
        table = released_table(self, bound.request, plan, computed, zeros)
        figures = release_figures(self.protection, release)
        admitted = admission.released(table, bound.request, figures, key_id)
        return Built(bound.request, plan, None, admitted.table, admitted.figures)

    def release(self) -> Release | None:
        """The ``dp-marginals`` release every table is read from (made once), else ``None``.

        Read from :attr:`release_store` where it holds it; else measured and
        fitted now, and stored there (:func:`tablesafe._release.open_release`).
        """
        if not self.protection.fixed_budget:
            return None
        if self._release is None:
            self._release = open_release(self, self.admission.identity, self.release_store)
        return self._release

    def replay(self, request: TableRequest | Bound) -> Built:
        """A table as the builder publishes it where nothing was published before.

        The request's limits, the protection and the rules on the table alone
        (small cells, precision, the universe size): what a site's published
        table is rebuilt as for a measure over published tables (the
        putative-risk ceiling), spending nothing and recording nothing.

        Raises:
            RequestError, RefusedError, ComputationError: with a message for the user.
        """
        prepared = self.prepare(request)
        admitted = self.admission.replay(prepared, self._protect(prepared, None))
        return Built(prepared.request, prepared.plan, prepared.aggregates, admitted.table)

    def prepare(self, request: TableRequest | Bound) -> Prepared:
        """Check and bind ``request`` (unless bound already), and tabulate every grouping set.

        Raises:
            RequestError, RefusedError, ComputationError: with a message for the user.
        """
        bound = self.bind(request)
        plan = bound.plan
        agg = self.engine.tabulate(self.dataset, bound.full)
        computed = computed_cells(agg.shape, plan.grouping_sets)
        zeros = structural_zero_mask(self.dataset.catalog, plan)
        return Prepared(**vars(bound), aggregates=agg, computed=computed, structural_zero=zeros)

    def cells(self, prepared: Prepared) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """A prepared table's cells (computed), and its structural zeros among them."""
        return prepared.computed, prepared.computed & prepared.structural_zero

    def _protect(
        self, prepared: Prepared, withheld: npt.NDArray[np.bool_] | None
    ) -> ProtectedTable:
        """A prepared table protected, ``withheld`` left out (the admission's rules not yet)."""
        cells = (prepared.computed, prepared.structural_zero)
        plan, agg, whole = prepared.plan, prepared.aggregates, prepared.whole
        return self._protected(prepared.work, plan, agg, whole, withheld, cells)

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
        a cell belongs to) and what each statistic adds
        (:meth:`~tablesafe.statistics.PublishedStatistic.full_plan`): only as
        many largest contributions of each magnitude as the protection and
        rules use; magnitudes with item non-response are left out (each base
        tabulates its own).
        """
        plan = request.bind(
            self.dataset.catalog, max_dimensions=max_dimensions or self.max_dimensions
        )
        return plan, self._full_plans(request, plan)[0]

    def _full_plans(
        self, request: TableRequest, plan: TabulationPlan
    ) -> tuple[TabulationPlan, TabulationPlan]:
        """The engine's plan of ``request``'s bound ``plan``, and the whole (every magnitude)."""
        every_set = replace(request, margins=Margins.ALL).grouping_sets()
        whole = replace(plan, grouping_sets=every_set)
        for statistic in self.statistics:
            whole = statistic.full_plan(self.source, whole)
        return without_bases(self.source, whole), whole

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
        whole = self._full_plans(request, plan)[1]
        return self._protected(request, plan, agg, whole, withheld, (computed, zeros))

    def _protected(
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
            self.source.metadata(request, plan),
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

    def definitions(self, plan: TabulationPlan, mask: npt.NDArray[np.bool_]) -> list[bytes]:
        """The canonical definitions of the cells of ``mask`` (:meth:`Source.definitions`)."""
        return self.source.definitions(plan, mask)

    @property
    def definition_space(self) -> DefinitionSpace:
        """The catalog's columns, codes and declared zeros (canonical definitions)."""
        return self.source.definition_space
