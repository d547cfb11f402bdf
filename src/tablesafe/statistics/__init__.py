"""The statistics a table publishes: one module each, listed once in :data:`STATISTICS`.

Each is a :class:`~tablesafe.statistics._statistic.PublishedStatistic`: what
it adds to the plan the engine runs, how it is protected from the protected
counts, its standard errors and intervals, the columns it publishes, and how
the small-cell rule treats them. The builder runs them in this order over
each group of protected figures (the table's own, then each base): counts,
weighted counts, percentages, bases, sums and means, quantiles.

A new statistic is one new module and one line here; a statistic whose
request items are new (``ratio:VAR:VAR``) also names their kinds, which
:func:`register` adds to what a request may ask for.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tablesafe._request import ITEM_KINDS
from tablesafe.statistics._bases import Bases
from tablesafe.statistics._counts import Counts
from tablesafe.statistics._magnitudes import SumsAndMeans
from tablesafe.statistics._percentages import Percentages
from tablesafe.statistics._quantiles import Quantiles
from tablesafe.statistics._source import Source
from tablesafe.statistics._statistic import Columns, Figures, PublishedStatistic, TableWork
from tablesafe.statistics._weighted import WeightedCounts

__all__ = [
    "STATISTICS",
    "Columns",
    "Figures",
    "PublishedStatistic",
    "Source",
    "TableWork",
    "register",
    "registered",
]

#: The registry: every statistic a table may publish, in the order the builder runs them.
STATISTICS: tuple[PublishedStatistic, ...] = (
    Counts(),
    WeightedCounts(),
    Percentages(),
    Bases(),
    SumsAndMeans(),
    Quantiles(),
)


def register(statistic: PublishedStatistic) -> tuple[PublishedStatistic, ...]:
    """The registry with ``statistic`` added last, its item kinds known to requests.

    Returns:
        The statistics to give :class:`~tablesafe.TableBuilder` (``statistics=``).
    """
    ITEM_KINDS.update(statistic.kinds)
    return (*STATISTICS, statistic)


@contextmanager
def registered(statistic: PublishedStatistic) -> Iterator[tuple[PublishedStatistic, ...]]:
    """:func:`register` for the ``with`` block only (its item kinds are forgotten after)."""
    before = dict(ITEM_KINDS)
    try:
        yield register(statistic)
    finally:
        ITEM_KINDS.clear()
        ITEM_KINDS.update(before)
