"""Disclosure rules: limits on requests, the universe size, small cells.

The rules are the data owner's (site configuration, :class:`RuleSettings`)
and are enforced before anything is returned:

* a table has at most ``max_dimensions`` dimensions and ``max_cells`` cells
  (margins included), checked before any microdata is read;
* the universe must hold at least ``min_universe_size`` sample records,
  judged on the table's own protected total (:func:`table_universe_size`), a
  function of figures the table publishes, so a refusal reveals no more than
  publishing the table would and reads no figure the privacy ledger does not
  count for the table;
* protected counts below ``min_cell_size`` (but not zero) are suppressed or
  shown as ``"<k"``; the rule looks at protected counts only, so applying it
  reveals nothing beyond the protected table itself;
* the **account of published figures** (:mod:`tablesafe.rules._account`,
  admitted by :mod:`tablesafe.rules._admission` in the state store's
  transaction): a table's figure that, with what was published, would make a
  small block of records derivable by difference, or measure one again, is
  withheld; a table with too many withheld cells is refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tablesafe._errors import InternalError, RefusedError, TooManyCells
from tablesafe._protection_limits import SmallCellAction
from tablesafe._request import TableRequest
from tablesafe.catalog._catalog import Catalog
from tablesafe.cells._plan import TabulationPlan
from tablesafe.output._table import ProtectedTable
from tablesafe.statistics import STATISTICS, PublishedStatistic

if TYPE_CHECKING:
    # The rules are a pydantic model: applying them imports no pydantic.
    from tablesafe._settings import RuleSettings

__all__ = [
    "UNIVERSE_TOO_SMALL",
    "apply_small_cell_rule",
    "check_plan_limits",
    "check_request_limits",
    "check_universe_size",
    "table_universe_size",
]


def check_request_limits(request: TableRequest, catalog: Catalog, rules: RuleSettings) -> None:
    """Refuse a request with too many dimensions or cells (before reading microdata).

    Raises:
        RequestError: too many dimensions (a request the site never allows).
        TooManyCells: too many cells (a RefusedError).
    """
    check_plan_limits(request.bind(catalog, max_dimensions=rules.max_dimensions), rules)


def check_plan_limits(plan: TabulationPlan, rules: RuleSettings) -> None:
    """Refuse a bound table with too many cells (margins included).

    Raises:
        TooManyCells: too many cells (a RefusedError).
    """
    cells = math.prod(plan.shape)
    if cells > rules.max_cells:
        raise TooManyCells(
            f"the table would have {cells:,} cells (with margins); this dataset allows at most "
            f"{rules.max_cells:,}: use fewer or coarser variables (groupings) or a narrower "
            "universe on a dimension"
        )


def table_universe_size(table: ProtectedTable) -> int:
    """The universe's size as the table states it: its protected total.

    The total cell's protected count where the table computes it, else the
    sum of its computed inner cells' protected counts (under ``aggregate``
    additivity and record-level protection the two are equal: the total is
    that sum). Either is post-processing of the table's own noisy figures,
    the ones the privacy ledger counts for it (docs/decisions.md, "Universe-size
    rule"), so deciding on it spends nothing more and a refusal reveals no more
    than publishing the table would. The same request gives the same figures,
    so the same decision.
    """
    # Protected counts, whether the table shows them or only weighted figures.
    counts = table.base_counts if table.base_counts is not None else table.counts
    if counts is None:
        raise InternalError("a protected table without protected counts")
    total = (-1,) * counts.ndim
    if table.computed[total]:
        return int(counts[total])
    inner = tuple(slice(0, s - 1) for s in counts.shape)
    return int(counts[inner][table.computed[inner]].sum())


#: How the universe-size rule's refusal starts (the nearest alternatives read it).
UNIVERSE_TOO_SMALL = "the universe is too small"


def check_universe_size(n: int, rules: RuleSettings) -> None:
    """Refuse a universe whose size as the table states it is below the rules' minimum."""
    if n < rules.min_universe_size:
        raise RefusedError(
            f"{UNIVERSE_TOO_SMALL}: it must hold at least {rules.min_universe_size} "
            "sample records; widen it (fewer or broader conditions)"
        )


def apply_small_cell_rule(
    table: ProtectedTable,
    rules: RuleSettings,
    statistics: Sequence[PublishedStatistic] = STATISTICS,
) -> ProtectedTable:
    """Suppress (or show as ``"<k"``) protected counts below ``min_cell_size``.

    Each statistic says what it hides with them
    (:meth:`~tablesafe.statistics.PublishedStatistic.small_cells`: a
    percentage of a hidden cell or of a hidden denominator).
    """
    k = rules.min_cell_size
    if k <= 0 or table.counts is None:
        return table
    small = table.computed & (table.counts > 0) & (table.counts < k)
    display = None if rules.small_cell_action == SmallCellAction.SUPPRESS else f"<{k}"
    meta = dict(table.metadata)
    meta["small_cell_rule"] = {"min_cell_size": k, "action": str(rules.small_cell_action)}
    hidden: dict[str, Any] = {}
    for statistic in statistics:
        hidden.update(statistic.small_cells(table, small))
    return replace(table, suppressed=small, metadata=meta, suppressed_display=display, **hidden)
