"""The account of every published figure, and what a new table may add to it.

DESIGN decision 10: every figure a table publishes (inner cell, margin,
merged group, hierarchy level, universe total) is recorded as the records it
covers, its canonical definition (:mod:`tablesafe.catalog._definitions`), in
the state store's ``publications`` table, per microdata identity. A new
table's figures are checked against all of them, and written, in one
transaction of the state store.

**What a user can combine.** Figures whose definitions agree on every column
but one, ``c``, form a *family* (:mod:`tablesafe.rules._family`): any
combination of them is published by difference. For every family a new
table's figures join, they are taken in order (inner cells, then margins,
finer first) and each new figure ``X`` is *unsafe* when:

1. **it makes a small block derivable**: with ``X``, a block of codes of ``c``
   (within the family's context) becomes a combination of published figures
   that neither the published figures nor the table alone give (a set minus a
   union of published parts: a merged group minus an inner cell, a universe
   minus a narrower one, a parent minus its children); or
2. **it measures a small block again**: ``X`` is already a combination of
   published figures (a merged group of published categories, a hierarchy
   level of published children, a merged universe), so ``X`` minus them is a
   fresh measurement of every derivable block inside it; averaging many such
   measurements gives a count exactly.

A block is *small* when its **protected count** (what the site would publish
for it as an inner cell, :meth:`tablesafe.Protection.inner_counts`) is one
the mechanism could give a block of fewer than ``m`` records
(``sliver_min_difference``): below ``m`` plus the most the mechanism adds to
such a count (:meth:`tablesafe.Protection.reach_above`), 0 included; a block
the catalog's declared zeros say holds no record is not small. The decision
reads definitions (the request, the catalog, what was published) and
protected counts, never a true count, so a withheld cell tells no more than
the protected count of the block would, and an empty difference is treated
as a small one.

**What a table publishes of itself is not a sliver.** A table's own figures
combine exactly under additive protection (its margins are sums of its inner
cells); under independent perturbation a margin is a measurement of its own
and is checked like any other. A published figure that is the whole family's
context (the records a new table breaks down by ``c``, a figure the table
publishes again as its margin) is left out of the family: breaking a
published figure down by a variable is ordinary use, and each breakdown adds
one difference (docs/attacks.md, "What remains").

**Repeats.** A figure already published under the same canonical definition
is not new; a request answered once is answered again with the same cells
withheld (its decision is stored with it).
"""

from __future__ import annotations

import functools
import os
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt
from cachetools import LRUCache

from tablesafe.catalog._definitions import (
    DIGEST_MODULUS,
    Definition,
    DefinitionSpace,
    cell_definitions,
    condition_digest,
    definition_digest,
    definition_text,
    domain_text,
    mark_digest,
    parse_definition,
    signed64,
)
from tablesafe.catalog._variables import Code
from tablesafe.cells._aggregates import CellAggregates
from tablesafe.cells._plan import TabulationPlan
from tablesafe.rules._family import (
    Atoms,
    Name,
    Span,
    Vector,
    new,
    proportional,
    published,
)

__all__ = [
    "Account",
    "Figure",
    "PublishedRow",
    "family_key",
    "table_figures",
    "unsafe_figures",
    "withheld_cells",
]

_KEY_MODULUS = 2**32
#: Families whose span the account keeps between checks (the most recently used).
_SPANS_KEPT = 20_000
_DEBUG = bool(os.environ.get("TABLESAFE_DEBUG_ACCOUNT"))


@dataclass(frozen=True, eq=False)
class Figure:
    """One figure a new table would publish, as the account sees it (the owner's view).

    Attributes:
        index: Its flat index in the table's extended arrays.
        domain: What it counts (:func:`~tablesafe.catalog._definitions.domain_text`).
        definition: Its canonical definition.
        inner: Whether it is an inner cell.
        order: Its place when a family is checked (inner cells first, finer margins next).
    """

    index: int
    domain: str
    definition: Definition
    inner: bool
    order: tuple[int, int, int]

    @functools.cached_property
    def text(self) -> str:
        """What the account stores: the domain, then the definition's text."""
        return self.domain + definition_text(self.definition)

    @functools.cached_property
    def digest(self) -> int:
        """The account's key for it (:func:`~tablesafe.catalog._definitions.definition_digest`)."""
        return definition_digest(self.domain, self.definition)


def table_figures(
    plan: TabulationPlan,
    agg: CellAggregates,
    space: DefinitionSpace,
    cells: npt.NDArray[np.bool_],
) -> list[Figure]:
    """The figures a table publishes: every cell of ``cells`` some record could be in.

    Args:
        plan: The table's plan.
        agg: Its exact aggregates (every grouping set).
        space: The catalog's definition space.
        cells: The cells it publishes (computed, not structural zeros).
    """
    coords = np.nonzero(cells)
    found = cell_definitions(
        space,
        [(d.column, d.members) for d in plan.dimensions],
        plan.universe,
        tuple(c.tolist() for c in coords),
    )
    domain = domain_text(plan.unit, plan.present)
    shape = agg.shape
    flat = np.ravel_multi_index(coords, shape)
    totals = [s - 1 for s in shape]
    out = []
    for at, definition, index in zip(zip(*coords, strict=True), found, flat.tolist(), strict=True):
        if definition is None:
            continue
        free = sum(1 for i, j in enumerate(at) if j == totals[i])
        out.append(
            Figure(
                index=index,
                domain=domain,
                definition=definition,
                inner=free == 0,
                order=(0 if free == 0 else 1, free, index),
            )
        )
    return out


def family_key(whole: int, column: str) -> int:
    """The key of the family along ``column`` whose context has digest ``whole`` (signed)."""
    return signed64(whole + mark_digest("column:" + column))


def _split(text: str) -> tuple[str, Definition]:
    """A stored text as its domain and its definition."""
    at = text.index("[")
    return text[:at], parse_definition(text[at:])


@dataclass(frozen=True)
class PublishedRow:
    """One figure as the state store keeps it: the account's memory.

    Attributes:
        digest: :attr:`Figure.digest`.
        text: :attr:`Figure.text`.
    """

    digest: int
    text: str


class Account:
    """The figures published from one microdata identity, in this process's memory.

    Mirrors the state store's ``publications`` rows (read in order by id; the
    store's transaction reads what other processes committed first). Each
    figure is kept as its digest, count and cell key, and registered in the
    families of the columns it names (a family's whole context is found by
    its digest).

    A million figures are held in arrays and dictionaries of ints, which the
    garbage collector never visits: a full collection does not grow with the
    account (docs/benchmarks.md, "The account of every published figure").

    Attributes:
        last_id: The id of the last row read.
    """

    def __init__(self) -> None:
        self.last_id = 0
        self._rows: dict[int, int] = {}
        self._digests = array("q")
        # Each family's members as a list linked through arrays: family key -> its
        # last entry; per entry the row, its code set and the family's entry before.
        self._last: dict[int, int] = {}
        self._entry_row = array("q")
        self._entry_codes = array("q")
        self._entry_before = array("q")
        self._entries: dict[int, int] = {}  # family key -> its number of entries
        self._codesets: list[frozenset[Code]] = []
        self._codeset_ids: dict[frozenset[Code], int] = {}
        self._counts: dict[str, int] = {}
        self._spans: LRUCache[int, tuple[int, Span, Atoms]] = LRUCache(maxsize=_SPANS_KEPT)

    def __len__(self) -> int:
        return len(self._digests)

    def __contains__(self, digest: int) -> bool:
        return digest in self._rows

    def add(self, rows: Iterable[tuple[int, PublishedRow]]) -> None:
        """Add rows read from the store (id, row), in id order; a digest already held is skipped."""
        for row_id, row in rows:
            self.last_id = max(self.last_id, row_id)
            if row.digest not in self._rows:
                self._hold(row.digest, _split(row.text)[1])

    def add_published(self, figures: Iterable[Figure]) -> None:
        """Add the figures this process has just committed, in the order it wrote them.

        Their rows took the ids after every row read in their transaction (the
        store's lock held it), so the order is the store's: the next catch-up
        reads them again and skips them by digest, without parsing their text.
        """
        for f in figures:
            if f.digest not in self._rows:
                self._hold(f.digest, f.definition)

    def _hold(self, digest: int, definition: Definition) -> None:
        """Hold one figure: its row, and an entry in the family of each column it names."""
        at = len(self._digests)
        self._rows[digest] = at
        self._digests.append(digest)
        for column, codes in definition:
            whole = digest - condition_digest(column, codes)
            key = family_key(whole, column)
            self._entry_before.append(self._last.get(key, -1))
            self._last[key] = len(self._entry_row)
            self._entry_row.append(at)
            self._entry_codes.append(self._codeset(frozenset(codes)))
            self._entries[key] = self._entries.get(key, 0) + 1

    def _codeset(self, codes: frozenset[Code]) -> int:
        found = self._codeset_ids.get(codes)
        if found is None:
            found = self._codeset_ids[codes] = len(self._codesets)
            self._codesets.append(codes)
        return found

    def members(self, key: int, skip: int = 0) -> list[tuple[int, frozenset[Code]]]:
        """The published figures of family ``key`` that name its column: (row, codes).

        In the order they were published, the first ``skip`` left out.
        """
        out = []
        at = self._last.get(key, -1)
        rows, codes, before, sets = (
            self._entry_row,
            self._entry_codes,
            self._entry_before,
            self._codesets,
        )
        for _ in range(self._entries.get(key, 0) - skip):
            out.append((rows[at], sets[codes[at]]))
            at = before[at]
        out.reverse()
        return out

    def span(self, key: int, index: Mapping[Code, int]) -> Span:
        """The span of family ``key``'s published figures that name its column (kept).

        Built once, then extended by the figures published since: the checks
        of a busy site touch the same families again and again (the
        ``_SPANS_KEPT`` most recently used are kept). Callers copy it before
        adding to it.
        """
        kept = self._spans.get(key)
        start, span, atoms = kept if kept is not None else (0, Span(), Atoms())
        total = self._entries.get(key, 0)
        if start < total:
            if kept is not None:
                span, atoms = span.copy(), atoms.copy()
            for row, codes in self.members(key, skip=start):
                vector = _codes_vector(codes, index)
                # Once the span holds every union of the blocks, a set that splits
                # none is in it: most of a big family's figures, with no arithmetic.
                if atoms.add(vector) or len(span) < len(atoms):
                    span.add(vector, published(row))
            self._spans[key] = (total, span, atoms)
        return span

    def atoms(self, key: int, index: Mapping[Code, int]) -> Atoms:
        """The blocks family ``key``'s published figures generate (kept with its span)."""
        self.span(key, index)
        kept = self._spans.get(key)
        return kept[2] if kept is not None else Atoms()  # no figure names the column

    def has_family(self, key: int) -> bool:
        """Whether some published figure names the column of family ``key``."""
        return key in self._last

    def row(self, digest: int) -> int | None:
        """The row of a published figure, or None."""
        return self._rows.get(digest)

    def digest(self, row: int) -> int:
        """A published figure's digest."""
        return self._digests[row]

    def remembered(self, text: str) -> int | None:
        """A block's protected count decided before (it never changes for one microdata)."""
        return self._counts.get(text)

    def remember(self, text: str, count: int) -> None:
        """Keep a block's protected count (a bounded memo)."""
        if len(self._counts) > 200_000:
            self._counts.clear()
        self._counts[text] = count


#: A block's protected count: (domain, canonical definition, true count, cell key) -> count.
Protected = Callable[[str, Definition, int, int], int]


#: A block's true count and cell key from the engine, where no exact combination gives them.
class Counted(Protocol):
    """The true counts of the microdata, from the engine (never published)."""

    def along(
        self, domain: str, context: Definition, column: str
    ) -> Mapping[Code, tuple[int, int]]:
        """Each code of ``column``'s true count and cell key within ``context``."""


@dataclass(frozen=True)
class AccountRules:
    """How the account decides.

    Attributes:
        threshold: A block whose protected count is below it is small (``m`` plus
            the mechanism's reach above counts below ``m``).
        fresh_margins: Whether a table's margins carry noise of their own
            (independent perturbation, IPF): then they are checked like inner cells.
    """

    threshold: int
    fresh_margins: bool


@dataclass
class _Check:
    account: Account
    figures: Sequence[Figure]
    space: DefinitionSpace
    rules: AccountRules
    protected: Protected
    counted: Counted
    mine: set[int]  # digests the new table publishes as margins (it breaks them down)


def unsafe_figures(
    account: Account,
    figures: Sequence[Figure],
    space: DefinitionSpace,
    rules: AccountRules,
    protected: Protected,
    counted: Counted,
) -> set[int]:
    """The positions in ``figures`` of the new table's unsafe figures (module docstring).

    Args:
        account: What was published from the microdata.
        figures: The new table's figures (:func:`table_figures`).
        space: The catalog's definition space.
        rules: The threshold and the kind of margins.
        protected: A block's protected count.
        counted: A block's true count and cell key, from the engine.
    """
    margins = {f.digest for f in figures if not f.inner}
    check = _Check(account, figures, space, rules, protected, counted, margins)
    unsafe: set[int] = set()
    for key, whole, column, members in _touched(check):
        first = figures[members[0][0]]
        context = _context(first.definition, column)
        unsafe |= _family(check, first.domain, context, column, key, whole, members)
    return unsafe


def _context(definition: Definition, column: str) -> Definition:
    """A definition without its condition on ``column`` (the family's context)."""
    return tuple((c, v) for c, v in definition if c != column)


def _touched(
    check: _Check,
) -> Iterator[tuple[int, int, str, list[tuple[int, frozenset[Code] | None]]]]:
    """The families the new table adds a figure to that some published figure may be in.

    Every figure is in one family per catalog column: along a column it names,
    within its other conditions; along one it does not, within itself (as
    every code). Keys are computed for all at once (digests add up), and a
    family is kept only where the new table adds a figure not published
    before and the account has a figure in it. Sorted by key.

    Yields:
        The family's key, its context's digest, its column, and the new
        table's figures in it (position, codes or None for every code).
    """
    figures, account = check.figures, check.account
    columns = tuple(check.space.all_codes)
    n, k = len(figures), len(columns)
    if not n:
        return
    parts = np.zeros((n, k), dtype=np.uint64)
    named = np.zeros((n, k), dtype=bool)
    index = {c: j for j, c in enumerate(columns)}
    totals = np.empty(n, dtype=np.uint64)
    for i, f in enumerate(figures):
        totals[i] = np.uint64(f.digest % DIGEST_MODULUS)
        for c, codes in f.definition:
            j = index[c]
            parts[i, j] = np.uint64(condition_digest(c, codes))
            named[i, j] = True
    marks = np.array([mark_digest("column:" + c) for c in columns], dtype=np.uint64)
    with np.errstate(over="ignore"):
        wholes = totals[:, None] - parts  # parts are 0 where a column is not named
        keys = wholes + marks[None, :]
    new = np.array([f.digest not in account for f in figures], dtype=bool)
    flat = keys.reshape(-1)
    order = np.argsort(flat, kind="stable")
    unique, starts = np.unique(flat[order], return_index=True)
    # Families with something new in them, found for all at once.
    fresh = np.maximum.reduceat(np.repeat(new, k)[order], starts)
    bounds = [*starts.tolist(), len(order)]
    whole_of = wholes.reshape(-1)[order[starts]]
    for u in np.flatnonzero(fresh).tolist():
        whole, skey = signed64(int(whole_of[u])), signed64(int(unique[u]))
        if not account.has_family(skey) and account.row(whole) is None:
            continue  # no published figure in it
        cells = order[bounds[u] : bounds[u + 1]]
        rows, cols = cells // k, cells % k
        column = columns[int(cols[0])]
        members = [
            (int(r), frozenset(dict(figures[int(r)].definition)[column]) if named[r, j] else None)
            for r, j in zip(rows.tolist(), cols.tolist(), strict=True)
        ]
        yield skey, whole, column, members


def _family(
    check: _Check,
    domain: str,
    context: Definition,
    column: str,
    key: int,
    whole: int,
    members: list[tuple[int, frozenset[Code] | None]],
) -> set[int]:
    """The unsafe figures of the new table in one family (module docstring, rules 1 and 2).

    Vectors are over the column's codes; the span of the family's published
    figures is the account's, kept between checks (:meth:`Account.span`).
    """
    account = check.account
    every = frozenset(check.space.all_codes[column])
    olds = account.members(key)
    excluded = {row for row, _ in olds if account.digest(row) in check.mine}
    at_whole = account.row(whole)
    if whole in check.mine:
        at_whole = None
    news = sorted(
        ((pos, codes or every) for pos, codes in members), key=lambda m: check.figures[m[0]].order
    )
    family = _FamilyCheck(
        check, _Blocks(check, domain, context, column), key, olds, excluded, at_whole, news
    )
    # The table's inner cells published already are published: they are known first.
    for pos, codes in news:
        f = check.figures[pos]
        if f.digest in check.account and f.inner:
            family.join(pos, codes)
    unsafe = set()
    for pos, codes in news:
        f = check.figures[pos]
        if f.digest in check.account:
            if not f.inner:
                family.join(pos, codes)  # a margin published already: the table's own sum
        elif not family.admit(pos, codes):
            unsafe.add(pos)
    return unsafe


def _codes_vector(codes: Iterable[Code], index: Mapping[Code, int]) -> Vector:
    """The indicator of a set of codes, over the column's code positions."""
    return dict.fromkeys((index[c] for c in codes), 1)


class _Own:
    """The span of a new table's own figures in one family.

    A table's inner cells in a family are disjoint sets of codes (the
    categories of one dimension), and its margins unions of them: while the
    sets added are disjoint, a set is in their span exactly when it is a
    union of some of them, a question of set arithmetic. The first set that
    overlaps another makes it a :class:`~tablesafe.rules._family.Span`.
    """

    def __init__(self, index: Mapping[Code, int]) -> None:
        self.index = index
        self.owner: dict[Code, int] = {}
        self.sets: list[frozenset[Code]] = []
        self.span: Span | None = None

    def contains(self, codes: frozenset[Code]) -> bool:
        """Whether the indicator of ``codes`` is in the span."""
        if self.span is not None:
            return self.span.contains(_codes_vector(codes, self.index))
        touched = set()
        for c in codes:
            o = self.owner.get(c)
            if o is None:
                return False
            touched.add(o)
        # Disjoint sets that all meet ``codes`` and hold as many codes lie inside it.
        return sum(len(self.sets[o]) for o in touched) == len(codes)

    def add(self, codes: frozenset[Code]) -> None:
        """Add the indicator of ``codes``."""
        if self.span is None and not self.contains(codes):
            if self.owner.keys() & codes:
                self.span = Span()
                for i, s in enumerate(self.sets):
                    self.span.add(_codes_vector(s, self.index), i)
            else:
                self.owner.update(dict.fromkeys(codes, len(self.sets)))
                self.sets.append(codes)
                return
        if self.span is not None:
            self.span.add(_codes_vector(codes, self.index), len(self.sets))
            self.sets.append(codes)


class _FamilyCheck:
    """One family as a new table's figures join it, one at a time.

    Most figures join a family without a question: one with a code no figure
    of the family holds is outside what is known, and a margin that is a sum
    of the table's own inner cells measures nothing new. So the span of what
    is known (a copy of the account's), the partition into blocks and the
    names of the sets are made only when a figure needs them.

    Attributes:
        own: The span of the new table's figures that combine freely (its inner
            cells, and its margins where they are sums of them).
        covered: The codes some figure in ``known`` holds.
    """

    def __init__(
        self,
        check: _Check,
        sizes: _Blocks,
        key: int,
        olds: list[tuple[int, frozenset[Code]]],
        excluded: set[int],
        at_whole: int | None,
        news: list[tuple[int, frozenset[Code]]],
    ) -> None:
        self.check, self.sizes, self.key = check, sizes, key
        self.column = sizes.column
        self.index = check.space.index(self.column)
        self.every = frozenset(check.space.all_codes[self.column])
        self.olds, self.excluded, self.at_whole, self.news = olds, excluded, at_whole, news
        sizes.family = self
        self.own = _Own(self.index)
        covered: set[Code] = set()
        if at_whole is not None:
            covered = set(self.every)
        else:
            for row, codes in olds:
                if row not in excluded:
                    covered |= codes
        self.covered = covered
        self._joined: list[tuple[int, frozenset[Code]]] = []
        self._known: Span | None = None
        self._residuals: dict[int, Vector] = {}

    @property
    def known(self) -> Span:
        """The span of what is published, with the figures joined so far (made when needed)."""
        if self._known is None:
            account, index = self.check.account, self.index
            if self.excluded:  # a breakdown of a published figure: its figures without it
                known = Span()
                for row, codes in self.olds:
                    if row not in self.excluded:
                        known.add(_codes_vector(codes, index), published(row))
            else:
                known = account.span(self.key, index).copy()
            if self.at_whole is not None:
                known.add(_codes_vector(self.every, index), published(self.at_whole))
            for pos, codes in self._joined:
                known.add(_codes_vector(codes, index), new(pos))
            self._known = known
        return self._known

    @functools.cached_property
    def sets(self) -> dict[Name, frozenset[Code]]:
        """The codes of every figure of the family, published or new, by its name."""
        sets = {published(at): codes for at, codes in self.olds}
        if self.at_whole is not None:
            sets[published(self.at_whole)] = self.every
        for pos, codes in self.news:
            sets[new(pos)] = codes
        return sets

    @functools.cached_property
    def block_of(self) -> dict[Code, int]:
        """Each code's block: the account's blocks of the family, refined by the new sets.

        The partition every set of the family generates
        (:func:`~tablesafe.rules._family.partition`), without reading the
        published ones again: the account keeps their blocks.
        """
        atoms = self.check.account.atoms(self.key, self.index).copy()
        if self.at_whole is not None:
            atoms.add(self.index[c] for c in self.every)
        for _, codes in self.news:
            atoms.add(self.index[c] for c in codes)
        return {c: atoms.of[p] for c, p in self.index.items() if p in atoms.of}

    @functools.cached_property
    def codes_of(self) -> dict[int, frozenset[Code]]:
        """Each block's codes."""
        codes_of: dict[int, set[Code]] = {}
        for code, b in self.block_of.items():
            codes_of.setdefault(b, set()).add(code)
        return {b: frozenset(c) for b, c in codes_of.items()}

    def vector(self, codes: Iterable[Code]) -> Vector:
        """The indicator of a set of codes."""
        return _codes_vector(codes, self.index)

    def blocks_of(self, codes: frozenset[Code]) -> frozenset[int]:
        """The blocks a set of codes is made of."""
        return frozenset(self.block_of[c] for c in codes)

    def residual(self, block: int) -> Vector:
        """A block's indicator less its part in ``known`` (empty: derivable); remembered."""
        found = self._residuals.get(block)
        if found is None:
            codes = self.codes_of[block]
            if len(codes) == 1:
                pivot = self.index[next(iter(codes))]
                row = self.known.rows.get(pivot)
                if row is not None and len(row[0]) == 1:
                    found = {}
            if found is None:
                found = self.known.residual(self.vector(codes))
            self._residuals[block] = found
        return found

    def derivable(self, block: int) -> bool:
        """Whether a block's indicator is a combination of what is known."""
        return not self.residual(block)

    def join(self, pos: int, codes: frozenset[Code]) -> None:
        """The new table's figure at ``pos`` joins the family (published, or admitted).

        Where the table is additive, each of its figures is a sum of its inner
        cells: what the table's own figures give one another is no difference
        of the table with what was published (``own``). Where margins carry
        noise of their own, only the inner cells are so.
        """
        f = self.check.figures[pos]
        self.covered |= codes
        if self._known is None:
            self._joined.append((pos, codes))
        elif self._known.add(self.vector(codes), new(pos)):
            self._residuals.clear()
        if f.inner or not self.check.rules.fresh_margins:
            self.own.add(codes)

    def admit(self, pos: int, codes: frozenset[Code]) -> bool:
        """Whether the new table's figure at ``pos`` is safe here; if so it joins the family."""
        f = self.check.figures[pos]
        outside = not codes <= self.covered  # then it is in no combination of what is known
        if outside and f.inner:
            # A first difference of inner cells is one more noisy measurement of
            # a block the site would publish as a cell: left to the mechanism
            # (docs/attacks.md, "What remains"). A margin or universe total
            # that first isolates a small block is a sliver.
            self.join(pos, codes)
            return True
        if not outside and self._summed(f, codes):
            return True  # in what is known already (it is in ``own``): nothing to add
        v = self.vector(codes)
        rest = self.known.residual(v)
        if not rest:
            if not self._again(f, codes, v):
                return False
            self.join(pos, codes)
            return True
        if f.inner:
            self.join(pos, codes)  # a first difference of inner cells (above)
            return True
        # A block becomes derivable with X exactly when its residual is a
        # multiple of X's (:func:`~tablesafe.rules._family.proportional`).
        inside = self.blocks_of(codes)
        fresh = [
            b
            for b in sorted(self.codes_of)
            if frozenset((b,)) != inside
            and self.residual(b)
            and proportional(rest, self.residual(b))
            and not self.own.contains(self.codes_of[b])
        ]
        if any(self.sizes.small(frozenset((b,))) for b in fresh):
            _debug("(ii) new", f, self.sizes)
            return False
        self.join(pos, codes)
        return True

    def _summed(self, f: Figure, codes: frozenset[Code]) -> bool:
        """A margin of an additive table that is a sum of its own figures here."""
        return not f.inner and not self.check.rules.fresh_margins and self.own.contains(codes)

    def _again(self, f: Figure, codes: frozenset[Code], v: Vector) -> bool:
        """Rule 2: a figure the published ones already determine measures them again."""
        check = self.check
        summed = self._summed(f, codes)
        # A category of several codes the catalog declares (a hierarchy level, a
        # grouping) can be asked only in as many ways as the catalog has groupings,
        # and less its other published parts it is a wide difference: bounded.
        declared = len(codes) > 1 and codes in check.space.categories.get(self.column, ())
        if summed or declared:
            return True
        # The blocks it measures again: its own, and those of the published
        # figures it is a combination of (their differences with it are new).
        involved = set(self.blocks_of(codes))
        for name in self.known.express(v) or {}:
            involved |= self.blocks_of(self.sets.get(name, frozenset()))
        if self.sizes.measures_small(frozenset(involved), self.known):
            _debug("(i) again", f, self.sizes)
            return False
        return True


def _debug(rule: str, figure: Figure, family: _Blocks) -> None:
    if _DEBUG:
        where = (family.context, family.column)
        print(f"  {rule}: {figure.definition} in family {where}", file=sys.stderr)


@dataclass
class _Blocks:
    """The blocks of one family: their definitions and protected counts."""

    check: _Check
    domain: str
    context: Definition
    column: str
    family: _FamilyCheck = field(init=False)

    def measures_small(self, inside: frozenset[int], known: Span) -> bool:
        """Whether some derivable part of ``inside`` (blocks, and what is left) is small."""
        parts = [frozenset((b,)) for b in sorted(inside) if self.family.derivable(b)]
        rest = inside - {b for p in parts for b in p}
        if rest and known.contains(self.family.vector(self._codes(frozenset(rest)))):
            parts.append(frozenset(rest))
        return any(self.small(p) for p in parts)

    def _codes(self, blocks: frozenset[int]) -> frozenset[Code]:
        return frozenset(c for b in blocks for c in self.family.codes_of[b])

    def small(self, blocks: frozenset[int]) -> bool:
        """Whether ``blocks`` hold a small protected count."""
        check = self.check
        codes = self._codes(blocks)
        box = {**dict(self.context), self.column: codes}
        definition = check.space.canonical(box)
        if definition is None:
            return False  # the declared zeros say it holds no record
        text = self.domain + definition_text(definition)
        count = check.account.remembered(text)
        if count is None:
            n, key = self._count(codes)
            count = check.protected(self.domain, definition, n, key)
            check.account.remember(text, count)
        if count < check.rules.threshold and _DEBUG:
            print("    small block", self.domain, definition, "p =", count, file=sys.stderr)
        return count < check.rules.threshold

    def _count(self, codes: frozenset[Code]) -> tuple[int, int]:
        """The true count and cell key of ``codes`` in the family's context.

        Sums of its codes' counts, read from the engine once per family (one
        query of the context by the column): the same records as the block's
        canonical definition, whatever relations made it canonical.
        """
        by_code = self.check.counted.along(self.domain, self.context, self.column)
        n = key = 0
        for code in codes:
            cn, ck = by_code.get(code, (0, 0))
            n += cn
            key += ck
        return n, key % _KEY_MODULUS


def withheld_cells(
    figures: Sequence[Figure],
    unsafe: set[int],
    shape: tuple[int, ...],
    *,
    additive: bool,
) -> npt.NDArray[np.bool_]:
    """The cells a table withholds: its unsafe figures and what would give them away.

    In an additive table a margin is the sum of its inner cells, so an unsafe
    margin withholds every inner cell it adds up (the margins around them are
    then sums of the cells published, and say so). Where margins are
    perturbed on their own, a margin over a withheld inner cell is withheld
    too (its value less the cells shown would estimate the withheld one), and
    so is every inner cell under a withheld margin.
    """
    withheld = np.zeros(shape, dtype=bool)
    for pos in unsafe:
        withheld.flat[figures[pos].index] = True
    k = len(shape)
    inner = tuple(slice(0, s - 1) for s in shape)
    for _ in range(2 if not additive else 1):
        # Down: every inner cell under a withheld margin.
        below = np.zeros(tuple(s - 1 for s in shape), dtype=bool)
        for at in zip(*np.nonzero(withheld), strict=True):
            index = tuple(slice(None) if j == shape[i] - 1 else j for i, j in enumerate(at))
            below[index] = True
        withheld[inner] |= below
        if additive:
            break
        # Up: every margin over a withheld inner cell.
        cells = withheld[inner]
        for axes in _subsets(k):
            if not axes:
                continue
            any_withheld = cells.any(axis=axes, keepdims=True)
            at = tuple(
                slice(s - 1, s) if i in axes else slice(0, s - 1) for i, s in enumerate(shape)
            )
            withheld[at] |= any_withheld
    return withheld


def _subsets(k: int) -> list[tuple[int, ...]]:
    import itertools

    return [c for r in range(k + 1) for c in itertools.combinations(range(k), r)]
