"""Disclosure rules: limits on requests, small cells, and the sliver guard.

The rules are the data owner's (site configuration, :class:`RuleSettings`)
and are enforced before anything is returned:

* a table has at most ``max_dimensions`` dimensions and ``max_cells`` cells
  (margins included), checked before any microdata is read;
* the universe must hold at least ``min_universe_size`` sample records
  (the true size: refusing a small universe is the point of the rule);
* protected counts below ``min_cell_size`` (but not zero) are suppressed or
  shown as ``"<k"``; the rule looks at protected counts only, so applying it
  reveals nothing beyond the protected table itself;
* the **sliver guard** (seed 000 Section 2.1; seed 004 Section 1): a
  universe that differs from one already answered for the same API key by
  fewer than ``sliver_min_difference`` records, but at least one, is
  refused, since differencing the two tables would isolate those records.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from tablesafe._aggregates import CellAggregates
from tablesafe._catalog import Catalog, Code
from tablesafe._errors import RefusedError
from tablesafe._request import TableRequest
from tablesafe._settings import RuleSettings
from tablesafe._table import ProtectedTable

__all__ = [
    "UniverseStore",
    "apply_small_cell_rule",
    "check_request_limits",
    "check_universe_size",
    "intersect_universes",
    "sliver_guard",
    "universe_fingerprint",
]


def check_request_limits(request: TableRequest, catalog: Catalog, rules: RuleSettings) -> None:
    """Refuse a request with too many dimensions or cells (before reading microdata).

    Raises:
        RequestError: too many dimensions (a request the site never allows).
        RefusedError: too many cells.
    """
    plan = request.bind(catalog, max_dimensions=rules.max_dimensions)
    cells = math.prod(plan.shape)
    if cells > rules.max_cells:
        raise RefusedError(
            f"the table would have {cells:,} cells (with margins); this dataset allows at most "
            f"{rules.max_cells:,}: use fewer or coarser variables (groupings) or a narrower "
            "universe on a dimension"
        )


def check_universe_size(n: int, rules: RuleSettings) -> None:
    """Refuse a universe with fewer sample records than the rules allow."""
    if n < rules.min_universe_size:
        raise RefusedError(
            f"the universe is too small: it must hold at least {rules.min_universe_size} "
            "sample records; widen it (fewer or broader conditions)"
        )


def apply_small_cell_rule(table: ProtectedTable, rules: RuleSettings) -> ProtectedTable:
    """Suppress (or show as ``"<k"``) protected counts below ``min_cell_size``."""
    k = rules.min_cell_size
    if k <= 0 or table.counts is None:
        return table
    small = table.computed & (table.counts > 0) & (table.counts < k)
    display = None if rules.small_cell_action == "suppress" else f"<{k}"
    meta = dict(table.metadata)
    meta["small_cell_rule"] = {"min_cell_size": k, "action": rules.small_cell_action}
    return replace(table, suppressed=small, metadata=meta, suppressed_display=display)


def universe_fingerprint(dataset: str, agg: CellAggregates) -> str:
    """A fingerprint of the universe's record set: a hash of its size and key sum."""
    total = tuple(s - 1 for s in agg.shape)
    payload = f"{dataset}:{int(agg.n[total])}:{int(agg.cell_key[total])}".encode()
    return hashlib.sha256(payload).hexdigest()


def intersect_universes(
    catalog: Catalog, a: Mapping[str, Sequence[Code]], b: Mapping[str, Sequence[Code]]
) -> dict[str, list[Code]]:
    """The conjunction of two universes, as one universe mapping."""
    out: dict[str, list[Code]] = {}
    for universe in (a, b):
        for name, codes in universe.items():
            var = catalog.variable(name)
            coerced = [var.coerce(c) for c in codes]
            if name in out:
                out[name] = [c for c in out[name] if c in coerced]
            else:
                out[name] = coerced
    return out


class UniverseStore(Protocol):
    """Where answered universes are remembered (the audit log)."""

    def answered_universes(
        self, key_id: str, dataset: str, size_low: int, size_high: int
    ) -> list[tuple[dict[str, list[Any]], int, str]]:
        """Universes answered for a key with sizes in a range."""
        ...


def sliver_guard(
    *,
    store: UniverseStore,
    key_id: str,
    dataset: str,
    universe: Mapping[str, Sequence[Code]],
    size: int,
    fingerprint: str,
    rules: RuleSettings,
    count: Any,
) -> None:
    """Refuse a universe that differs from an answered one by 1 .. m-1 records.

    Two universes U and V differ by ``|U| + |V| - 2 |U ∩ V|`` records, and
    ``|U ∩ V|`` is the size of the conjunction of their conditions, so one
    count per candidate is enough: no record is stored. Only universes whose
    sizes differ by less than ``m`` can differ by less than ``m`` records, so
    the sizes stored with the fingerprints pick the candidates.

    Args:
        store: The store of answered universes.
        key_id: The API key asking.
        dataset: The dataset.
        universe: The new universe (variable name -> codes).
        size: Its sample size.
        fingerprint: Its fingerprint (:func:`universe_fingerprint`).
        rules: The dataset's rules.
        count: ``count(universe) -> int``, the sample size of a universe.

    Raises:
        RefusedError: if the new universe is a sliver away from an answered one.
    """
    m = rules.sliver_min_difference
    if m <= 0:
        return
    for old, old_size, old_fp in store.answered_universes(
        key_id, dataset, size - m + 1, size + m - 1
    ):
        if old_fp == fingerprint:
            continue
        both = int(count(old, universe))
        diff = size + old_size - 2 * both
        if 0 < diff < m:
            shown = " and ".join(f"{k} in {v}" for k, v in old.items()) or "all records"
            raise RefusedError(
                f"this universe differs by fewer than {m} records from one you already "
                f"received ({shown}); differencing the two tables could reveal those records. "
                "Ask for a universe that differs more, or for the earlier universe itself"
            )
