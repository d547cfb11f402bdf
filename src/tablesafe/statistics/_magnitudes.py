"""Sums and means of continuous variables, against the protected counts.

The engine sums each variable exactly (fixed point) with its largest
contributions; :func:`~tablesafe.mechanisms._magnitudes.protect_magnitudes`
protects the sums (the cell-key method for magnitudes, or DP) and applies
the dominance or p% rule. A weighted mean divides the protected sum by the
unrounded protected weighted count and is rounded once, as itself
(docs/decisions.md, "Ratios of protected figures"). Standard errors: a
sum's replicates are its true replicate sums' deviations scaled to the
protected count; a mean is recomputed on the replicates of its sum and of
the weighted count; both add the protection's variance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from tablesafe._request import Item
from tablesafe._rounding import Rounding
from tablesafe.cells._plan import TabulationPlan, replicate_name
from tablesafe.mechanisms._magnitudes import ProtectedMagnitudes, protect_magnitudes
from tablesafe.mechanisms._precision import (
    magnitude_noise_variance,
    magnitude_replicates,
    ratio_precision,
)
from tablesafe.mechanisms._variance import confidence_interval, replicate_se
from tablesafe.statistics._source import Source
from tablesafe.statistics._statistic import Array, Figures, PublishedStatistic, TableWork

__all__ = ["SumsAndMeans", "merge_magnitude_meta"]


class SumsAndMeans(PublishedStatistic):
    """``sum_VAR`` and ``mean_VAR`` (``_weighted`` over the weights), with SEs and intervals."""

    name = "magnitudes"
    kinds: ClassVar[Mapping[str, int]] = {"sum": 1, "mean": 1}

    def full_plan(self, source: Source, plan: TabulationPlan) -> TabulationPlan:
        """The largest contributions the protection and the rules use (none for replicates)."""
        if not plan.magnitudes:
            return plan
        plan = plan.with_top(source.magnitudes.top_needed())
        # Replicate sums serve standard errors only: no largest contributions.
        return replace(
            plan,
            magnitudes=tuple(
                replace(m, top=0) if m.replicate is not None else m for m in plan.magnitudes
            ),
        )

    def publish(self, work: TableWork, figures: Figures) -> None:
        """The sums and means of the variables that rest on ``figures``."""
        items = [
            m for m in work.request.magnitudes if self.takes(m) and figures.rests(m, work.missing)
        ]
        if not items:
            return
        mags = protect(work, items, figures)
        merge_magnitude_meta(work.meta, mags.meta)
        columns = mags.columns
        if work.weighted and figures.reps is not None and figures.raw is not None:
            columns = _with_se(work, figures, mags)
        work.add_columns(figures, columns)
        assert work.columns.sensitive is not None
        work.columns.sensitive.update(mags.sensitive)

    def takes(self, item: Item) -> bool:
        """Whether ``item`` is one of this statistic's (a sum or a mean)."""
        return item.kind in self.kinds


def protect(work: TableWork, items: list[Item], figures: Figures) -> ProtectedMagnitudes:
    """Sums and means of ``items``, against the protected counts of ``figures``."""
    source = work.source
    prot = source.protection
    plan, want_w = figures.plan, work.weighted
    return protect_magnitudes(
        items,
        figures.agg,
        figures.counts,
        figures.raw if want_w else None,
        work.computed,
        source.dataset.catalog.magnitudes,
        source.magnitudes,
        prot.seeds,
        prot.secret,
        lambda mask: source.definitions(plan, mask),
        (lambda name: source.overall_magnitude_mean(name, want_w))
        if prot.perturbs_empty_cells
        else None,
    )


def merge_magnitude_meta(meta: dict[str, Any], more: dict[str, Any]) -> None:
    """``meta.magnitudes`` of several groups of variables: one statement, every variable."""
    old = meta.get("magnitudes")
    if old is None:
        meta["magnitudes"] = more
        return
    old["variables"] = [*old["variables"], *more["variables"]]
    if "laplace_scale" in more:
        old["laplace_scale"] = {**old.get("laplace_scale", {}), **more["laplace_scale"]}


def _with_se(work: TableWork, figures: Figures, mags: ProtectedMagnitudes) -> dict[str, Array]:
    """Each sum's and mean's column followed by its standard error and 95% interval.

    Shown where the protected count reaches the site's threshold and the
    dominance or p% rule does not flag the cell (the protection's variance of
    a sum grows with its largest contributions).
    """
    source, agg, counts = work.source, figures.agg, figures.counts
    raw_w, reps, noise_w = figures.raw, figures.reps, figures.noise
    assert raw_w is not None and reps is not None and noise_w is not None
    design = source.dataset.catalog.replicates
    assert design is not None
    prot = source.magnitudes
    base = work.computed & (counts >= source.protection.se_threshold())
    out: dict[str, Array] = {}
    for item, column in mags.items.items():
        values = mags.columns[column]
        out[column] = values
        name = item.variable
        variable = source.dataset.catalog.magnitudes[name]
        sums, protected = agg.magnitudes[name], mags.sums[name]
        totals = np.stack([agg.magnitudes[replicate_name(name, r)].total for r in range(len(reps))])
        x_reps = magnitude_replicates(protected, sums.total, totals, agg.n, counts)
        x_noise = magnitude_noise_variance(prot, sums.total, sums.top, variable.bound)
        if item.kind == "sum":
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
            out[f"{column}_{suffix}"] = np.where(shown, rounding.apply(np.nan_to_num(arr)), np.nan)
    return out
