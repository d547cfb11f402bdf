"""The precision rule: estimates too unreliable to publish are marked "np" or flagged.

The site sets ``max_rse`` (percent) and optionally ``min_effective_count`` in
``[datasets.rules]``. An estimate with a standard error (a weighted count, a
percentage of weighted counts, a weighted mean or sum) is *unreliable* when

* its relative standard error, the published standard error over the
  absolute published value, is above ``max_rse`` percent; or
* it has no standard error (the cell holds fewer protected records than the
  site's ``se_min_count``); or
* it rests on fewer protected records than ``min_effective_count`` (a
  percentage: its numerator's or its denominator's; a sum, mean or quantile
  of a variable with item non-response: its base's, the records that hold
  a value).

An estimate of 0 is never unreliable (there is nothing to be unsure of).
Unreliable estimates show ``"np"`` (with their standard errors and
intervals), or are published with an ``unreliable_STATISTIC`` flag.

Every input of the rule is a published figure (the rounded estimate and
its rounded standard error) or a protected count, so whether an estimate
is marked reveals no more than publishing it with its standard error
would (docs/decisions.md, "The precision rule"; tests/test_precision_rule.py
recomputes every mark from the flagged table's published figures).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tablesafe._protection_limits import UnreliableAction
from tablesafe._request import Percent
from tablesafe.mechanisms._precision import denominator_index
from tablesafe.output._published import estimate_companions
from tablesafe.output._table import ProtectedTable

if TYPE_CHECKING:
    # The rules are a pydantic model: applying them imports no pydantic.
    from tablesafe._settings import RuleSettings

__all__ = ["apply_precision_rule", "unreliable_cells"]


def unreliable_cells(
    value: npt.NDArray[np.float64],
    se: npt.NDArray[np.float64],
    counts: npt.NDArray[np.int64],
    computed: npt.NDArray[np.bool_],
    rules: RuleSettings,
) -> npt.NDArray[np.bool_]:
    """The cells of one estimate that the precision rule marks.

    Args:
        value: The published estimates (NaN where blank).
        se: Their published standard errors (NaN where not published).
        counts: The protected counts the estimates rest on.
        computed: The cells of the table.
        rules: The site's rules (``max_rse``, ``min_effective_count``).
    """
    assert rules.max_rse is not None
    shown = computed & ~np.isnan(value) & (value != 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rse = 100.0 * se / np.abs(value)
    bad = np.isnan(se) | (rse > rules.max_rse) | (counts < rules.min_effective_count)
    return np.asarray(shown & bad)


def _estimates(table: ProtectedTable) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """(column, published value, published se, protected counts behind it) of each estimate."""
    counts = table.base_counts
    assert counts is not None
    out = []
    if table.weighted is not None and table.se is not None:
        out.append(("weighted", table.weighted, table.se, counts))
    for name, values in (table.percentages or {}).items():
        se = (table.percentages or {}).get(f"{name}_se")
        if se is None or not name.startswith("percent_") or name.count("_") != 1:
            continue
        den = counts[denominator_index(Percent(name.split("_")[1]), counts.shape)]
        out.append((name, values, se, np.minimum(counts, den)))
    for name, values in (table.magnitudes or {}).items():
        se = (table.magnitudes or {}).get(f"{name}_se")
        if se is not None:
            # A mean of a variable with item non-response rests on its base: the
            # records that hold a value, not the cell's.
            out.append((name, values, se, (table.estimate_counts or {}).get(name, counts)))
    return out


def apply_precision_rule(
    table: ProtectedTable, rules: RuleSettings, *, publish_se: bool
) -> ProtectedTable:
    """Mark the unreliable estimates of ``table``; keep its standard errors only if asked.

    Args:
        table: A table built with standard errors (where the dataset has
            replicate weights, the builder computes them for the rule).
        rules: The site's rules.
        publish_se: Whether the request asked for standard errors and
            intervals (without, they decide the rule and are then dropped).
    """
    if rules.max_rse is None or table.base_counts is None:
        return table
    marks = {
        name: unreliable_cells(value, se, counts, table.computed, rules)
        for name, value, se, counts in _estimates(table)
    }
    if not marks:
        return table
    meta = dict(table.metadata)
    meta["precision_rule"] = {
        "max_rse": rules.max_rse,
        "min_effective_count": rules.min_effective_count,
        "action": str(rules.unreliable_action),
        "estimates": list(marks),
    }
    np_shown = rules.unreliable_action == UnreliableAction.NP
    out = replace(
        table,
        metadata=meta,
        unreliable=marks,
        unreliable_display="np" if np_shown else None,
    )
    return out if publish_se else _without_se(out)


def _without_se(table: ProtectedTable) -> ProtectedTable:
    """The table without standard errors and intervals (the request did not ask for them)."""
    companions = {c for name in (table.unreliable or {}) for c in estimate_companions(name)}

    def keep(columns: dict[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
        return (
            None if columns is None else {k: v for k, v in columns.items() if k not in companions}
        )

    meta = {
        k: v
        for k, v in table.metadata.items()
        if k
        not in (
            "se_min_count",
            "ci_lower_bound",
            "se_perturbation",
            "replicate_method",
            "replicate_coefficient",
        )
    }
    return replace(
        table,
        se=None,
        ci_low=None,
        ci_high=None,
        percentages=keep(dict(table.percentages or {})) if table.percentages is not None else None,
        magnitudes=keep(dict(table.magnitudes or {})) if table.magnitudes is not None else None,
        metadata=meta,
        replicate_weighted=None,
    )
