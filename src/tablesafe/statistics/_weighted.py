"""Weighted counts: the protected count's weighted figure, rounded, with its standard error.

A weighted figure is a function of the protected count, the cell's mean
weight and noise from the cell's keys (DESIGN decision 4); it is published
rounded as the site says (then as the request asks, never finer). Its
standard error adds the protection's variance to the replicates' sampling
variance (:mod:`tablesafe.mechanisms._precision`); its 95% interval is centred
on the published figure.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tablesafe.cells._aggregates import all_grouping_sets
from tablesafe.mechanisms._precision import weighted_noise_variance
from tablesafe.mechanisms._variance import confidence_interval, replicate_se
from tablesafe.statistics._statistic import Figures, PublishedStatistic, TableWork

__all__ = ["WeightedCounts", "complete_weighted"]


class WeightedCounts(PublishedStatistic):
    """Weighted counts (``weighted``), with ``se``, ``ci_low`` and ``ci_high`` where asked."""

    name = "weighted"

    def publish(self, work: TableWork, figures: Figures) -> None:
        """The table's own weighted figures (a base's are completed where it is made)."""
        if figures.variable is not None or figures.raw is None:
            return
        c = work.columns
        c.weighted, c.se, c.ci_low, c.ci_high = complete_weighted(work, figures, work.meta)
        c.replicate_weighted = figures.reps


def complete_weighted(
    work: TableWork, figures: Figures, meta: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """Round ``figures``' weighted figures (in place) and give their standard errors.

    Sets ``figures.weighted`` to the published (rounded) figures and
    ``figures.noise`` to the protection's variance of the unrounded ones.

    Returns:
        The rounded weighted figures, then the standard errors and the
        confidence interval's ends (None without a replicate design).
    """
    source, computed = work.source, work.computed
    prot = source.protection
    raw, reps, counts = figures.raw, figures.reps, figures.counts
    assert raw is not None
    noise = weighted_noise_variance(
        prot.mechanism,
        counts,
        raw,
        prot.weight_noise,
        source.additive,
        all_grouping_sets(counts.ndim),
    )
    se = ci_low = ci_high = None
    meta["weighted"] = _statement(work)
    published = np.where(computed, work.round(raw, additive=source.adds_up), 0.0)
    design = source.dataset.catalog.replicates
    if reps is not None and design is not None:
        raw_se = np.sqrt(replicate_se(raw, reps, design) ** 2 + noise)
        # Centred on the published figure, so that it lies inside its own interval
        # at any rounding; a weighted count is never negative: so is no end of it.
        raw_low, raw_high = confidence_interval(published, raw_se, lower_bound=0.0)
        # Standard errors only where enough records stand behind the
        # protected count: never for a cell that may hold no record.
        shown = computed & (counts >= prot.se_threshold())
        se, ci_low, ci_high = (
            np.where(shown, work.round(a, additive=False), np.nan)
            for a in (raw_se, raw_low, raw_high)
        )
        meta["replicate_method"] = str(design.method)
        meta["replicate_coefficient"] = design.coefficient
        meta["se_min_count"] = prot.se_threshold()
        meta["ci_lower_bound"] = 0.0
        meta["se_perturbation"] = prot.mechanism is not None
    figures.weighted, figures.noise = published, noise
    return published, se, ci_low, ci_high


def _statement(work: TableWork) -> dict[str, Any]:
    """What the metadata says about the weighted figures, in plain words."""
    prot = work.source.protection
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
