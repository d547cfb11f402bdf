"""What every statistic of a dataset's tables reads: the dataset, its engine and its protection.

A :class:`Source` is one builder's: the microdata (through the engine), the
data owner's protection of counts and of magnitudes, the site's rules where
it has them, and the public constants a statistic may need (the dataset's mean
weight, a magnitude's mean per record), each read from the engine once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tablesafe._protection import Protection
from tablesafe._protection_limits import Additivity
from tablesafe._request import Item, Margins, Statistic, TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._definitions import (
    DefinitionSpace,
    cell_definitions,
    definition_text,
    domain_text,
)
from tablesafe.catalog._units import Unit
from tablesafe.cells._plan import TabulationPlan
from tablesafe.mechanisms._magnitudes import MagnitudeProtection
from tablesafe.output._footnotes import SE_UNWEIGHTED

if TYPE_CHECKING:
    from tablesafe._settings import RuleSettings
    from tablesafe.engines._base import Engine

__all__ = ["MeanWeights", "Source"]

#: A dataset's mean weight, and per replicate weight (``None`` without replicates).
MeanWeights = tuple[float, np.ndarray | None]


@dataclass(eq=False)
class Source:
    """One dataset as its tables' statistics read it.

    Args:
        dataset: The dataset.
        engine: Its engine (the only reader of microdata).
        protection: The data owner's protection of counts and weighted figures.
        magnitudes: The protection of sums, means and quantiles.
        rules: The site's rules, or ``None`` (the small-cell rule's bases read them).
    """

    dataset: Dataset
    engine: Engine
    protection: Protection
    magnitudes: MagnitudeProtection
    rules: RuleSettings | None = None
    _overall: MeanWeights | None = field(default=None, repr=False)
    _unit_means: dict[Unit, MeanWeights] = field(default_factory=dict, repr=False)
    _magnitude_means: dict[tuple[str, bool], float] = field(default_factory=dict, repr=False)

    @property
    def additive(self) -> bool:
        """Whether the protected tables' margins are sums of their inner cells."""
        prot = self.protection
        return prot.record_level or prot.additivity != Additivity.INDEPENDENT

    @property
    def adds_up(self) -> bool:
        """Whether published margins are sums of the published (rounded) inner cells.

        A protected additive table's margins are sums of its inner cells, and
        stay so once rounded. Without protection every figure is the true
        one, rounded once: a margin summed from rounded cells would carry
        their rounding errors (docs/weighted.md).
        """
        return self.protection.mechanism is not None and self.additive

    # -- public constants ---------------------------------------------------------------

    def overall_mean_weights(self, unit: Unit | None = None) -> MeanWeights:
        """The dataset's overall mean weight (and per replicate); public constants.

        Args:
            unit: Of the units of a table of another unit than the records'
                (households: the mean household weight), ``None`` for the records'.
        """
        if unit is not None and unit != self.dataset.catalog.unit:
            return self._unit_mean_weight(Unit(unit))
        if self._overall is None:
            cat = self.dataset.catalog
            plan = TableRequest(
                (cat.source_variables[0].name,),
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

    def _unit_mean_weight(self, unit: Unit) -> MeanWeights:
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
            variable = cat.magnitude(name)
            plan = TableRequest(
                (cat.source_variables[0].name,),
                statistic=Statistic.WEIGHTED if weighted and cat.weight else Statistic.COUNT,
                margins=Margins.TOTAL,
                magnitudes=(Item("sum", (name,)),),
            ).bind(cat)
            full = replace(plan, grouping_sets=((0,), ())).with_top(self.magnitudes.top_needed())
            if variable.missing is not None:
                # Per record with a value: the base of the variable's figures.
                full = self.present_plan(full, variable.name)
            agg = self.engine.tabulate(self.dataset, full)
            total = float(agg.magnitudes[variable.name].total[-1])
            self._magnitude_means[key] = total / max(int(agg.n[-1]), 1)
        return self._magnitude_means[key]

    # -- plans and definitions -------------------------------------------------------------

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
            magnitudes=tuple(m for m in plan.magnitudes if m.variable == name),
        )

    def unit_of(self, plan: TabulationPlan) -> Unit | None:
        """The unit a plan counts where it is not the records' own (by its identifier)."""
        if plan.unit is None:
            return None
        return next(u.unit for u in self.dataset.catalog.units.values() if u.id == plan.unit[0])

    def metadata(self, request: TableRequest, plan: TabulationPlan) -> dict[str, Any]:
        """A table's metadata as the dataset, its unit and the protection open it."""
        meta: dict[str, Any] = {
            "dataset": self.dataset.name,
            "additivity": str(self.protection.additivity),
        }
        catalog = self.dataset.catalog
        for key in ("citation", "reference_date", "updated"):
            if getattr(catalog, key):
                meta[key] = getattr(catalog, key)
        if plan.unit is not None:
            meta["unit"] = str(self.unit_of(plan))
        if request.replicates and request.statistic == Statistic.COUNT:
            # Asked for, none given: the table says why rather than leave them out silently.
            meta["se_unavailable"] = SE_UNWEIGHTED
        return meta

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
