"""Percentages: row, column or total shares of the table's own protected figures.

Each percentage divides two protected figures of the table before they are
rounded (the protected counts, or the unrounded protected weighted figures)
and is rounded once, as itself (docs/decisions.md, "Ratios of protected
figures"). Its standard error (where the table has replicates) recomputes
the ratio on the replicate figures and adds the perturbation's variance; its
interval is centred on the published percentage; both counts behind it must
reach the site's threshold for standard errors. The small-cell rule leaves a
percentage blank where its cell or its denominator is hidden.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tablesafe._request import Percent, TableRequest
from tablesafe.mechanisms._precision import (
    PERCENT_ROUNDING,
    denominator_index,
    percent_of,
    percent_precision,
)
from tablesafe.mechanisms._variance import confidence_interval
from tablesafe.output._table import ProtectedTable
from tablesafe.statistics._statistic import Array, Figures, Mask, PublishedStatistic, TableWork

__all__ = ["Percentages", "shares", "shares_meta"]

#: What a percentage's companion columns end with (after ``percent_KIND``).
_COMPANIONS = ("", "_se", "_ci_low", "_ci_high")


class Percentages(PublishedStatistic):
    """``percent_row``, ``percent_column``, ``percent_total``, each with its SE and interval."""

    name = "percentages"

    def publish(self, work: TableWork, figures: Figures) -> None:
        """Percentages of the table's own figures (a base has none)."""
        if figures.variable is not None or not work.request.percentages:
            return
        computed, counts = work.computed, figures.counts
        raw, reps, noise = figures.raw, figures.reps, figures.noise
        values = raw if raw is not None else counts.astype(np.float64)
        design = work.source.dataset.catalog.replicates
        out: dict[str, Array] = {}
        shared = shares(values, work.request, computed)
        for kind, share in zip(work.request.percentages, shared, strict=True):
            name = kind.column_name
            out[name] = share
            if reps is None or design is None or raw is None or noise is None:
                continue
            se, low, high = _percent_se(work, kind, figures, np.nan_to_num(out[name]))
            out[f"{name}_se"], out[f"{name}_ci_low"], out[f"{name}_ci_high"] = se, low, high
        meta = shares_meta(of_weighted=figures.weighted is not None)
        if reps is not None and design is not None:
            meta["ci_upper_bound"] = 100 if work.source.additive else None
        work.meta["percentages"] = meta
        work.columns.percentages = out

    def small_cells(self, table: ProtectedTable, small: Mask) -> dict[str, Any]:
        """Percentages blank where their cell or their denominator is suppressed.

        A shown cell's percentage of a hidden total would give the total away
        (the cell over its percentage), so it is left blank with its standard
        error and interval.
        """
        if table.percentages is None:
            return {}
        out = {}
        for kind in table.request.percentages:
            hidden = small | small[denominator_index(kind, small.shape)]
            for suffix in _COMPANIONS:
                name = kind.column_name + suffix
                if name in table.percentages:
                    out[name] = np.where(hidden, np.nan, table.percentages[name])
        order = list(table.percentages)
        return {"percentages": {name: out.get(name, table.percentages[name]) for name in order}}


def shares(values: Array, request: TableRequest, computed: Mask) -> list[Array]:
    """Each percentage ``request`` asks for, of ``values``, in its order, rounded once.

    Args:
        values: The protected figures divided (unrounded: counts, or weighted figures).
        request: The request (its ``percentages``).
        computed: The table's cells (the rest is NaN).
    """
    return [
        np.where(computed, PERCENT_ROUNDING.apply(percent_of(values, kind)), np.nan)
        for kind in request.percentages
    ]


def shares_meta(*, of_weighted: bool) -> dict[str, Any]:
    """What the table's metadata says of its percentages: what they divide, their rounding."""
    return {"of": "weighted" if of_weighted else "count", "rounding": str(PERCENT_ROUNDING)}


def _percent_se(
    work: TableWork, kind: Percent, figures: Figures, published: Array
) -> tuple[Array, Array, Array]:
    """A percentage's standard error and 95% interval (within 0 to 100), rounded.

    Args:
        work: The table under way.
        kind: The percentage.
        figures: The table's protected figures (unrounded weighted figures,
            their replicate figures and their perturbation variance).
        published: The published percentages (the intervals' centres).
    """
    source, computed, counts = work.source, work.computed, figures.counts
    raw, reps, noise = figures.raw, figures.reps, figures.noise
    design = source.dataset.catalog.replicates
    assert design is not None and raw is not None and reps is not None and noise is not None
    sampling, perturbation = percent_precision(
        kind, raw, reps, noise, design, additive=source.additive
    )
    se = np.sqrt(sampling + perturbation)
    low, high = confidence_interval(published, se, lower_bound=0.0)
    threshold = source.protection.se_threshold()
    shown = (
        computed
        & (counts >= threshold)
        & (counts[denominator_index(kind, counts.shape)] >= threshold)
        & ~np.isnan(se)
    )
    # A share of a total that adds it up is at most 100%; an independently
    # protected total may be below one of its cells, so its share may not.
    if source.additive:
        high = np.minimum(high, 100.0)
    se, low, high = (
        np.where(shown, PERCENT_ROUNDING.apply(np.nan_to_num(a)), np.nan) for a in (se, low, high)
    )
    return se, low, high
