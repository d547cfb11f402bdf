"""Medians and quantiles of continuous variables, from each cell's records sorted.

No aggregate gives a quantile: the engine lists the universe's records with
their values, :mod:`tablesafe.cells._quantiles` sorts them per cell and
finds each quantile's record exactly, and :mod:`tablesafe.mechanisms._quantiles`
protects it; the rule reads the protected counts the quantile rests on (of
the records with a value). Standard errors where the weighted figures have
them: Woodruff's, from the records' replicate weights.
"""

from __future__ import annotations

from tablesafe.cells._plan import MagnitudePlan
from tablesafe.cells._quantiles import sort_cells
from tablesafe.mechanisms._quantiles import QuantileIntervals, protect_quantiles
from tablesafe.statistics._statistic import Figures, PublishedStatistic, TableWork

__all__ = ["Quantiles"]


class Quantiles(PublishedStatistic):
    """``median_VAR`` and ``pNN_VAR`` (``_weighted`` over the weights), with SEs and intervals."""

    name = "quantiles"

    def publish(self, work: TableWork, figures: Figures) -> None:
        """The quantiles of the variables that rest on ``figures``."""
        items = [q for q in work.request.quantiles if figures.rests(q, work.missing)]
        if not items:
            return
        source = work.source
        cat, engine, prot = source.dataset.catalog, source.engine, source.protection
        plan, agg, want_w = figures.plan, figures.agg, work.weighted
        weight = cat.weight if want_w else None
        intervals = None
        if want_w and figures.reps is not None and cat.replicates is not None:
            intervals = QuantileIntervals(cat.replicates, prot.se_threshold())
        cells = {}
        for name in dict.fromkeys(q.variable for q in items):
            variable = MagnitudePlan(
                name,
                cat.magnitude(name).column,
                weight,
                replicates=intervals.design.columns if intervals is not None else (),
            )
            values = engine.record_values(source.dataset, plan, variable)
            cells[name] = sort_cells(values, agg.shape, plan.grouping_sets)
        protected = protect_quantiles(
            items,
            cells,
            figures.counts,
            work.computed,
            (agg.n, agg.cell_key),
            cat.magnitudes,
            source.magnitudes,
            prot.seeds,
            prot.secret,
            (lambda mask: source.definitions(plan, mask)) if prot.perturbs_empty_cells else None,
            weighted=want_w,
            intervals=intervals,
        )
        work.meta["quantiles"] = protected.meta
        work.add_columns(figures, protected.columns)
