"""The table builder: request -> engine -> mechanism -> additivity -> ProtectedTable.

:class:`~tablesafe.Protection` is the data owner's choice of protection
(never the user's). :class:`TableBuilder` applies it to every request:

1. The request is bound to the catalog (before any microdata is read).
2. The engine computes the exact aggregates of every cell and every margin
   (all margins, whatever was requested: dynamic seeds need the key sums of
   the margins a cell belongs to, and weighted figures of empty cells the
   mean weights of their margins).
3. Each cell to perturb gets a uniform from its keys (:mod:`tablesafe._seeds`)
   and a perturbation ``v`` from the mechanism; structural zeros are never
   perturbed; counts never go below zero.
4. Weighted figures are the protected count times the cell's mean weight,
   plus noise from the cell's keys (:mod:`tablesafe.mechanisms._weighted`); replicate
   estimates follow them, so standard errors stay valid.
5. Additivity (:mod:`tablesafe.mechanisms._additivity`): aggregate, independent, or
   IPF with controlled rounding. All arrays of a table (counts, weighted
   figures, replicates) are added up into their margins in one pass.
6. Weighted figures, standard errors and intervals are rounded as the site
   says; standard errors only for cells with enough protected records.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import InternalError
from tablesafe._protection import CellwiseMechanism, Protection
from tablesafe._protection_limits import Additivity
from tablesafe._request import MAX_DIMENSIONS, Margins, Statistic, TableRequest, TabulationPlan
from tablesafe._rounding import Rounding
from tablesafe._seeds import SeedScheme, dynamic_streams
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._custom import check_grouping_limits
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._definitions import (
    DefinitionSpace,
    cell_definitions,
    definition_text,
    domain_text,
)
from tablesafe.catalog._units import Unit
from tablesafe.cells._aggregates import CellAggregates
from tablesafe.mechanisms._additivity import aggregate_margins, controlled_rounding, fit_to_margins
from tablesafe.mechanisms._records import DropAddRecords
from tablesafe.mechanisms._weighted import (
    enclosing_means,
    protected_weighted,
    replicate_figures,
)
from tablesafe.output._footnotes import SE_UNWEIGHTED
from tablesafe.output._table import ProtectedTable
from tablesafe.output._tabulation import Tabulation
from tablesafe.output._withheld import withhold

if TYPE_CHECKING:
    # The rules are a pydantic model: a table without a site's rules imports no pydantic.
    from tablesafe._release import Release, ReleaseStore
    from tablesafe._settings import RuleSettings
    from tablesafe.engines._base import Engine
    from tablesafe.mechanisms._magnitudes import MagnitudeProtection, ProtectedMagnitudes
    from tablesafe.mechanisms._quantiles import ProtectedQuantiles

__all__ = [
    "Built",
    "CellwiseMechanism",
    "Prepared",
    "Protection",
    "TableBuilder",
    "structural_zero_mask",
]


def structural_zero_mask(catalog: Catalog, plan: TabulationPlan) -> npt.NDArray[np.bool_]:
    """Which cells of the table are structural zeros.

    An inner cell is a structural zero when, for some declared structural
    zero, every variable it names is either a dimension whose category in
    the cell lies inside the declared codes, or restricted by the universe
    to codes inside them. A margin cell is a structural zero when all the
    inner cells it adds up are.
    """
    shape = plan.shape
    inner_shape = tuple(s - 1 for s in shape)
    inner = np.zeros(inner_shape, dtype=bool)
    universe = dict(plan.universe)
    for zero in catalog.structural_zeros:
        cond = np.ones(inner_shape, dtype=bool)
        for name, codes in zero.codes.items():
            var = catalog.variable(name)
            source = {s for c in codes for s in var.source_codes(c)}
            dims = [i for i, d in enumerate(plan.dimensions) if d.column == var.column]
            if dims:
                i = dims[0]
                inside = np.array(
                    [set(m) <= source for m in plan.dimensions[i].members], dtype=bool
                )
                cond &= inside.reshape([-1 if j == i else 1 for j in range(len(shape))])
            elif var.column in universe and set(universe[var.column]) <= source:
                continue
            else:
                cond[...] = False
        inner |= cond
    # A margin is a structural zero when every inner cell it spans is (a
    # logical "all" over the axes it totals; read from the plan, no stage).
    mask = np.zeros(shape, dtype=bool)
    n = len(shape)
    for r in range(n + 1):
        for axes in itertools.combinations(range(n), r):
            at = tuple(-1 if i in axes else slice(0, inner_shape[i]) for i in range(n))
            mask[at] = inner.all(axis=axes) if axes else inner
    return mask


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
    """

    request: TableRequest
    work: TableRequest
    plan: TabulationPlan
    full: TabulationPlan
    aggregates: CellAggregates


@dataclass(frozen=True)
class Built:
    """One table's path, run: the checked request, its plan, the exact aggregates, the table.

    The aggregates are the data owner's (the server's guard reads them); only
    the table is published. A table answered from a ``dp-marginals`` release
    reads no microdata: it has none.
    """

    request: TableRequest
    plan: TabulationPlan
    aggregates: CellAggregates | None
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
    ) -> None:
        if engine is None:
            from tablesafe.engines import DuckDBEngine

            engine = DuckDBEngine()
        self.dataset = dataset
        self.protection = protection
        self.engine = engine
        self.rules = rules
        self.max_dimensions = min(max_dimensions, rules.max_dimensions) if rules else max_dimensions
        if magnitudes is None:
            from tablesafe.mechanisms._magnitudes import MagnitudeMethod, MagnitudeProtection

            magnitudes = MagnitudeProtection(
                method=MagnitudeMethod.NONE if protection.mechanism is None else MagnitudeMethod.CKM
            )
        self.magnitude_protection = magnitudes
        self._overall: tuple[float, np.ndarray | None] | None = None
        self._unit_means: dict[Unit, tuple[float, np.ndarray | None]] = {}
        self._magnitude_means: dict[tuple[str, bool], float] = {}
        # dp-marginals: where the site keeps its release (the server's state store), and
        # the release once opened (tablesafe._release).
        self.release_store: ReleaseStore | None = None
        self._release: Release | None = None

    # -- the data owner's views --------------------------------------------------

    def tabulate(self, request: TableRequest) -> Tabulation:
        """The unprotected tabulation (true values, for the data owner only)."""
        from tablesafe.output._tabulation import refuse_item_nonresponse

        plan = request.bind(self.dataset.catalog, max_dimensions=self.max_dimensions)
        refuse_item_nonresponse(self.dataset, plan)
        return Tabulation(request, self.engine.tabulate(self.dataset, plan), self.dataset.name)

    def overall_mean_weights(self, unit: Unit | None = None) -> tuple[float, np.ndarray | None]:
        """The dataset's overall mean weight (and per replicate); public constants.

        Args:
            unit: Of the units of a table of another unit than the records'
                (households: the mean household weight), ``None`` for the records'.
        """
        if unit is not None and unit != self.dataset.catalog.unit:
            return self._unit_mean_weight(Unit(unit))
        if self._overall is None:
            cat = self.dataset.catalog
            first = cat.source_variables[0].name
            plan = TableRequest(
                (first,),
                statistic=Statistic.WEIGHTED if cat.weight else Statistic.COUNT,
                margins=Margins.TOTAL,
                replicates=cat.replicates is not None and cat.weight is not None,
            ).bind(cat)
            agg = self.engine.tabulate(self.dataset, plan)
            n = max(int(agg.n[-1]), 1)
            w = float(agg.weight_sum[-1]) / n if agg.weight_sum is not None else 1.0
            reps = agg.replicate_sums[:, -1] / n if agg.replicate_sums is not None else None
            self._overall = (w, reps)
        return self._overall

    def _unit_mean_weight(self, unit: Unit) -> tuple[float, np.ndarray | None]:
        """The mean weight of the catalog's ``unit`` (households), a public constant."""
        if unit not in self._unit_means:
            counted = self.dataset.catalog.units[unit]
            plan = TableRequest(
                (counted.variables[0],),
                statistic=Statistic.WEIGHTED if counted.weight else Statistic.COUNT,
                margins=Margins.TOTAL,
                unit=unit,
            ).bind(self.dataset.catalog)
            agg = self.engine.tabulate(self.dataset, plan)
            n = max(int(agg.n[-1]), 1)
            w = float(agg.weight_sum[-1]) / n if agg.weight_sum is not None else 1.0
            self._unit_means[unit] = (w, None)
        return self._unit_means[unit]

    def overall_magnitude_mean(self, name: str, weighted: bool) -> float:
        """The dataset's sum of magnitude ``name`` per record (weighted or not); public."""
        key = (name, weighted)
        if key not in self._magnitude_means:
            cat = self.dataset.catalog
            request = TableRequest(
                (cat.source_variables[0].name,),
                statistic=Statistic.WEIGHTED if weighted and cat.weight else Statistic.COUNT,
                margins=Margins.TOTAL,
                magnitudes=(f"sum:{name}",),
            )
            _, full = self._plans(request.coerced(cat))
            if cat.magnitude(name).missing is not None:
                # Per record with a value: the base of the variable's figures.
                full = self.present_plan(full, cat.magnitude(name).name)
            agg = self.engine.tabulate(self.dataset, full)
            total = float(agg.magnitudes[cat.magnitude(name).name].total[-1])
            self._magnitude_means[key] = total / max(int(agg.n[-1]), 1)
        return self._magnitude_means[key]

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
        coerced = request.coerced(catalog)
        if self.protection.fixed_budget:
            from tablesafe._release import check_release_request

            check_release_request(coerced, self)
        return coerced

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
        if self.protection.fixed_budget:
            return self._released(request, checked=checked, universe_rule=universe_rule)
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
        plan, full = self.plans(work)
        agg = self.engine.tabulate(self.dataset, full)
        return Prepared(request, work, plan, full, agg)

    def cells(self, prepared: Prepared) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """A prepared table's cells (computed), and its structural zeros among them."""
        plan = prepared.plan
        computed = _computed(prepared.aggregates.shape, plan.grouping_sets)
        return computed, computed & structural_zero_mask(self.dataset.catalog, plan)

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
        request, work, plan, agg = (
            prepared.request,
            prepared.work,
            prepared.plan,
            prepared.aggregates,
        )
        table = self.protect(work, plan, agg, withheld)
        return Built(request, plan, agg, self._rules(request, table, universe_rule=universe_rule))

    def _rules(
        self, request: TableRequest, table: ProtectedTable, *, universe_rule: bool
    ) -> ProtectedTable:
        """The builder's rules on a protected table (where the builder has rules).

        The universe-size rule (on the table's protected total), the small-cell
        rule on the protected counts and the precision rule.
        """
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
            table = apply_small_cell_rule(table, rules)
            table = apply_precision_rule(table, rules, publish_se=request.replicates)
            table = replace(table, request=request)
        return table

    def _released(self, request: TableRequest, *, checked: bool, universe_rule: bool) -> Built:
        """A ``dp-marginals`` table: read from the site's release, then the rules.

        No microdata is read (:func:`tablesafe._release.released_table`).
        """
        from tablesafe._release import released_table

        if not checked:
            request = self.check(request)
        plan, _ = self.plans(request)
        computed = _computed(plan.shape, plan.grouping_sets)
        sz = structural_zero_mask(self.dataset.catalog, plan) & computed
        table = released_table(self, request, plan, computed, sz)
        return Built(request, plan, None, self._rules(request, table, universe_rule=universe_rule))

    def release(self) -> Release | None:
        """The ``dp-marginals`` release every table is read from (made once), else ``None``.

        Read from :attr:`release_store` where it holds it; else measured and
        fitted now, and stored there (:func:`tablesafe._release.open_release`).
        """
        if not self.protection.fixed_budget:
            return None
        if self._release is None:
            from tablesafe._release import open_release
            from tablesafe.rules._admission import dataset_identity

            identity = dataset_identity(self.engine, self.dataset)
            self._release = open_release(self, identity, self.release_store)
        return self._release

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
        a cell belongs to) and only as many largest contributions of each
        magnitude as the protection and rules use. Magnitudes with item
        non-response are left out: they are summed over the records that hold
        a value (:meth:`present_plan`, with ``missing=True`` kept for it).
        """
        plan, full_plan = self._plans(request, max_dimensions=max_dimensions)
        missing = {
            m.name for m in self.dataset.catalog.magnitudes.values() if m.missing is not None
        }
        kept = tuple(m for m in full_plan.magnitudes if m.name.split("#")[0] not in missing)
        return plan, replace(full_plan, magnitudes=kept)

    def _plans(
        self, request: TableRequest, *, max_dimensions: int | None = None
    ) -> tuple[TabulationPlan, TabulationPlan]:
        """:meth:`plans`, every magnitude of the request kept."""
        plan = request.bind(
            self.dataset.catalog, max_dimensions=max_dimensions or self.max_dimensions
        )
        full_plan = replace(
            plan, grouping_sets=replace(request, margins=Margins.ALL).grouping_sets()
        )
        if full_plan.magnitudes:
            full_plan = full_plan.with_top(self.magnitude_protection.top_needed())
            # Replicate sums serve standard errors only: no largest contributions.
            full_plan = replace(
                full_plan,
                magnitudes=tuple(
                    replace(m, top=0) if "#" in m.name else m for m in full_plan.magnitudes
                ),
            )
        return plan, full_plan

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
        prot = self.protection
        computed = _computed(agg.shape, plan.grouping_sets)
        is_inner = agg.is_inner()
        sz = structural_zero_mask(self.dataset.catalog, plan)
        want_w = request.statistic != Statistic.COUNT and agg.weight_sum is not None
        meta = self._metadata()
        if plan.unit is not None:
            meta["unit"] = str(self._unit_of(plan))
        if request.replicates and request.statistic == Statistic.COUNT:
            # Asked for, none given: the table says why rather than leave them out silently.
            meta["se_unavailable"] = SE_UNWEIGHTED
        counts, weighted, reps, perturbed, adjusted = self._protect_counts(
            request, plan, agg, computed, is_inner, sz, want_w, meta, withheld
        )
        se = ci_low = ci_high = None
        raw_weighted, noise = weighted, None
        if weighted is not None:
            noise = self._noise_variance(counts, weighted)
            weighted, se, ci_low, ci_high = self._publish_weighted(
                request, computed, counts, weighted, reps, noise, meta
            )
        percentages = None
        if request.percentages:
            percentages = self._publish_percentages(
                request, computed, counts, (weighted, raw_weighted, reps, noise), meta
            )
        figures = _Figures(plan, agg, counts, weighted, raw_weighted, reps, noise)
        mag_columns, sensitive, counts_of = self._magnitude_figures(
            request, figures, computed, (is_inner, sz), want_w, meta
        )
        table = ProtectedTable(
            request=request,
            dimensions=plan.dimensions,
            computed=computed,
            counts=None
            if request.statistic == Statistic.WEIGHTED
            else np.where(computed, counts, 0),
            weighted=weighted,
            perturbed=perturbed,
            adjusted=adjusted,
            structural_zero=sz & computed,
            mechanism=prot.describe(),
            metadata=meta,
            replicate_weighted=reps,
            se=se,
            ci_low=ci_low,
            ci_high=ci_high,
            roundings=self._roundings(request),
            percentages=percentages,
            magnitudes=mag_columns,
            sensitive=sensitive,
            base_counts=np.where(computed, counts, 0),
            estimate_counts={c: np.where(computed, v, 0) for c, v in counts_of.items()} or None,
            suppressed_bases=self._withheld_bases(counts_of, computed),
            catalog=self.dataset.catalog,
            protected=self.protects(request),
        )
        if withheld is not None and withheld.any():
            table = withhold(table, withheld & computed, additive=self._additive())
        return table

    def protects(self, request: TableRequest) -> bool:
        """Whether every figure the table of ``request`` publishes is protected.

        From the protection objects: the counts' mechanism, and the magnitudes'
        protection where the request asks for sums, means or quantiles (a table
        with exact sums beside protected counts is not protected).
        """
        figures = bool(request.magnitudes or request.quantiles)
        return self.protection.protects and (not figures or self.magnitude_protection.protects)

    def _withheld_bases(
        self, counts_of: dict[str, np.ndarray], computed: npt.NDArray[np.bool_]
    ) -> dict[str, np.ndarray] | None:
        """The cells of each base column the site's small-cell rule withholds (:meth:`_base`)."""
        from tablesafe.catalog._magnitudes import read_base_column

        if self.rules is None or self.rules.min_cell_size <= 1:
            return None
        k = self.rules.min_cell_size
        out = {
            c: computed & (v >= 1) & (v < k)
            for c, v in counts_of.items()
            if read_base_column(c) is not None
        }
        return out or None

    def _metadata(self) -> dict[str, Any]:
        """Step 1 of protect: the table's metadata as the dataset and protection open it."""
        meta: dict[str, Any] = {
            "dataset": self.dataset.name,
            "additivity": str(self.protection.additivity),
        }
        catalog = self.dataset.catalog
        for key in ("citation", "reference_date", "updated"):
            if getattr(catalog, key):
                meta[key] = getattr(catalog, key)
        return meta

    def _protect_counts(
        self,
        request: TableRequest,
        plan: TabulationPlan,
        agg: CellAggregates,
        computed: npt.NDArray[np.bool_],
        is_inner: npt.NDArray[np.bool_],
        sz: npt.NDArray[np.bool_],
        want_w: bool,
        meta: dict[str, Any],
        withheld: npt.NDArray[np.bool_] | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray, np.ndarray]:
        """Step 2 of protect: the protected counts, record-level or cell-wise.

        Returns:
            Counts, weighted figures, replicate figures, the perturbed mask and
            the adjusted mask (both only where computed).
        """
        shape = agg.shape
        if self.protection.record_level:
            counts, weighted, reps = self._records(request, plan, agg, sz, want_w, withheld)
            meta["additivity"] = "aggregate (record level)"
            perturbed = np.where(computed, counts != agg.n, False)
            adjusted = np.zeros(shape, dtype=bool)
        else:
            counts, weighted, reps, adjusted = self._cells(
                agg, plan, computed, is_inner, sz, meta, withheld
            )
            perturbed = (counts != agg.n) & computed
            adjusted &= computed
        if np.any(counts[computed] < 0):
            raise InternalError("a protected count is negative")
        return counts, weighted, reps, perturbed, adjusted

    def _publish_weighted(
        self,
        request: TableRequest,
        computed: npt.NDArray[np.bool_],
        counts: np.ndarray,
        weighted: np.ndarray,
        reps: np.ndarray | None,
        noise: np.ndarray,
        meta: dict[str, Any],
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
        """Step 3 of protect: weighted figures rounded, with their standard errors.

        The standard error adds the protection's variance ``noise`` to the
        replicates' sampling variance (:mod:`tablesafe.mechanisms._precision`).

        Returns:
            The rounded weighted figures, then the standard errors and the
            confidence interval's ends (None without a replicate design).
        """
        prot = self.protection
        se = ci_low = ci_high = None
        meta["weighted"] = self._weighted_statement()
        published = np.where(
            computed, self._round(weighted, request, computed, additive=self._adds_up()), 0.0
        )
        design = self.dataset.catalog.replicates
        if reps is not None and design is not None:
            from tablesafe.mechanisms._variance import confidence_interval, replicate_se

            raw_se = np.sqrt(replicate_se(weighted, reps, design) ** 2 + noise)
            # Centred on the published figure, so that it lies inside its own interval
            # at any rounding; a weighted count is never negative: so is no end of it.
            raw_low, raw_high = confidence_interval(published, raw_se, lower_bound=0.0)
            # Standard errors only where enough records stand behind the
            # protected count: never for a cell that may hold no record.
            shown = computed & (counts >= prot.se_threshold())
            se, ci_low, ci_high = (
                np.where(shown, self._round(a, request, computed, additive=False), np.nan)
                for a in (raw_se, raw_low, raw_high)
            )
            meta["replicate_method"] = str(design.method)
            meta["replicate_coefficient"] = design.coefficient
            meta["se_min_count"] = prot.se_threshold()
            meta["ci_lower_bound"] = 0.0
            meta["se_perturbation"] = prot.mechanism is not None
        return published, se, ci_low, ci_high

    def _adds_up(self) -> bool:
        """Whether published margins are sums of the published (rounded) inner cells.

        A protected additive table's margins are sums of its inner cells, and
        stay so once rounded. Without protection every figure is the true
        one, rounded once: a margin summed from rounded cells would carry
        their rounding errors (docs/weighted.md).
        """
        return self.protection.mechanism is not None and self._additive()

    def _additive(self) -> bool:
        """Whether the protected tables' margins are sums of their inner cells."""
        prot = self.protection
        return prot.record_level or prot.additivity != Additivity.INDEPENDENT

    def _noise_variance(self, counts: np.ndarray, weighted: np.ndarray) -> np.ndarray:
        """The variance the protection adds to each weighted figure (unrounded)."""
        from tablesafe.mechanisms._precision import weighted_noise_variance

        prot = self.protection
        return weighted_noise_variance(
            prot.mechanism,
            counts,
            weighted,
            prot.weight_noise,
            self._additive(),
            _all_sets(counts.ndim),
        )

    def _publish_percentages(
        self,
        request: TableRequest,
        computed: npt.NDArray[np.bool_],
        counts: np.ndarray,
        weighted: tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray | None],
        meta: dict[str, Any],
    ) -> dict[str, np.ndarray]:
        """Step 4 of protect: percentages of the protected figures, with their standard errors.

        Each percentage divides two protected figures of the table before
        they are rounded (the protected counts, or the unrounded protected
        weighted figures) and is rounded once, as itself (docs/decisions.md,
        "Ratios of protected figures"). Its standard error (where the table
        has replicates) recomputes the ratio on the replicate figures and
        adds the perturbation's variance; its interval is centred on the
        published percentage; both counts behind it must reach the site's
        threshold for standard errors.

        Args:
            request: The request.
            computed: Cells of the table.
            counts: Protected counts.
            weighted: The published (rounded) weighted figures, the unrounded
                ones, their replicate figures and their perturbation
                variance; all ``None`` for a table of counts.
            meta: The table's metadata (what the percentages are of is added).
        """
        from tablesafe.mechanisms._precision import PERCENT_ROUNDING, percent_of

        published, raw, reps, noise = weighted
        of_weighted = published is not None
        values = raw if raw is not None else counts.astype(np.float64)
        design = self.dataset.catalog.replicates
        out: dict[str, np.ndarray] = {}
        for kind in request.percentages:
            name = kind.column_name
            out[name] = np.where(computed, PERCENT_ROUNDING.apply(percent_of(values, kind)), np.nan)
            if reps is None or design is None or raw is None or noise is None:
                continue
            se, low, high = self._percent_se(
                kind, computed, counts, (raw, reps, noise), np.nan_to_num(out[name])
            )
            out[f"{name}_se"], out[f"{name}_ci_low"], out[f"{name}_ci_high"] = se, low, high
        meta["percentages"] = {
            "of": "weighted" if of_weighted else "count",
            "rounding": str(PERCENT_ROUNDING),
        }
        if reps is not None and design is not None:
            meta["percentages"]["ci_upper_bound"] = 100 if self._additive() else None
        return out

    def _percent_se(
        self,
        kind: Any,
        computed: npt.NDArray[np.bool_],
        counts: np.ndarray,
        figures: tuple[np.ndarray, np.ndarray, np.ndarray],
        published: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A percentage's standard error and 95% interval (within 0 to 100), rounded.

        Args:
            kind: The percentage.
            computed: Cells of the table.
            counts: Protected counts.
            figures: The unrounded protected weighted figures, their replicate
                figures and their perturbation variance.
            published: The published percentages (the intervals' centres).
        """
        from tablesafe.mechanisms._precision import (
            PERCENT_ROUNDING,
            denominator_index,
            percent_precision,
        )
        from tablesafe.mechanisms._variance import confidence_interval

        raw, reps, noise = figures
        design = self.dataset.catalog.replicates
        assert design is not None
        sampling, perturbation = percent_precision(
            kind, raw, reps, noise, design, additive=self._additive()
        )
        se = np.sqrt(sampling + perturbation)
        low, high = confidence_interval(published, se, lower_bound=0.0)
        threshold = self.protection.se_threshold()
        shown = (
            computed
            & (counts >= threshold)
            & (counts[denominator_index(kind, counts.shape)] >= threshold)
            & ~np.isnan(se)
        )
        # A share of a total that adds it up is at most 100%; an independently
        # protected total may be below one of its cells, so its share may not.
        if self._additive():
            high = np.minimum(high, 100.0)
        return tuple(  # type: ignore[return-value]
            np.where(shown, PERCENT_ROUNDING.apply(np.nan_to_num(a)), np.nan)
            for a in (se, low, high)
        )

    def _magnitude_figures(
        self,
        request: TableRequest,
        main: _Figures,
        computed: npt.NDArray[np.bool_],
        masks: tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]],
        want_w: bool,
        meta: dict[str, Any],
    ) -> tuple[dict[str, np.ndarray] | None, dict[str, np.ndarray] | None, dict[str, np.ndarray]]:
        """Step 5 of protect: sums, means and quantiles, each over the records with a value.

        Variables without item non-response rest on the table's own figures;
        each with it on the figures of the records that hold a value (its
        base: :meth:`_base`, published as ``n_VAR`` and ``weighted_VAR``).

        Returns:
            The columns (``None`` without magnitudes), the rules' flags by
            variable, and by column the protected counts each estimate rests
            on (its base's: the precision rule reads them).
        """
        if not (request.magnitudes or request.quantiles):
            return None, None, {}
        missing = self._item_nonresponse(request)
        columns: dict[str, np.ndarray] = {}
        sensitive: dict[str, np.ndarray] = {}
        counts_of: dict[str, np.ndarray] = {}
        for name in [None, *missing]:
            figures = main
            before = set(columns)
            if name is not None:
                figures = self._base(request, main.plan, name, computed, masks, want_w, columns)
            items = [m for m in request.magnitudes if _in_group(m, name, missing)]
            if items:
                mags = self._protect_magnitudes(items, figures, computed, want_w)
                _merge_magnitude_meta(meta, mags.meta)
                figured = mags.columns
                if want_w and figures.reps is not None and figures.raw is not None:
                    assert figures.noise is not None
                    figured = self._magnitude_se(
                        figures.agg,
                        figures.counts,
                        mags,
                        (figures.raw, figures.reps, figures.noise),
                        computed,
                    )
                columns.update(figured)
                sensitive.update(mags.sensitive)
            quantiles = [q for q in request.quantiles if _in_group(q, name, missing)]
            if quantiles:
                protected = self._protect_quantiles(quantiles, figures, computed, want_w)
                meta["quantiles"] = protected.meta
                columns.update(protected.columns)
            counts_of.update({c: figures.counts for c in columns if c not in before})
        return columns, sensitive, counts_of

    def _item_nonresponse(self, request: TableRequest) -> list[str]:
        """The request's variables with item non-response (``missing`` in the catalog), in order."""
        cat = self.dataset.catalog
        names = [_variable(m) for m in (*request.magnitudes, *request.quantiles)]
        names = [cat.magnitude(n).name for n in names]
        return [n for n in dict.fromkeys(names) if cat.magnitudes[n].missing is not None]

    def present_plan(self, plan: TabulationPlan, name: str) -> TabulationPlan:
        """``plan`` over the records that hold a value of magnitude ``name``, with its sums only.

        Its magnitude plans are ``name``'s (and its replicates'); the counts,
        cell keys and weights it gives are those of the records with a value.
        """
        variable = self.dataset.catalog.magnitudes[name]
        assert variable.missing is not None
        return replace(
            plan,
            present=((variable.column, variable.missing),),
            magnitudes=tuple(m for m in plan.magnitudes if m.name.split("#")[0] == name),
        )

    def _base(
        self,
        request: TableRequest,
        plan: TabulationPlan,
        name: str,
        computed: npt.NDArray[np.bool_],
        masks: tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]],
        want_w: bool,
        columns: dict[str, np.ndarray],
    ) -> _Figures:
        """The base of a variable with item non-response: its records' figures, protected.

        The records that hold a value of ``name`` are tabulated (their counts,
        cell keys, weights and sums) and protected as the table's counts and
        weighted figures are, so a base is a count like any other: its noise
        comes from its own record set. Adds the published base to ``columns``:
        ``n_VAR`` where the table has counts, ``weighted_VAR`` where it is
        weighted (blank where the site's small-cell rule hides a count).
        """
        from tablesafe.catalog._magnitudes import base_column

        _, full = self._plans(request)
        base_plan = self.present_plan(full, name)
        agg = self.engine.tabulate(self.dataset, base_plan)
        is_inner, sz = masks
        scratch: dict[str, Any] = {}
        counts, weighted, reps, _, _ = self._protect_counts(
            request, base_plan, agg, computed, is_inner, sz, want_w, scratch
        )
        raw, noise = weighted, None
        if weighted is not None:
            noise = self._noise_variance(counts, weighted)
            weighted = self._publish_weighted(
                request, computed, counts, weighted, reps, noise, scratch
            )[0]
        small = np.zeros(counts.shape, dtype=bool)
        if self.rules is not None and self.rules.min_cell_size > 1:
            small = (counts >= 1) & (counts < self.rules.min_cell_size)
        if request.statistic != Statistic.WEIGHTED:
            shown = np.where(small, np.nan, counts.astype(np.float64))
            columns[base_column(name, weighted=False)] = np.where(computed, shown, np.nan)
        if weighted is not None:
            shown = np.where(small, np.nan, weighted)
            columns[base_column(name, weighted=True)] = np.where(computed, shown, np.nan)
        figures_plan = replace(plan, present=base_plan.present)
        return _Figures(figures_plan, agg, counts, weighted, raw, reps, noise)

    def _protect_magnitudes(
        self,
        items: list[str],
        figures: _Figures,
        computed: npt.NDArray[np.bool_],
        want_w: bool,
    ) -> ProtectedMagnitudes:
        """Sums and means of ``items``, against the protected counts of ``figures``.

        A weighted mean divides the protected sum by the unrounded protected
        weighted count and is rounded once, as itself (docs/decisions.md,
        "Ratios of protected figures"): dividing by the rounded count would
        move it with the rounding of its denominator.
        """
        from tablesafe.mechanisms._magnitudes import protect_magnitudes

        prot = self.protection
        plan = figures.plan
        return protect_magnitudes(
            items,
            figures.agg,
            figures.counts,
            figures.raw if want_w else None,
            computed,
            self.dataset.catalog.magnitudes,
            self.magnitude_protection,
            prot.seeds,
            prot.secret,
            lambda mask: self.definitions(plan, mask),
            (lambda name: self.overall_magnitude_mean(name, want_w))
            if prot.perturbs_empty_cells
            else None,
        )

    def _protect_quantiles(
        self,
        items: list[str],
        figures: _Figures,
        computed: npt.NDArray[np.bool_],
        want_w: bool,
    ) -> ProtectedQuantiles:
        """Medians and quantiles of ``items``, from each cell's records sorted.

        The engine lists the universe's records with their values (no
        aggregate gives a quantile); :mod:`tablesafe.cells._quantiles` sorts
        them per cell and finds each quantile's record exactly, and
        :mod:`tablesafe.mechanisms._quantiles` protects it; the rule reads
        the protected counts of ``figures`` (of the records with a value).
        """
        from tablesafe.cells._magnitude_sums import MagnitudePlan
        from tablesafe.cells._quantiles import sort_cells
        from tablesafe.mechanisms._quantiles import QuantileIntervals, protect_quantiles

        cat = self.dataset.catalog
        plan, agg = figures.plan, figures.agg
        weight = cat.weight if want_w else None
        prot = self.protection
        # Standard errors where the weighted figures have them: Woodruff's, from the
        # records' replicate weights.
        intervals = None
        if want_w and figures.reps is not None and cat.replicates is not None:
            intervals = QuantileIntervals(cat.replicates, prot.se_threshold())
        cells = {}
        for name in dict.fromkeys(_variable(q) for q in items):
            variable = MagnitudePlan(
                name,
                cat.magnitude(name).column,
                weight,
                replicates=intervals.design.columns if intervals is not None else (),
            )
            values = self.engine.record_values(self.dataset, plan, variable)
            cells[name] = sort_cells(values, agg.shape, plan.grouping_sets)
        return protect_quantiles(
            items,
            cells,
            figures.counts,
            computed,
            (agg.n, agg.cell_key),
            cat.magnitudes,
            self.magnitude_protection,
            prot.seeds,
            prot.secret,
            (lambda mask: self.definitions(plan, mask)) if prot.perturbs_empty_cells else None,
            weighted=want_w,
            intervals=intervals,
        )

    def _magnitude_se(
        self,
        agg: CellAggregates,
        counts: np.ndarray,
        mags: ProtectedMagnitudes,
        weighted: tuple[np.ndarray, np.ndarray, np.ndarray],
        computed: npt.NDArray[np.bool_],
    ) -> dict[str, np.ndarray]:
        """Step 5 of protect: each sum's and mean's standard error and 95% interval.

        A sum's replicates are its true replicate sums' deviations scaled to
        the protected count (:func:`~tablesafe.mechanisms._precision.magnitude_replicates`);
        a mean is recomputed on the replicates of its sum and of the weighted
        count; both add the protection's variance. Shown where the protected
        count reaches the site's threshold and the dominance or p% rule does
        not flag the cell (the protection's variance of a sum grows with its
        largest contributions).

        Returns:
            The magnitude columns, each followed by ``_se``, ``_ci_low``, ``_ci_high``.
        """
        from tablesafe._request import replicate_magnitude
        from tablesafe.catalog._magnitudes import read_magnitude_column
        from tablesafe.mechanisms._precision import (
            magnitude_noise_variance,
            magnitude_replicates,
            ratio_precision,
        )
        from tablesafe.mechanisms._variance import confidence_interval, replicate_se

        raw_w, reps, noise_w = weighted
        design = self.dataset.catalog.replicates
        assert design is not None
        prot = self.magnitude_protection
        base = computed & (counts >= self.protection.se_threshold())
        out: dict[str, np.ndarray] = {}
        for column, values in mags.columns.items():
            out[column] = values
            parts = read_magnitude_column(column)
            assert parts is not None
            kind, name, _ = parts
            variable = self.dataset.catalog.magnitudes[name]
            sums, protected = agg.magnitudes[name], mags.sums[name]
            totals = np.stack(
                [agg.magnitudes[replicate_magnitude(name, r)].total for r in range(len(reps))]
            )
            x_reps = magnitude_replicates(protected, sums.total, totals, agg.n, counts)
            x_noise = magnitude_noise_variance(prot, sums.total, sums.top, variable.bound)
            if kind == "sum":
                variance = replicate_se(protected, x_reps, design) ** 2 + x_noise
                rounding = Rounding.parse(prot.rounding)
            else:
                variance = ratio_precision(protected, x_reps, x_noise, raw_w, reps, noise_w, design)
                rounding = Rounding.parse(prot.mean_rounding)
            se = np.sqrt(variance)
            # Centred on the published figure: inside its own interval at any rounding.
            low, high = confidence_interval(
                np.nan_to_num(values),
                np.nan_to_num(se),
                lower_bound=None if variable.negative else 0.0,
            )
            shown = base & ~mags.sensitive[name] & ~np.isnan(se) & ~np.isnan(values)
            for suffix, arr in (("se", se), ("ci_low", low), ("ci_high", high)):
                out[f"{column}_{suffix}"] = np.where(
                    shown, rounding.apply(np.nan_to_num(arr)), np.nan
                )
        return out

    # -- the stages -----------------------------------------------------------------

    def _cells(
        self,
        agg: CellAggregates,
        plan: TabulationPlan,
        computed: npt.NDArray[np.bool_],
        is_inner: npt.NDArray[np.bool_],
        sz: npt.NDArray[np.bool_],
        meta: dict[str, Any],
        withheld: npt.NDArray[np.bool_] | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray]:
        """Cell-wise mechanism and additivity: counts, weighted figures, replicates, adjusted."""
        prot = self.protection
        sets = plan.grouping_sets
        shape = agg.shape
        target = is_inner & ~sz if prot.additivity == Additivity.AGGREGATE else computed & ~sz
        v = np.zeros(shape, dtype=np.int64)
        mech = prot.mechanism
        draw = mech is not None and not isinstance(mech, DropAddRecords) and bool(target.any())
        want_w = mech is not None and agg.weight_sum is not None
        # Margins of an additive table are sums of inner cells: no draws needed there.
        inner_only = prot.additivity == Additivity.AGGREGATE
        u, u_w = self._draws(agg, plan, draw, want_w, inner_only=inner_only)
        if draw:
            assert isinstance(mech, CellwiseMechanism) and u is not None
            keys = None
            if prot.seeds == SeedScheme.CELLKEY:
                # Sampled ptables look cells up by key; an empty cell's stands in
                # from its definition's draw (all empty cells have key 0).
                from_u = np.floor(u[target] * 2.0**32).astype(np.uint32)
                by_definition = (agg.n[target] == 0) | prot.keyed_by_definition
                keys = np.where(by_definition, from_u, agg.cell_key[target])
            drawn = mech.perturbation(agg.n[target], u[target], keys)
            v[target] = np.asarray(drawn, dtype=np.int64)
            if not prot.perturbs_empty_cells:
                # Without a secret an empty cell has nothing to key a draw to: it
                # stays 0, and describe() states the figures of that mechanism.
                v[agg.n == 0] = 0
        counts = np.maximum(agg.n + v, 0)
        adjusted = np.zeros(shape, dtype=bool)
        if prot.additivity == Additivity.IPF:
            fit = fit_to_margins(counts.astype(np.float64), sets, structural_zero=sz)
            rounded = controlled_rounding(fit.values, sets)
            adjusted = rounded != counts
            meta["ipf_iterations"] = fit.iterations
            meta["ipf_reseeded_cells"] = fit.reseeded
            meta["ipf_method"] = fit.method
            counts = rounded

        weighted = reps = None
        if agg.weight_sum is not None:
            if mech is None:
                # No protection (the data owner's own use): the exact sums.
                weighted, reps = agg.weight_sum.copy(), agg.replicate_sums
            else:
                # A cell without records that the mechanism publishes as non-zero
                # takes the dataset's mean weight (a public constant), not its
                # margins' (which change with the table around it: averaging
                # would tell it is empty). It costs a query, so it is read only then.
                empty = agg.n == 0
                universe_empty = int(agg.n[(-1,) * agg.n.ndim]) == 0
                need = universe_empty or (prot.perturbs_empty_cells and bool(empty.any()))
                w_mean = self.overall_mean_weights(self._unit_of(plan))[0] if need else 1.0
                mean = enclosing_means(agg.weight_sum, agg.n, w_mean)
                if prot.perturbs_empty_cells:
                    mean = np.where(empty, w_mean, mean)
                assert u_w is not None
                weighted = protected_weighted(counts, mean, u_w, prot.weight_noise)
                if agg.replicate_sums is not None:
                    reps = replicate_figures(weighted, counts, agg.n, mean, agg.replicate_sums)
        if prot.additivity == Additivity.INDEPENDENT:
            return counts, weighted, reps, adjusted
        # Aggregate and IPF tables are additive: every margin is the sum of its
        # inner cells, for all arrays of the table at once.
        if prot.additivity == Additivity.IPF:
            _, weighted, reps = _add_up(None, weighted, reps, sets, withheld)
            return counts, weighted, reps, adjusted
        counts_sum, weighted, reps = _add_up(counts, weighted, reps, sets, withheld)
        assert counts_sum is not None
        return counts_sum, weighted, reps, adjusted

    def _unit_of(self, plan: TabulationPlan) -> Unit | None:
        """The unit a plan counts where it is not the records' own (by its identifier)."""
        if plan.unit is None:
            return None
        return next(u.unit for u in self.dataset.catalog.units.values() if u.id == plan.unit[0])

    def _draws(
        self,
        agg: CellAggregates,
        plan: TabulationPlan,
        count: bool,
        weight: bool,
        *,
        inner_only: bool,
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The uniforms of the count and of the weight noise, each if asked, in one pass.

        Each is a function of the cell's record set (and of the secret, where
        the seeds are keyed), never of the table around it; an empty cell's
        comes from its definition where the protection has a secret.
        """
        salts = ((b"count",) if count else ()) + ((b"weight",) if weight else ())
        streams = self._streams(agg, plan, salts, inner_only=inner_only)
        return (streams[0] if count else None), (streams[-1] if weight else None)

    def _streams(
        self,
        agg: CellAggregates,
        plan: TabulationPlan,
        salts: tuple[bytes, ...],
        *,
        inner_only: bool,
    ) -> list[np.ndarray]:
        """One array of uniforms per salt, under the protection's seed scheme."""
        prot = self.protection
        if not salts:
            return []
        inner = agg.is_inner() if inner_only else None
        if prot.seeds == SeedScheme.DYNAMIC:
            assert prot.secret is not None
            # Li & Krenzke's salts: b"" for a count (b"count" for drop/add-up-to-q).
            named = tuple(b"" if s == b"count" and not prot.record_level else s for s in salts)
            return dynamic_streams(agg.cell_key, prot.secret, named, inner_only=inner_only)
        return prot.uniforms(
            agg.n, agg.cell_key, salts, lambda mask: self.definitions(plan, mask), where=inner
        )

    def definitions(self, plan: TabulationPlan, mask: npt.NDArray[np.bool_]) -> list[bytes]:
        """The canonical definitions of the cells of ``mask``, as the bytes draws are keyed to.

        :func:`~tablesafe.catalog._definitions.cell_definitions` under the
        catalog's declared zeros, after the plan's domain (a table of another
        unit, or the records holding a value of a magnitude, counts other things).
        """
        found = cell_definitions(
            self.definition_space,
            [(d.column, d.members) for d in plan.dimensions],
            plan.universe,
            tuple(c.tolist() for c in np.nonzero(mask)),
        )
        prefix = domain_text(plan.unit, plan.present).encode()
        return [prefix + (b"empty" if d is None else definition_text(d).encode()) for d in found]

    @functools.cached_property
    def definition_space(self) -> DefinitionSpace:
        """The catalog's columns, codes and declared zeros (canonical definitions)."""
        return DefinitionSpace.of(self.dataset.catalog)

    def _records(
        self,
        request: TableRequest,
        plan: TabulationPlan,
        agg: CellAggregates,
        sz: npt.NDArray[np.bool_],
        want_w: bool,
        withheld: npt.NDArray[np.bool_] | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Record-level drop/add-up-to-q (Li & Krenzke 2016); see :mod:`.mechanisms._records`.

        The weighted figure of a cell is the sum of the weights of the records
        it holds after dropping or duplicating, plus the weight noise: the
        count and the weighted figure describe the same set of records.
        """
        prot = self.protection
        mech = prot.mechanism
        assert isinstance(mech, DropAddRecords) and prot.secret is not None
        sets = plan.grouping_sets
        shape = agg.shape
        inner = agg.inner

        n = agg.n[inner]
        q = mech.q(n)
        # The order stream only where records are chosen (weighted figures, below).
        salts = (b"count", b"order") if want_w else (b"count",)
        streams = [s[inner] for s in self._streams(agg, plan, salts, inner_only=True)]
        u_count = streams[0]
        d = np.floor(u_count * (2 * q + 1)).astype(np.int64) - q
        d = np.where(sz[inner], 0, d)
        counts = np.zeros(shape, dtype=np.int64)
        counts[inner] = n + d
        weighted = reps = None
        if want_w:
            # Which records are dropped or duplicated changes only weighted figures:
            # a count is n + d whichever records they are, so a table of counts
            # alone (and every table of unweighted data) asks the engine for no
            # record choice, which would cost two more scans of the records.
            order_seed = np.floor(streams[1] * 2.0**32).astype(np.int64)
            chosen = self.engine.select(self.dataset, plan, order_seed, np.abs(d), counts=n)
            if np.any(chosen.n != np.abs(d)):
                raise InternalError("the engine chose a different number of records than asked")
            assert agg.weight_sum is not None and chosen.weight_sum is not None
            sign = np.sign(d)
            kept = agg.weight_sum[inner] + sign * chosen.weight_sum
            n_kept = n + d
            mean = np.divide(kept, n_kept, out=np.zeros(n.shape), where=n_kept > 0)
            _, u_all = self._draws(agg, plan, False, True, inner_only=True)
            assert u_all is not None
            u_w = u_all[inner]
            weighted = np.zeros(shape)
            weighted[inner] = protected_weighted(n_kept, mean, u_w, prot.weight_noise)
            if agg.replicate_sums is not None and chosen.replicate_sums is not None:
                kept_r = agg.replicate_sums[(slice(None), *inner)] + sign * chosen.replicate_sums
                reps = np.zeros((kept_r.shape[0], *shape))
                reps[(slice(None), *inner)] = weighted[inner] + (kept_r - kept)
        total, weighted, reps = _add_up(counts, weighted, reps, sets, withheld)
        assert total is not None
        return total, weighted, reps

    # -- weighted figures -------------------------------------------------------------

    def _roundings(self, request: TableRequest) -> tuple[Rounding, ...]:
        """The site's rounding, then the request's where it asks for another (never finer)."""
        site = self.protection.round
        extra = getattr(request, "rounding", None)
        if extra is None or Rounding.parse(extra) == site:
            return (site,)
        return (site, Rounding.parse(extra))

    def _round(
        self,
        values: np.ndarray,
        request: TableRequest,
        computed: npt.NDArray[np.bool_],
        *,
        additive: bool,
    ) -> np.ndarray:
        """Round as the site says, then as the request asks (on top: never finer).

        In an additive table rounded to a base, margins are the sums of the
        rounded inner cells, so the published table still adds up.
        """
        steps = self._roundings(request)
        out = values
        for r in steps:
            out = r.apply(out)
        if additive and all(r.base is not None for r in steps):
            out = aggregate_margins(out, _all_sets(values.ndim))
        return np.where(computed, out, np.nan if not additive else 0.0)

    def _weighted_statement(self) -> dict[str, Any]:
        """What the metadata says about the weighted figures, in plain words."""
        prot = self.protection
        if prot.mechanism is None:
            return {
                "method": "exact weighted counts (no protection)",
                "rounding": str(prot.round),
            }
        return {
            "method": "protected count x mean weight + noise from the cell key",
            "noise_mean_weights": prot.weight_noise,
            "rounding": str(prot.round),
            "privacy": (
                "the mechanism's privacy figures are stated for the counts; a weighted figure "
                "is the protected count times the cell's mean weight plus noise of up to "
                f"{prot.weight_noise:g} mean weights drawn from the cell's keys, "
                f"{prot.round.describe()}: it reveals no more about the true count than the "
                "protected count does, but has no differential-privacy guarantee of its own"
            ),
        }


@dataclass(frozen=True)
class _Figures:
    """The protected figures a group of magnitudes rests on: the table's, or a base's.

    Attributes:
        plan: The plan (its universe; for a base, only records with a value).
        agg: The exact aggregates of that plan (every grouping set).
        counts: The protected counts.
        weighted: The published (rounded) weighted figures, or ``None``.
        raw: The unrounded protected weighted figures, or ``None``.
        reps: Their replicate figures, or ``None``.
        noise: The protection's variance of the weighted figures, or ``None``.
    """

    plan: TabulationPlan
    agg: CellAggregates
    counts: np.ndarray
    weighted: np.ndarray | None
    raw: np.ndarray | None
    reps: np.ndarray | None
    noise: np.ndarray | None


def _variable(item: str) -> str:
    """The variable of a ``sum:VAR``, ``mean:VAR``, ``median:VAR`` or ``quantile:VAR:P`` item."""
    return item.split(":")[1]


def _in_group(item: str, name: str | None, missing: list[str]) -> bool:
    """Whether ``item`` rests on the base of ``name`` (``None``: on the table's own figures)."""
    return _variable(item) == name if name is not None else _variable(item) not in missing


def _merge_magnitude_meta(meta: dict[str, Any], more: dict[str, Any]) -> None:
    """``meta.magnitudes`` of several groups of variables: one statement, every variable."""
    old = meta.get("magnitudes")
    if old is None:
        meta["magnitudes"] = more
        return
    old["variables"] = [*old["variables"], *more["variables"]]
    if "laplace_scale" in more:
        old["laplace_scale"] = {**old.get("laplace_scale", {}), **more["laplace_scale"]}


def _add_up(
    counts: np.ndarray | None,
    weighted: np.ndarray | None,
    reps: np.ndarray | None,
    sets: tuple[tuple[int, ...], ...],
    withheld: npt.NDArray[np.bool_] | None = None,
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """Margins as sums of inner cells, for every array of a table in one pass.

    Inner cells ``withheld`` are left out of the sums: margins add up the
    inner cells a table publishes.
    """
    arrays = [a for a in (counts, weighted) if a is not None]
    stack = [a.astype(np.float64)[None] for a in arrays]
    if reps is not None:
        stack.append(reps)
    if withheld is not None and withheld.any():
        stack = [np.where(withheld, 0.0, a) for a in stack]
    if not stack:
        return None, None, None
    summed = aggregate_margins(np.concatenate(stack), sets, lead=1)
    pos = 0
    out_counts = out_w = out_r = None
    if counts is not None:
        out_counts = np.rint(summed[0]).astype(np.int64)
        pos += 1
    if weighted is not None:
        out_w = summed[pos]
        pos += 1
    if reps is not None:
        out_r = summed[pos:]
    return out_counts, out_w, out_r


def _all_sets(k: int) -> tuple[tuple[int, ...], ...]:
    return tuple(s for r in range(k, -1, -1) for s in itertools.combinations(range(k), r))


def _computed(shape: tuple[int, ...], sets: tuple[tuple[int, ...], ...]) -> npt.NDArray[np.bool_]:
    """The cells a table computes: every cell of each of its grouping sets."""
    computed = np.zeros(shape, dtype=bool)
    for gs in sets:
        computed[_index(shape, gs)] = True
    return computed


def _index(shape: tuple[int, ...], gs: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(0, s - 1) if i in gs else slice(s - 1, s) for i, s in enumerate(shape))
