"""The nearest passing alternatives of a refused or partly withheld table.

DESIGN decision 13: a table refused (by the request limits, the universe-size
rule, the account's share of withheld cells, the privacy ledger or the
putative-risk ceiling) or published with cells withheld comes with up to
:data:`MAX_ALTERNATIVES` tables that pass, nearest first, each checked by a
dry run of the same admission (:mod:`tablesafe.rules._dry_run`).

**The steps.** An alternative is the request changed by a few steps, each one
of (cost in brackets):

* *fewer margins* (1): the inner cells and the grand total only, or the inner
  cells only (every inner cell stays; the account checks margins and
  universe totals for slivers, not first differences of inner cells);
* *coarser categories* (1): one dimension one level up the catalog's
  groupings and hierarchies (AGE -> AGE5 -> AGEGRP, REGION -> ZONE): a
  grouping of the same column each of whose categories holds whole
  categories of the finer one, and no level between them;
* *a wider universe*: one condition one level up (1: a region -> its zone,
  the codes of the conditions' parents) or dropped (2);
* *one dimension fewer* (3): the table's margin over that dimension as a
  table of its own (row and column percentages of a one-way table become
  percentages of the total).

**Nearest.** Alternatives are ordered by their summed cost, then by the kinds
of their steps in the order above (an alternative that keeps every cell of
the question before one that coarsens it, before one that changes the
population, before one that drops a variable), then by the most cells kept,
then by their request's text: the order is a function of the request and
the catalog. The search is best-first in that order: a candidate that passes
is kept and not changed further; one that is refused is changed one more step.
A passing alternative is one the dry run answers with no cell withheld; a
candidate that makes every change of a passing one, and more, is left out.

**Only steps that can help.** The request limits count every cell with every
margin, whatever the universe, so a table over ``max_cells`` takes coarser
categories or fewer dimensions; too many dimensions, fewer; a universe under
``min_universe_size``, a wider universe (:func:`useful_steps`). Every other
refusal, and a partly withheld table, may take any step.

**Bounded work.** A candidate the request limits refuse is refused before any
microdata or state is read and costs nothing; every other candidate costs one
dry run, at most ``alternatives_max_dry_runs`` per refusal
(``[datasets.rules]``), and at most :data:`MAX_CANDIDATES` candidates are
considered in all. The list is a function of the request, the catalog and what
the dry runs read: the published figures, stored decisions and ledger, and the
fixed protected figures the real requests would read.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tablesafe._errors import RefusedError, RequestError, TooManyCells, UserError
from tablesafe._request import Margins, Percent, TableRequest
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._variables import Code, Variable
from tablesafe.rules._dry_run import Verdict
from tablesafe.rules._rules import UNIVERSE_TOO_SMALL

__all__ = [
    "MAX_ALTERNATIVES",
    "MAX_CANDIDATES",
    "Alternative",
    "Search",
    "nearest",
    "request_body",
    "useful_steps",
]

#: The most alternatives offered.
MAX_ALTERNATIVES = 5
#: The most candidates one search considers (the request limits' checks included).
MAX_CANDIDATES = 400

#: Each kind of step: its cost and its place among steps of equal cost.
MARGINS, COARSER, WIDER, DROP_CONDITION, FEWER = "margins", "coarser", "wider", "universe", "fewer"
_COST = {MARGINS: 1, COARSER: 1, WIDER: 1, DROP_CONDITION: 2, FEWER: 3}
_RANK = {MARGINS: 0, COARSER: 1, WIDER: 2, DROP_CONDITION: 2, FEWER: 3}


@dataclass(frozen=True)
class Alternative:
    """A table that passes, near the one asked.

    Attributes:
        request: Its request.
        changes: What changes from the request asked, in words, one per step.
        kinds: The kind of each step (``margins``, ``coarser``, ``wider``,
            ``universe``, ``fewer``).
        distance: The summed cost of its steps (module docstring).
        verdict: Its dry run's answer.
    """

    request: TableRequest
    changes: tuple[str, ...]
    kinds: tuple[str, ...]
    distance: int
    verdict: Verdict

    def to_dict(self) -> dict[str, Any]:
        """The JSON form every door answers (docs/http-api.md, "Alternatives")."""
        out: dict[str, Any] = {
            "change": "; ".join(self.changes),
            "changes": list(self.changes),
            "kinds": list(self.kinds),
            "distance": self.distance,
            "request": request_body(self.request),
            "cells": self.verdict.cells,
        }
        if self.verdict.ledger is not None:
            out["ledger"] = self.verdict.ledger.to_dict()
        if self.verdict.undecided:
            out["undecided"] = list(self.verdict.undecided)
        return out


def request_body(request: TableRequest) -> dict[str, Any]:
    """A request as the API's JSON body (what ``TableBody`` reads back into it)."""
    statistic = ",".join([str(request.statistic), *(f"percent:{p}" for p in request.percentages)])
    body: dict[str, Any] = {
        "dimensions": list(request.dimensions),
        "universe": {name: list(codes) for name, codes in request.universe.items()},
        "statistic": statistic,
    }
    items = [*request.magnitudes, *request.quantiles]
    if items:
        body["magnitudes"] = items
    if request.margins != Margins.ALL:
        body["margins"] = str(request.margins)
    if request.rounding is not None:
        body["rounding"] = request.rounding
    if request.groupings:
        body["groupings"] = [g.to_dict() for g in request.groupings]
    if request.unit is not None:
        body["unit"] = str(request.unit)
    if request.replicates:
        body["se"] = True
    return body


@dataclass(frozen=True)
class Search:
    """What a search may do.

    Attributes:
        limits: The request limits alone (no microdata, no state): the error, or None.
        dry_run: One dry run of the whole admission, or None when the key's
            rate limit stops the search.
        max_dry_runs: The most dry runs (``alternatives_max_dry_runs``).
        kinds: The kinds of steps to take (:func:`useful_steps`).
    """

    limits: Callable[[TableRequest], UserError | None]
    dry_run: Callable[[TableRequest], Verdict | None]
    max_dry_runs: int
    kinds: frozenset[str] = frozenset(_COST)


def useful_steps(refusal: UserError | None) -> frozenset[str]:
    """The kinds of steps that can change a refusal's outcome (every kind for the others).

    The request limits count every cell with every margin, whatever the
    universe; the universe-size rule reads the universe alone; too many
    dimensions are mended by fewer.
    """
    if isinstance(refusal, TooManyCells):
        return frozenset({COARSER, FEWER})
    if isinstance(refusal, RequestError):
        return frozenset({FEWER})
    if type(refusal) is RefusedError and str(refusal).startswith(UNIVERSE_TOO_SMALL):
        return frozenset({WIDER, DROP_CONDITION})
    return frozenset(_COST)


@dataclass(frozen=True)
class _Node:
    request: TableRequest
    changes: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    distance: int = 0

    def then(self, request: TableRequest, change: str, kind: str) -> _Node:
        return _Node(
            request, (*self.changes, change), (*self.kinds, kind), self.distance + _COST[kind]
        )


@dataclass
class _Queue:
    heap: list[tuple[Any, ...]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    count: int = 0

    def push(self, node: _Node, cells: int) -> None:
        text = _text(node.request)
        if text in self.seen or self.count >= MAX_CANDIDATES:
            return
        self.seen.add(text)
        self.count += 1
        ranks = tuple(sorted(_RANK[k] for k in node.kinds))
        heapq.heappush(self.heap, (node.distance, ranks, -cells, text, node))

    def pop(self) -> _Node | None:
        return heapq.heappop(self.heap)[-1] if self.heap else None


def nearest(catalog: Catalog, request: TableRequest, search: Search) -> list[Alternative]:
    """Up to :data:`MAX_ALTERNATIVES` passing alternatives of ``request``, nearest first.

    Args:
        catalog: The dataset's catalog (its groupings and hierarchies).
        request: The request refused or partly withheld, checked (codes in the catalog's types).
        search: The dry runs and their bounds.
    """
    steps = _Steps(catalog, search.kinds)
    queue = _Queue()
    queue.seen.add(_text(request))
    start = _Node(request)
    for child in steps.around(start):
        queue.push(child, steps.cells(child.request))
    found: list[Alternative] = []
    runs = 0
    while len(found) < MAX_ALTERNATIVES:
        node = queue.pop()
        if node is None:
            break
        if any(set(a.changes) <= set(node.changes) for a in found):
            continue  # a passing alternative with more steps: never nearer
        if search.limits(node.request) is None:
            if runs >= search.max_dry_runs:
                break
            runs += 1
            verdict = search.dry_run(node.request)
            if verdict is None:
                break  # the key's rate limit: no more dry runs now
            if verdict.passes and not verdict.withheld:
                found.append(
                    Alternative(node.request, node.changes, node.kinds, node.distance, verdict)
                )
                continue
        for child in steps.around(node):
            queue.push(child, steps.cells(child.request))
    return found


def _text(request: TableRequest) -> str:
    return json.dumps(request_body(request), sort_keys=True, default=str)


class _Steps:
    """The one-step changes of a request along the catalog (module docstring)."""

    def __init__(self, catalog: Catalog, kinds: frozenset[str]) -> None:
        self.catalog = catalog
        self.kinds = kinds
        self.variables: Mapping[str, Variable] = catalog.variables

    def cells(self, request: TableRequest) -> int:
        """The request's cells with margins (0 where a name is not the catalog's)."""
        total = 1
        for name in request.dimensions:
            var = self.variables.get(name)
            if var is None:
                return 0
            total *= len(var.categories) + 1
        return total

    def around(self, node: _Node) -> Iterator[_Node]:
        """The request one step further, every kind the search may take."""
        steps = [*self._margins(node), *self._coarser(node), *self._universe(node)]
        yield from (n for n in [*steps, *self._fewer(node)] if n.kinds[-1] in self.kinds)

    def _margins(self, node: _Node) -> Iterator[_Node]:
        request = node.request
        if len(request.dimensions) > 1 and request.margins == Margins.ALL:
            yield from _made(
                node, request, {"margins": Margins.TOTAL}, MARGINS,
                "the inner cells and the grand total only (margins: total)",
            )  # fmt: skip
        if request.margins != Margins.NONE:
            yield from _made(
                node, request, {"margins": Margins.NONE},
                MARGINS, "the inner cells only, no margins (margins: none)",
            )  # fmt: skip

    def _coarser(self, node: _Node) -> Iterator[_Node]:
        request = node.request
        for i, name in enumerate(request.dimensions):
            var = self.variables.get(name)
            if var is None:
                continue
            for up in self.coarser(var):
                if up.name in request.dimensions:
                    continue
                dims = (*request.dimensions[:i], up.name, *request.dimensions[i + 1 :])
                yield from _made(
                    node, request, {"dimensions": dims}, COARSER,
                    f"{up.label} ({up.name}) instead of {var.label} ({var.name})",
                )  # fmt: skip

    def _universe(self, node: _Node) -> Iterator[_Node]:
        request = node.request
        for name, codes in request.universe.items():
            rest = {k: v for k, v in request.universe.items() if k != name}
            var = self.variables.get(name)
            if var is not None:
                for up in self.coarser(var):
                    if up.name in request.universe:
                        continue
                    parents = _parents(var, up, codes)
                    if parents is None or len(parents) == len(up.categories):
                        continue  # every category: the condition dropped (below)
                    words = (
                        f"the universe widened from {_condition(var, codes)} to "
                        f"{_condition(up, parents)}"
                    )
                    wider = {**rest, up.name: parents}
                    yield from _made(node, request, {"universe": wider}, WIDER, words)
            label = var.label if var is not None else name
            yield from _made(
                node, request, {"universe": rest}, DROP_CONDITION,
                f"without the universe's condition on {label} ({name})",
            )  # fmt: skip

    def _fewer(self, node: _Node) -> Iterator[_Node]:
        request = node.request
        if len(request.dimensions) < 2:
            return
        for name in request.dimensions:
            dims = tuple(d for d in request.dimensions if d != name)
            changes: dict[str, Any] = {"dimensions": dims}
            if len(dims) == 1 and any(p != Percent.TOTAL for p in request.percentages):
                changes["percentages"] = (Percent.TOTAL,)
            if not isinstance(request.margins, str):
                changes["margins"] = Margins.ALL
            var = self.variables.get(name)
            label = var.label if var is not None else name
            yield from _made(
                node, request, changes, FEWER,
                f"without the dimension {label} ({name}): the table's margin over it",
            )  # fmt: skip

    def coarser(self, var: Variable) -> list[Variable]:
        """The groupings one level above ``var`` (each holding whole categories of it), in order."""
        above = [v for v in self.variables.values() if _coarsens(var, v)]
        return [v for v in above if not any(_coarsens(w, v) for w in above if w is not v)]


def _made(
    node: _Node, request: TableRequest, changes: Mapping[str, Any], kind: str, words: str
) -> Iterator[_Node]:
    """The node for ``request`` with ``changes``, where the result is a valid request."""
    try:
        changed = replace(request, **changes)
    except UserError:
        return  # e.g. row percentages of a one-way table
    yield node.then(changed, words, kind)


def _sources(var: Variable) -> list[tuple[Code, ...]]:
    """Each category's source codes."""
    if var.members is None:
        return [(c.code,) for c in var.categories]
    return [tuple(m) for m in var.members]


def _parent_map(fine: Variable, coarse: Variable) -> dict[Code, Code] | None:
    """Each category of ``fine`` -> the category of ``coarse`` holding it whole, or None."""
    if fine.column != coarse.column or fine.name == coarse.name:
        return None
    owner = {
        s: c.code for c, ms in zip(coarse.categories, _sources(coarse), strict=True) for s in ms
    }
    out: dict[Code, Code] = {}
    for c, ms in zip(fine.categories, _sources(fine), strict=True):
        parents = {owner.get(s) for s in ms}
        if len(parents) != 1 or None in parents:
            return None
        out[c.code] = parents.pop()  # type: ignore[assignment]
    return out


def _coarsens(fine: Variable, coarse: Variable) -> bool:
    """Whether ``coarse`` is strictly coarser than ``fine`` (every category held whole)."""
    return len(coarse.categories) < len(fine.categories) and _parent_map(fine, coarse) is not None


def _parents(fine: Variable, coarse: Variable, codes: Sequence[Code]) -> tuple[Code, ...] | None:
    """The categories of ``coarse`` holding ``codes`` of ``fine``, in ``coarse``'s order."""
    parent = _parent_map(fine, coarse)
    if parent is None:
        return None
    wanted = {parent[c] for c in codes if c in parent}
    return tuple(c for c in coarse.codes if c in wanted)


def _condition(var: Variable, codes: Sequence[Code]) -> str:
    """A universe condition in words: the variable and its categories' labels."""
    labels = {c.code: c.label for c in var.categories}
    shown = [labels.get(c, str(c)) for c in codes[:4]]
    more = f" and {len(codes) - 4} more" if len(codes) > 4 else ""
    return f"{var.label} = {', '.join(shown)}{more}"
