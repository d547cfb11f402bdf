"""Disclosure rules: limits on requests, small cells, and the sliver guard.

The rules are the data owner's (site configuration, :class:`RuleSettings`)
and are enforced before anything is returned:

* a table has at most ``max_dimensions`` dimensions and ``max_cells`` cells
  (margins included), checked before any microdata is read;
* the universe must hold at least ``min_universe_size`` sample records,
  judged on the universe's protected count (its record set perturbed like a
  cell, one figure per record set whatever the table:
  ``TableBuilder.protected_universe_size``), so a refusal reveals no more
  than publishing that count would;
* protected counts below ``min_cell_size`` (but not zero) are suppressed or
  shown as ``"<k"``; the rule looks at protected counts only, so applying it
  reveals nothing beyond the protected table itself;
* the **sliver guard** (seed 000 Section 2.1; seed 004 Section 1): a
  universe that differs from one already answered by fewer than
  ``sliver_min_difference`` records, but at least one, is refused, since
  differencing the two tables would isolate those records. "Already
  answered" means for any key of the dataset (``sliver_scope = "dataset"``,
  the default: two keys, or an anonymous user and a key, cannot split the
  attack) or for the same key (``"key"``);
* the **cell-level sliver guard** (:func:`cell_sliver_guard`): every record
  set a table breaks down by a variable (its universe, and each category of
  each of its dimensions, the slice broken down by the other dimensions) is
  compared in the same way with the record sets already published; a pair
  that differs by 1 .. m-1 records and shares a breakdown variable is a
  sliver made by a dimension or a grouping, and the request is refused.
  Pairs whose difference the tables publish anyway (a slice of a universe
  equal to one already published, along the new table's own dimension)
  are not slivers. See docs/attacks.md for what a refusal reveals.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from tablesafe._aggregates import CellAggregates
from tablesafe._catalog import Catalog, Code
from tablesafe._errors import RefusedError
from tablesafe._request import TableRequest, TabulationPlan
from tablesafe._settings import RuleSettings
from tablesafe._table import ProtectedTable

__all__ = [
    "PublishedSet",
    "UniverseStore",
    "apply_small_cell_rule",
    "cell_sliver_guard",
    "check_request_limits",
    "check_universe_size",
    "intersect_universes",
    "published_sets",
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


def _candidates(
    store: Any, key_id: str, dataset: str, low: int, high: int, scope: str
) -> list[tuple[dict[str, list[Any]], int, str, bool]]:
    """Answered universes in a size range: (universe, size, fingerprint, asked by this key)."""
    if scope == "dataset" and hasattr(store, "answered_universes_all"):
        return [
            (u, n, fp, k == key_id)
            for u, n, fp, k in store.answered_universes_all(dataset, low, high)
        ]
    return [(u, n, fp, True) for u, n, fp in store.answered_universes(key_id, dataset, low, high)]


def _check_candidates(n: int, rules: RuleSettings) -> None:
    """Refuse a request with more sliver candidates than ``sliver_max_candidates``.

    Each candidate costs one count of the microdata, so the number is capped.
    Past the cap the request is refused, never answered unchecked (that would
    let a sliver through). The refusal names the cap (a published setting),
    no count; what it reveals is in docs/attacks.md.
    """
    cap = getattr(rules, "sliver_max_candidates", 2000)
    if n > cap:
        raise RefusedError(
            "this table would have to be compared with more earlier tables than the sliver "
            f"guard checks for one request (at most {cap}); ask for coarser categories, "
            "fewer dimensions or a different universe"
        )


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
    scope = getattr(rules, "sliver_scope", "key")
    candidates = [
        c
        for c in _candidates(store, key_id, dataset, size - m + 1, size + m - 1, scope)
        if c[2] != fingerprint
    ]
    _check_candidates(len(candidates), rules)
    for old, old_size, _old_fp, mine in candidates:
        both = int(count(old, universe))
        diff = size + old_size - 2 * both
        if 0 < diff < m:
            if mine:
                shown = " and ".join(f"{k} in {v}" for k, v in old.items()) or "all records"
                earlier = f"one you already received ({shown})"
            else:
                # Another user's request is not shown to this one.
                earlier = "one already published from this dataset"
            raise RefusedError(
                f"this universe differs by fewer than {m} records from {earlier}; "
                "differencing the two tables could reveal those records. Ask for a universe "
                "that differs more, or for the earlier universe itself"
            )


@dataclass(frozen=True)
class PublishedSet:
    """A record set a table breaks down: its universe, or one slice of it.

    Attributes:
        definition: The set as a universe (variable name -> codes).
        breakdown: The microdata columns the table breaks it down by.
        size: Its sample size (a true count: the audit store is the owner's).
        fingerprint: A hash of its size and record-key sum.
        parent: For a slice, the fingerprint of the universe it slices; ``""``
            for a universe.
        label: How to name it to the user who asked for it.
    """

    definition: Mapping[str, Sequence[Code]]
    breakdown: tuple[str, ...]
    size: int
    fingerprint: str
    parent: str = ""
    label: str = ""


def _fingerprint(dataset: str, n: int, key: int) -> str:
    return hashlib.sha256(f"{dataset}:{n}:{key}".encode()).hexdigest()


def published_sets(
    dataset: str,
    catalog: Catalog,
    universe: Mapping[str, Sequence[Code]],
    plan: TabulationPlan,
    agg: CellAggregates,
) -> list[PublishedSet]:
    """The record sets a table breaks down: its universe, and each category of each dimension.

    Sizes and key sums come from the table's own margins (every grouping set
    is tabulated), so no extra query is needed. A one-dimensional table
    breaks down only its universe.

    Args:
        dataset: The dataset's name (part of the fingerprints).
        catalog: The catalog.
        universe: The request's universe on catalog variables.
        plan: The bound request.
        agg: Its aggregates with every grouping set.
    """
    dims = plan.dimensions
    totals = tuple(s - 1 for s in agg.shape)
    columns = tuple(d.column for d in dims)
    whole = universe_fingerprint(dataset, agg)
    out = [
        PublishedSet(
            {k: list(v) for k, v in universe.items()},
            columns,
            int(agg.n[totals]),
            whole,
            "",
            "this table's universe",
        )
    ]
    if len(dims) < 2:
        return out
    source = {v.column: v.name for v in catalog.source_variables}
    for i, d in enumerate(dims):
        rest = tuple(c for j, c in enumerate(columns) if j != i)
        name = source[d.column]
        for j, (code, members) in enumerate(zip(d.codes, d.members, strict=True)):
            idx = tuple(j if a == i else totals[a] for a in range(len(dims)))
            n = int(agg.n[idx])
            definition = {k: list(v) for k, v in universe.items()}
            if name in definition:
                coerce = catalog.variable(name).coerce
                allowed = {coerce(c) for c in definition[name]}
                definition[name] = [m for m in members if m in allowed]
            else:
                definition[name] = list(members)
            out.append(
                PublishedSet(
                    definition,
                    rest,
                    n,
                    _fingerprint(dataset, n, int(agg.cell_key[idx])),
                    whole,
                    f"the records with {d.name} = {code} in this table's universe",
                )
            )
    return out


def cell_sliver_guard(
    *,
    store: Any,
    key_id: str,
    dataset: str,
    sets: Sequence[PublishedSet],
    rules: RuleSettings,
    count: Any,
) -> None:
    """Refuse a table whose record sets differ from published ones by 1 .. m-1 records.

    For each record set ``X`` the new table breaks down (:func:`published_sets`)
    and each one ``Y`` already published (any key of the dataset, or the same
    key, as ``sliver_scope`` says) that shares a breakdown variable, whose size
    is within ``m`` of ``X``'s and that is not ``X`` itself,
    ``|X - Y| + |Y - X| = |X| + |Y| - 2 |X and Y|``: one count of the
    conjunction per candidate. Two universes are the universe guard's
    (:func:`sliver_guard`); a slice of a universe equal to an earlier
    published one, along the new table's own dimension, differs from it by
    the table's other slices (published anyway) and is not a sliver.
    Record sets smaller than ``m`` are small cells (the mechanism and the
    small-cell rule protect them), not slivers.

    Args:
        store: The audit log (``published_sets_near``).
        key_id: The API key asking.
        dataset: The dataset.
        sets: The new table's record sets.
        rules: The dataset's rules.
        count: ``count(a, b) -> int``, the size of the conjunction of two universes.

    Raises:
        RefusedError: naming the new table's record set, never a count.
    """
    m = rules.sliver_min_difference
    if m <= 0 or not getattr(rules, "sliver_cells", True):
        return
    only = key_id if getattr(rules, "sliver_scope", "key") == "key" else None
    pairs: list[tuple[PublishedSet, PublishedSet, bool]] = []
    for x in sets:
        if x.size < m:
            continue
        for y, mine in store.published_sets_near(
            dataset, x.size - m + 1, x.size + m - 1, only, key_id
        ):
            if y.size < m or y.fingerprint == x.fingerprint:
                continue
            if not x.parent and not y.parent:
                continue  # two universes: sliver_guard's
            if not set(x.breakdown) & set(y.breakdown):
                continue
            if x.parent == y.fingerprint or y.parent == x.fingerprint:
                continue  # a slice along a dimension of a universe published itself
            pairs.append((x, y, mine))
    _check_candidates(len(pairs), rules)
    for x, y, mine in pairs:
        both = int(count(x.definition, y.definition))
        diff = x.size + y.size - 2 * both
        if 0 < diff < m:
            earlier = (
                "a table you already received"
                if mine
                else ("a table already published from this dataset")
            )
            raise RefusedError(
                f"{x.label} differ by fewer than {m} records from a group of records "
                f"broken down in {earlier}; differencing the two could reveal those "
                "records. Ask for coarser categories or a universe that differs more"
            )
