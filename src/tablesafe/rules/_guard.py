"""The sliver guard: no record set differs from published ones by a few records.

Seed 000 Section 2.1 and seed 004 Section 1: differencing two tables whose
record sets differ by a few records shows those records' categories. The
guard refuses a table that would allow it, with ``m = sliver_min_difference``.

**Record sets.** A table of dimensions ``D`` in universe ``U`` breaks down
its universe by every dimension, and each cell of every grouping set
``G`` smaller than ``D`` (a *slice*: 1-category slices, 2-category slices of
a 3-D table...) by the dimensions not in ``G``. Each is a :class:`RecordSet`:
its canonical definition in microdata columns and codes (so dataset names
and catalogs over the same microdata agree), its breakdown columns, its
size, a fingerprint (a hash of its size and record-key sum) and a sketch of its
record keys (:mod:`tablesafe.engines._sketch`). A universe, and a merged
group of a custom grouping, is also *whole*: compared with every other whole
set whatever its breakdown.

**Pairs.** A new record set ``X`` and a published ``Y`` that share a
breakdown column (or are both whole), both of at least ``m`` records, that
differ by ``|X| + |Y| - 2 |X and Y|`` in 1 .. m-1 records are a sliver. The
sketches' L1 distance is a lower bound on that difference, so only pairs
whose sketches are within ``m`` need the exact count of ``X and Y`` (one
query). A pair in which one set contains the other within one table (a slice
and its universe, or the slice it refines) is not a sliver: what they differ
by is the table's other slices, which the table publishes.

**Families.** Published sets whose definitions differ only in their codes
of one column ``c`` (a parent and its children along ``c``) can be added and
subtracted: any set of codes of ``c`` whose indicator is a linear combination
of theirs is published by difference. Each such *atom* that the new table
makes derivable, is not itself published and holds 1 .. m-1 records is a
sliver (a parent minus its children).

**Repeats.** A record set already published with the same definition and
breakdown columns is not compared again, so a request answered once is
answered again whatever was asked since.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import RefusedError
from tablesafe._request import DimensionPlan, TabulationPlan
from tablesafe._settings import RuleSettings, SliverScope
from tablesafe.catalog._catalog import Catalog, Code
from tablesafe.cells._aggregates import CellAggregates
from tablesafe.rules._guard_families import Family, derive

if TYPE_CHECKING:
    from tablesafe.catalog._dataset import Dataset
    from tablesafe.engines._base import Engine

__all__ = [
    "BUCKETS",
    "WHOLE",
    "GuardCounts",
    "RecordSet",
    "SetIndex",
    "dataset_identity",
    "definition_text",
    "guard_check",
    "record_sets",
]

#: Buckets of the record key in a sketch.
BUCKETS = 64
#: The breakdown "column" of a whole set (a universe or a merged group).
WHOLE = "*"

#: Groups of buckets whose sums filter the sketches first (SetIndex.near).
_GROUPS = 8
#: Rows kept out of the arrays in size order until there are more (SetIndex._merge).
_RECENT = 2048
#: Families derived together first (then twice as many each time, see _families).
_FIRST_CHUNK = 16


def _group_sums(sketches: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """Per row, its sketch summed over :data:`_GROUPS` groups of consecutive buckets.

    The L1 distance of two rows' group sums is at most that of their sketches
    (the absolute value of a sum is at most the sum of absolute values).
    """
    rows, buckets = sketches.shape
    if buckets and buckets % _GROUPS == 0:
        grouped: npt.NDArray[np.int32] = sketches.reshape(rows, _GROUPS, buckets // _GROUPS).sum(
            axis=2, dtype=np.int32
        )
        return grouped
    out = np.zeros((rows, _GROUPS), dtype=np.int32)
    if buckets:
        np.add.at(out.T, np.arange(buckets) * _GROUPS // buckets, sketches.T.astype(np.int32))
    return out


#: A canonical definition: (column, sorted codes) pairs sorted by column; a column
#: allowing every code of the catalog is left out.
Definition = tuple[tuple[str, tuple[Code, ...]], ...]


def _code_key(code: object) -> tuple[int, str]:
    return (0, f"{code:+021d}") if isinstance(code, int) else (1, str(code))


def canonical(
    conditions: Mapping[str, Iterable[Code]], all_codes: Mapping[str, Sequence[Code]]
) -> Definition:
    """The canonical form of a conjunction of column conditions."""
    out = []
    for column, codes in conditions.items():
        allowed = frozenset(codes)
        full = all_codes.get(column)
        if full is not None and allowed >= frozenset(full):
            continue
        out.append((column, tuple(sorted(allowed, key=_code_key))))
    return tuple(sorted(out))


@functools.lru_cache(maxsize=1 << 16)
def _pair_text(column: str, codes: tuple[Code, ...]) -> str:
    """One condition of a definition as JSON: ``[column, [codes]]``."""
    return json.dumps([column, list(codes)], separators=(",", ":"))


@functools.lru_cache(maxsize=1 << 16)
def definition_text(definition: Definition) -> str:
    """A definition as JSON (typed codes): what is stored and compared.

    Written condition by condition (:func:`_pair_text`, the same bytes as the
    whole list through ``json.dumps``) and memoised: one check writes the
    same few contexts thousands of times.
    """
    return "[" + ",".join([_pair_text(c, v) for c, v in definition]) + "]"


@functools.lru_cache(maxsize=1 << 16)
def context_texts(definition: Definition) -> tuple[tuple[str, str], ...]:
    """Per column of ``definition``: the text of the definition without that column.

    The contexts of the families a set belongs to (one per column it is
    defined on), joined from the conditions' texts: no JSON written twice.
    Memoised: tables of one site share most of their definitions.
    """
    pieces = [_pair_text(c, v) for c, v in definition]
    return tuple(
        (c, "[" + ",".join(pieces[:i] + pieces[i + 1 :]) + "]")
        for i, (c, _) in enumerate(definition)
    )


def parse_definition(text: str) -> Definition:
    """The inverse of :func:`definition_text`."""
    return tuple((str(c), tuple(v)) for c, v in json.loads(text))


#: A box of records: per column, the codes allowed (a column not named allows all).
Box = Mapping[str, frozenset[Code]]


def zero_boxes(catalog: Catalog) -> list[dict[str, frozenset[Code]]]:
    """The catalog's structural zeros as boxes of microdata columns and codes (public facts)."""
    out = []
    for zero in catalog.structural_zeros:
        box: dict[str, frozenset[Code]] = {}
        for name, codes in zero.codes.items():
            var = catalog.variable(name)
            allowed = frozenset(c for code in codes for c in var.source_codes(code))
            box[var.column] = box[var.column] & allowed if var.column in box else allowed
        out.append(box)
    return out


def _minus(
    a: Box, b: Box, all_codes: Mapping[str, Sequence[Code]]
) -> list[dict[str, frozenset[Code]]]:
    """``a - b`` as disjoint boxes: records of ``a`` outside ``b``'s codes of one column."""
    pieces = []
    inside = dict(a)
    for column, codes in sorted(b.items()):
        mine = inside.get(column, frozenset(all_codes.get(column, codes)))
        if mine - codes:
            pieces.append({**inside, column: mine - codes})
        inside[column] = mine & codes
        if not inside[column]:
            break
    return pieces


def publicly_empty(box: Box, zeros: Sequence[Box]) -> bool:
    """Whether the catalog's structural zeros say ``box`` holds no record (one zero covers it)."""
    if any(not codes for codes in box.values()):
        return True
    return any(
        all(column in box and box[column] <= codes for column, codes in zero.items())
        for zero in zeros
    )


def same_records_publicly(
    a: Definition, b: Definition, zeros: Sequence[Box], all_codes: Mapping[str, Sequence[Code]]
) -> bool:
    """Whether definitions ``a`` and ``b`` differ only by records no catalog allows."""
    box_a = {c: frozenset(v) for c, v in a}
    box_b = {c: frozenset(v) for c, v in b}
    pieces = _minus(box_a, box_b, all_codes) + _minus(box_b, box_a, all_codes)
    return all(publicly_empty(p, zeros) for p in pieces)


@dataclass(frozen=True, eq=False)
class RecordSet:
    """A record set a table publishes broken down by some columns.

    Attributes:
        definition: Its canonical definition (microdata columns and codes).
        columns: The columns it is broken down by, plus :data:`WHOLE` for a
            universe or a merged group.
        size: Its number of records (a true count: the guard's store is the owner's).
        fingerprint: 16 bytes naming the record set (:func:`fingerprint`).
        sketch: Its records per bucket of the record key, or ``None``.
        ancestors: Fingerprints of the sets of the same table that contain it
            (its universe, and the slices it refines).
        label: How to name it to the user who asked for it.
    """

    definition: Definition
    columns: frozenset[str]
    size: int
    fingerprint: bytes
    sketch: npt.NDArray[np.int64] | None
    ancestors: frozenset[bytes] = frozenset()
    label: str = ""

    @functools.cached_property
    def text(self) -> str:
        """The definition as stored (:func:`definition_text`), written once per set."""
        return definition_text(self.definition)


def fingerprint(size: int, key_sum: int) -> bytes:
    """16 bytes naming a record set: a hash of its size and record-key sum (any engine)."""
    payload = f"{size}:{key_sum}".encode()
    return hashlib.blake2b(payload, digest_size=16, person=b"tablesafe-set").digest()


def _cell_definition(
    plan: TabulationPlan,
    gs: tuple[int, ...],
    coords: tuple[int, ...],
    all_codes: Mapping[str, Sequence[Code]],
) -> Definition:
    conditions: dict[str, frozenset[Code]] = {c: frozenset(v) for c, v in plan.universe}
    for i, j in zip(gs, coords, strict=True):
        d = plan.dimensions[i]
        members = frozenset(d.members[j])
        conditions[d.column] = conditions.get(d.column, members) & members
    return canonical(conditions, all_codes)


def _label(plan: TabulationPlan, gs: tuple[int, ...], coords: tuple[int, ...]) -> str:
    if not gs:
        return "this table's universe"
    parts = [
        f"{plan.dimensions[i].name} = {plan.dimensions[i].codes[j]}"
        for i, j in zip(gs, coords, strict=True)
    ]
    return f"the records with {' and '.join(parts)} in this table's universe"


def record_sets(
    plan: TabulationPlan,
    agg: CellAggregates,
    sketch: npt.NDArray[np.int64] | None,
    catalog: Catalog,
    merged: Mapping[int, frozenset[Code]] | None = None,
) -> list[RecordSet]:
    """Every record set a table publishes broken down: its universe and every slice.

    Sizes and key sums come from the table's own grouping sets (the engine
    computes all of them), sketches from :func:`~tablesafe.engines._sketch.key_buckets`.

    Args:
        plan: The table's plan (dimensions, universe).
        agg: Its aggregates with every grouping set.
        sketch: Per bucket, the counts of every cell (``(B, *agg.shape)``), or ``None``.
        catalog: The dataset's catalog (every code of each column).
        merged: Per dimension position, the codes of its merged groups (custom
            groupings): those cells are whole sets too.

    Returns:
        The non-empty record sets, the universe first.
    """
    all_codes = {v.column: v.codes for v in catalog.source_variables}
    dims = plan.dimensions
    k = len(dims)
    merged = merged or {}
    columns = [d.column for d in dims]
    fps: dict[tuple[tuple[int, ...], tuple[int, ...]], bytes] = {}
    out: list[RecordSet] = []
    for size_g in range(k + 1):
        for gs in itertools.combinations(range(k), size_g):
            whole_dim = gs[0] if len(gs) == 1 and gs[0] in merged else None
            if size_g == k and whole_dim is None:
                continue  # inner cells are not broken down
            rest = frozenset(columns[i] for i in range(k) if i not in gs)
            for coords in itertools.product(*(range(dims[i].size) for i in gs)):
                idx = tuple(coords[gs.index(i)] if i in gs else dims[i].size for i in range(k))
                n = int(agg.n[idx])
                if n == 0:
                    continue
                whole = not gs or (
                    whole_dim is not None and dims[whole_dim].codes[coords[0]] in merged[whole_dim]
                )
                if size_g == k and not whole:
                    continue
                sk = None
                if sketch is not None:
                    where: tuple[Any, ...] = (slice(None), *idx)
                    sk = np.asarray(sketch[where], dtype=np.int64)
                fp = fingerprint(n, int(agg.cell_key[idx]))
                fps[(gs, coords)] = fp
                ancestors = frozenset(
                    fps[(sub, tuple(coords[gs.index(i)] for i in sub))]
                    for r in range(size_g)
                    for sub in itertools.combinations(gs, r)
                )
                out.append(
                    RecordSet(
                        definition=_cell_definition(plan, gs, coords, all_codes),
                        columns=rest | ({WHOLE} if whole else frozenset()),
                        size=n,
                        fingerprint=fp,
                        sketch=sk,
                        ancestors=ancestors,
                        label=_label(plan, gs, coords),
                    )
                )
    return out


# -- the index of published sets ------------------------------------------------------------


@dataclass
class _BySize:
    """Rows of one breakdown column in order of size, for :meth:`SetIndex.near_many`.

    Rows read wait in ``recent`` (read directly) until they are many, then are
    merged into the arrays in size order: each merge copies every array, so
    not at every catch-up.
    """

    order: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sizes: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # In the same order: each row's sketch summed over groups of buckets (zeros
    # without a sketch) and whether it has one.
    groups: npt.NDArray[np.int32] = field(
        default_factory=lambda: np.zeros((0, _GROUPS), dtype=np.int32)
    )
    has: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))
    recent: list[int] = field(default_factory=list)

    def merge(
        self,
        sizes: npt.NDArray[np.int64],
        sketches: npt.NDArray[np.int32],
        has_sketch: npt.NDArray[np.bool_],
    ) -> None:
        """Merge the recent rows into the arrays (one copy each, no sort of all)."""
        rows = np.array(self.recent, dtype=np.int64)
        mine = sizes[rows]
        by_size = np.argsort(mine, kind="stable")
        rows, mine = rows[by_size], mine[by_size]
        at = np.searchsorted(self.sizes, mine, side="right")
        self.order = np.insert(self.order, at, rows)
        self.sizes = np.insert(self.sizes, at, mine)
        groups = _group_sums(sketches[rows]) * has_sketch[rows, None]
        self.groups = np.insert(self.groups, at, groups, axis=0)
        self.has = np.insert(self.has, at, has_sketch[rows])
        self.recent = []

    def candidates(
        self,
        sizes: npt.NDArray[np.int64],
        low: npt.NDArray[np.int64],
        high: npt.NDArray[np.int64],
        groups: npt.NDArray[np.int32],
        has: npt.NDArray[np.bool_],
        m: int,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Rows sized ``low`` to ``high`` whose group sums are within ``m`` (or unknown).

        Args:
            sizes: Every row's size (the index's).
            low: Per set searched, the smallest size of its window.
            high: The largest.
            groups: Its sketch's sums over groups of buckets.
            has: Whether it has a sketch.
            m: The minimum difference.

        Returns:
            The rows and, for each, the position of its set in the arguments.
        """
        k = len(low)
        lo = np.searchsorted(self.sizes, low, side="left")
        widths = np.maximum(np.searchsorted(self.sizes, high, side="right") - lo, 0)
        owner = np.repeat(np.arange(k), widths)
        starts = np.repeat(np.cumsum(widths) - widths - lo, widths)
        at = np.arange(len(owner)) - starts  # positions in size order, window by window
        coarse = np.abs(self.groups[at] - groups[owner]).sum(axis=1)
        keep = (coarse < m) | ~self.has[at] | ~has[owner]
        rows, owner = self.order[at[keep]], owner[keep]
        recent = np.array(self.recent, dtype=np.int64)
        recent_sizes = sizes[recent]
        by, nth = np.nonzero((recent_sizes >= low[:, None]) & (recent_sizes <= high[:, None]))
        return np.concatenate([rows, recent[nth]]), np.concatenate([owner, by])


@dataclass
class SetIndex:
    """The record sets published from one microdata, in memory, for the guard's lookups.

    Rows are appended as the store reads them (in id order); the arrays
    hold sizes and sketches for vectorised candidate search, the dictionaries
    what was published under which definition and which sets share a context.
    """

    buckets: int = BUCKETS
    last_id: int = 0
    # Families made so far: long-lived objects like the sets (the store freezes
    # both for the collector, see state._store).
    families_made: int = 0
    sets: list[RecordSet] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    # Rows' sizes, sketches and whether they have one, in buffers that grow by
    # doubling (the first len(sets) rows used); row ids in order of size.
    _sizes: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _sketches: npt.NDArray[np.int32] = field(
        default_factory=lambda: np.zeros((0, 0), dtype=np.int32)
    )
    _has_sketch: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))
    _pending: list[tuple[int, str, RecordSet]] = field(default_factory=list)
    # Per breakdown column, the rows broken down by it in order of size (near_many).
    _by_column: dict[str, _BySize] = field(default_factory=dict)
    _published: dict[tuple[bytes, str], set[str]] = field(default_factory=dict)
    _published_by_key: dict[tuple[bytes, str, str], set[str]] = field(default_factory=dict)
    # Per context, the columns along which rows refine it (the rows are in _in_family).
    _contexts: dict[str, set[str]] = field(default_factory=dict)
    _definitions: dict[str, list[int]] = field(default_factory=dict)
    # The same rows by breakdown column too: a family's members, listed as read.
    _in_family: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)
    _defined_by: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    _codes: dict[tuple[Code, ...], tuple[Code, ...]] = field(default_factory=dict)
    _families: dict[tuple[str, str, str, str | None], Family] = field(default_factory=dict)
    _keys: dict[str, str] = field(default_factory=dict)
    _frozen: dict[tuple[Code, ...], frozenset[Code]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.sets) + len(self._pending)

    def add(self, rows: Iterable[tuple[int, str, RecordSet]]) -> None:
        """Append stored rows ``(id, key id, set)`` (ids increasing)."""
        for row_id, key_id, s in rows:
            self._pending.append((row_id, key_id, s))
            self.last_id = max(self.last_id, row_id)
            text = s.text
            self._published.setdefault((s.fingerprint, text), set()).update(s.columns)
            self._published_by_key.setdefault((s.fingerprint, text, key_id), set()).update(
                s.columns
            )

    def _flush(self) -> None:
        if not self._pending:
            return
        start = len(self.sets)
        new = self._pending
        self._pending = []
        for row, (_, key_id, s) in enumerate(new, start):
            # Kept without its sketch (the buffer has it) and with shared code tuples:
            # hundreds of thousands of sets stay small.
            definition = tuple((c, self._codes.setdefault(v, v)) for c, v in s.definition)
            self.sets.append(
                RecordSet(definition, s.columns, s.size, s.fingerprint, None, s.ancestors, s.label)
            )
            self.keys.append(self._keys.setdefault(key_id, key_id))
            text = s.text
            self._definitions.setdefault(text, []).append(row)
            for w in s.columns:
                self._defined_by.setdefault((text, w), []).append(row)
                by_size = self._by_column.get(w)
                if by_size is None:
                    by_size = self._by_column[w] = _BySize()
                by_size.recent.append(row)
            for column, ctx in context_texts(definition):
                self._contexts.setdefault(ctx, set()).add(column)
                for w in s.columns:
                    self._in_family.setdefault((ctx, column, w), []).append(row)
        self._grow(start + len(new))
        sizes = np.array([s.size for _, _, s in new], dtype=np.int64)
        # (the sketches come from the new rows, the stored sets no longer have them)
        for i, (_, _, s) in enumerate(new, start):
            if s.sketch is not None and len(s.sketch) == self.buckets:
                self._sketches[i] = s.sketch
                self._has_sketch[i] = True
        self._sizes[start : start + len(new)] = sizes
        for by_size in self._by_column.values():
            if len(by_size.recent) > max(_RECENT, len(by_size.order) // 16):
                by_size.merge(self._sizes, self._sketches, self._has_sketch)

    def _grow(self, rows: int) -> None:
        if rows <= len(self._sizes):
            return
        capacity = max(rows, 2 * len(self._sizes), 1024)
        sizes = np.zeros(capacity, dtype=np.int64)
        sketches = np.zeros((capacity, self.buckets), dtype=np.int32)
        has = np.zeros(capacity, dtype=bool)
        used = len(self._sizes)  # the old buffers, copied whole
        sizes[:used] = self._sizes
        if self._sketches.size:
            sketches[:used] = self._sketches
        has[:used] = self._has_sketch
        self._sizes, self._sketches, self._has_sketch = sizes, sketches, has

    def published_columns(self, s: RecordSet, key_id: str | None) -> set[str]:
        """The columns ``s`` (same records, same definition) was published broken down by."""
        if key_id is None:
            return self._published.get((s.fingerprint, s.text), set())
        return self._published_by_key.get((s.fingerprint, s.text, key_id), set())

    def near(
        self, s: RecordSet, m: int, columns: Collection[str] | None = None
    ) -> npt.NDArray[np.int64]:
        """Rows of ``m`` records or more, within ``m`` of ``s`` in size and maybe in sketch.

        A sketch may be near when its L1 distance is below ``m``. Stored sets
        of fewer than ``m`` records are never a pair's other side (the pair
        check always skipped them): leaving them out here skips the densest
        sizes, where most stored sets are. With ``columns``, only rows broken
        down by one of them (a pair shares a breakdown column).
        """
        return self.near_many([s], m, None if columns is None else [columns])[0]

    def near_many(
        self, sets: Sequence[RecordSet], m: int, columns: Sequence[Collection[str]] | None = None
    ) -> list[npt.NDArray[np.int64]]:
        """:meth:`near` for each of ``sets``, in one pass: each in order of size, then of row.

        The L1 of two sketches is a lower bound on the records two sets
        differ by. Rows without a sketch stay candidates. Each breakdown
        column's rows are searched for the sets that compare it (``columns``,
        per set; every column when None): first the L1 of the sums over groups
        of buckets, a lower bound of that, read from arrays in size order
        (slices, not a gather of every row's sketch), then the whole sketches
        of the rows it leaves.
        """
        self._flush()
        k = len(sets)
        if not self.sets:
            return [np.zeros(0, dtype=np.int64) for _ in sets]
        sizes = np.array([s.size for s in sets], dtype=np.int64)
        low, high = np.maximum(sizes - m + 1, m), sizes + m - 1
        mine = np.zeros((k, self.buckets), dtype=np.int32)
        has = np.zeros(k, dtype=bool)
        for i, s in enumerate(sets):
            if s.sketch is not None and len(s.sketch) == self.buckets:
                mine[i], has[i] = s.sketch, True
        groups = _group_sums(mine)
        found_rows, found_owner = [], []
        for column in sorted(self._by_column):
            who = np.array(
                [i for i in range(k) if columns is None or column in columns[i]], dtype=np.int64
            )
            if len(who):
                rows, owner = self._by_column[column].candidates(
                    self._sizes, low[who], high[who], groups[who], has[who], m
                )
                found_rows.append(rows)
                found_owner.append(who[owner])
        if not found_rows:
            return [np.zeros(0, dtype=np.int64) for _ in sets]
        rows, owner = np.concatenate(found_rows), np.concatenate(found_owner)
        if len(found_rows) > 1:  # a row broken down by two columns is found twice
            _, first = np.unique(owner * len(self._sizes) + rows, return_index=True)
            rows, owner = rows[first], owner[first]
        whole = has[owner] & self._has_sketch[rows]
        dist = np.abs(self._sketches[rows[whole]] - mine[owner[whole]]).sum(axis=1)
        keep = np.ones(len(rows), dtype=bool)
        keep[whole] = dist < m
        rows, owner = rows[keep], owner[keep]
        order = np.lexsort((rows, self._sizes[rows], owner))
        rows, owner = rows[order], owner[order]
        bounds = np.searchsorted(owner, np.arange(k + 1))
        return [rows[bounds[i] : bounds[i + 1]] for i in range(k)]

    def same_sketch(self, row: int, s: RecordSet) -> bool:
        """Whether row ``row`` has the sketch of ``s`` (true when either has none)."""
        self._flush()
        if s.sketch is None or not self._has_sketch[row]:
            return True
        return bool(np.array_equal(self._sketches[row], s.sketch))

    def publishes(self, context: str, column: str) -> bool:
        """Whether a row is defined as ``context``, or as it plus a condition on ``column``."""
        self._flush()
        return column in self._contexts.get(context, ()) or context in self._definitions

    def available(self, context: str, column: str, breakdown: str) -> int:
        """How many rows a family's members come from (of any key): at least its members."""
        self._flush()
        return len(self._in_family.get((context, column, breakdown), ())) + len(
            self._defined_by.get((context, breakdown), ())
        )

    def family_state(
        self, context: str, column: str, breakdown: str, only: str | None, codes: Sequence[Code]
    ) -> Family:
        """One published family, brought up to date with the rows read since.

        Its members: sets defined as ``context`` plus a condition on ``column``
        (or none), broken down by ``breakdown``, of key ``only`` (or any).
        """
        self._flush()
        key = (context, column, breakdown, only)
        family = self._families.get(key)
        if family is None:
            family = self._families[key] = Family(tuple(codes))
            self.families_made += 1
        rows = self._in_family.get((context, column, breakdown), [])
        defined = self._defined_by.get((context, breakdown), [])
        done_rows, done_defined = family.seen
        if done_rows == len(rows) and done_defined == len(defined):
            return family  # nothing read since: most families of a check
        full = frozenset(codes)
        members, whole = rows[done_rows:], defined[done_defined:]
        if only is not None:
            members = [row for row in members if self.keys[row] == only]
            whole = [row for row in whole if self.keys[row] == only]
        family.add_many(
            [self._code_set(self.sets[row], column, full) for row in members] + [full] * len(whole),
            [self.sets[row].size for row in (*members, *whole)],
        )
        family.seen = (len(rows), len(defined))
        return family

    def _code_set(self, s: RecordSet, column: str, full: frozenset[Code]) -> frozenset[Code]:
        """The codes ``s`` allows on ``column``, one shared object per distinct code set.

        Families hold these sets by the hundred thousand; sharing them keeps
        the objects the collector walks down to the distinct ones.
        """
        for c, codes in s.definition:
            if c == column:
                frozen = self._frozen.get(codes)
                if frozen is None:
                    frozen = self._frozen[codes] = frozenset(codes)
                return frozen
        return full

    def children_columns(self, text: str) -> set[str]:
        """Columns along which rows refine definition ``text`` (its children)."""
        self._flush()
        return set(self._contexts.get(text, ()))


# -- counts --------------------------------------------------------------------------------


@dataclass
class GuardCounts:
    """Exact counts of the microdata for the guard, by definition (one engine query each).

    Args:
        engine: The dataset's engine.
        dataset: The dataset.
    """

    engine: Any
    dataset: Any
    queries: int = 0
    # Counts of the microdata, which do not change while it is served: a
    # service passes one memo for all its checks (bounded by its owner).
    _memo: dict[Any, Any] = field(default_factory=dict)

    def _plan(self, definition: Definition) -> TabulationPlan | None:
        """A one-way count of the records ``definition`` selects (None when it selects none)."""
        cat = self.dataset.catalog
        if any(not codes for _, codes in definition):
            return None
        return TabulationPlan(
            dimensions=(DimensionPlan.from_variable(cat.source_variables[0]),),
            universe=definition,
            grouping_sets=((0,), ()),
            record_key=cat.record_key,
            weight=None,
        )

    def intersection(self, a: Definition, b: Definition) -> int:
        """``|A and B|``: the records both definitions select."""
        key = ("and", a, b) if a <= b else ("and", b, a)
        if key not in self._memo:
            both: dict[str, set[Code]] = {}
            for column, codes in (*a, *b):
                both[column] = both[column] & set(codes) if column in both else set(codes)
            definition = tuple(sorted((c, tuple(v)) for c, v in both.items()))
            plan = self._plan(definition)
            if plan is None:
                self._memo[key] = 0
            else:
                self.queries += 1
                self._memo[key] = int(self.engine.tabulate(self.dataset, plan).n[-1])
        return int(self._memo[key])


def dataset_identity(engine: Engine, dataset: Dataset) -> str:
    """The microdata's identity: a hash of its record count and record-key sum (any engine).

    It depends on the records alone, not on the dataset's name or catalog:
    every dataset that serves the same records shares the guard's memory.
    """
    cat = dataset.catalog
    plan = TabulationPlan(
        dimensions=(DimensionPlan.from_variable(cat.source_variables[0]),),
        universe=(),
        grouping_sets=((0,), ()),
        record_key=cat.record_key,
        weight=None,
    )
    agg = engine.tabulate(dataset, plan)
    payload = f"{int(agg.n[-1])}:{int(agg.cell_key[-1])}".encode()
    return hashlib.blake2b(payload, digest_size=16, person=b"tablesafe-data").hexdigest()


# -- the check ---------------------------------------------------------------------------

#: Whether a record set equal to a published one under another definition is refused
#: like a near one (docs/decisions.md, "Sliver guard: identical record sets").
IDENTICAL_IS_NEAR = True


@dataclass
class _TableSets:
    """The new table's record sets by definition and by context (what :func:`_joined` reads).

    Per context and column, the sets defined as the context plus a condition
    on the column, with the codes they allow there; per definition, the sets
    defined so (a family's whole sets).
    """

    contexts: dict[str, dict[str, list[tuple[frozenset[Code], RecordSet]]]]
    definitions: dict[str, list[RecordSet]]
    _every: dict[str, frozenset[Code]] = field(default_factory=dict)  # per column, all its codes

    @classmethod
    def of(cls, sets: Sequence[RecordSet]) -> _TableSets:
        contexts: dict[str, dict[str, list[tuple[frozenset[Code], RecordSet]]]] = {}
        definitions: dict[str, list[RecordSet]] = {}
        for s in sets:
            definitions.setdefault(s.text, []).append(s)
            for (column, ctx), (_, codes) in zip(
                context_texts(s.definition), s.definition, strict=True
            ):
                contexts.setdefault(ctx, {}).setdefault(column, []).append((frozenset(codes), s))
        return cls(contexts, definitions)

    def children_columns(self, text: str) -> Iterable[str]:
        """Columns along which sets of the table refine definition ``text``."""
        return self.contexts.get(text, {}).keys()

    def members(
        self, context: str, column: str, full: Sequence[Code]
    ) -> list[tuple[frozenset[Code], RecordSet]]:
        """Sets defined as ``context`` plus any condition on ``column``, with their codes there."""
        found = self.contexts.get(context, {}).get(column, [])
        defined = self.definitions.get(context)
        if not defined:
            return found
        whole = self._every.get(column)
        if whole is None:
            whole = self._every[column] = frozenset(full)
        return found + [(whole, s) for s in defined]


@dataclass(frozen=True)
class _Check:
    index: SetIndex
    table: _TableSets
    key_id: str
    only: str | None
    m: int
    counts: GuardCounts
    all_codes: Mapping[str, Sequence[Code]]
    identical_is_near: bool
    zeros: Sequence[Box] = ()


def guard_check(
    index: SetIndex,
    sets: Sequence[RecordSet],
    *,
    key_id: str,
    rules: RuleSettings,
    counts: GuardCounts,
    all_codes: Mapping[str, Sequence[Code]],
    identical_is_near: bool | None = None,
    zeros: Sequence[Box] = (),
) -> list[RecordSet]:
    """Refuse a table that makes a sliver with published record sets; else what to remember.

    Only record sets not yet published under the same definition and
    breakdown are compared (a repeat compares nothing). Each is compared
    pairwise with the published sets near it, then with the families it
    joins (see the module's docstring).

    Args:
        index: The published record sets of the microdata.
        sets: The new table's record sets (:func:`record_sets`).
        key_id: The API key asking.
        rules: The dataset's rules (``sliver_min_difference``, ``sliver_scope``,
            ``sliver_cells``).
        counts: Exact counts of the microdata.
        all_codes: Every code of each column (the catalog's).
        identical_is_near: Refuse a set equal to a published one under another
            definition (a difference of 0) as a near one (default:
            :data:`IDENTICAL_IS_NEAR`, read at each call), unless the two
            definitions differ only by the catalog's structural zeros.
        zeros: The catalog's structural zeros (:func:`zero_boxes`).

    Returns:
        The sets to remember: those with something not yet published.

    Raises:
        RefusedError: naming the new table's record set, never a count.
    """
    if identical_is_near is None:
        identical_is_near = IDENTICAL_IS_NEAR
    only = key_id if rules.sliver_scope == SliverScope.KEY else None
    check = _Check(
        index, _TableSets.of(sets), key_id, only, rules.sliver_min_difference, counts, all_codes,
        identical_is_near,
        zeros,
    )  # fmt: skip
    fresh = []
    checked: list[tuple[RecordSet, frozenset[str] | set[str]]] = []
    for x in sets:
        new = x.columns - index.published_columns(x, only)
        if not new:
            continue
        fresh.append(x)
        compare = new if rules.sliver_cells else new & {WHOLE}
        if check.m > 0 and x.size >= check.m and compare:
            checked.append((x, compare))
    near = index.near_many([x for x, _ in checked], check.m, [c for _, c in checked])
    seen_families: set[tuple[str, str, str]] = set()
    joined: list[tuple[RecordSet, list[_Joined]]] = []
    refusal: RefusedError | None = None
    for (x, columns), rows in zip(checked, near, strict=True):
        try:
            _pairs(check, x, columns, rows)
        except RefusedError as e:
            refusal = e  # after the families of the sets before it, as if checked in turn
            break
        joined.append((x, _joined(check, x, columns, seen_families)))
    try:
        _families(check, joined)
        if refusal is not None:
            raise refusal
    finally:
        # A traceback holds this frame: without its reference to the pairs' error
        # the two make no cycle, and the table's objects go when the error does
        # (not at a full collection, nor never once the store has frozen them).
        refusal = None
    return fresh


def _earlier(check: _Check, row: int | None, whole: bool) -> str:
    mine = row is not None and check.index.keys[row] == check.key_id
    if not whole:
        return (
            "a table you already received"
            if mine
            else "a table already published from this dataset"
        )
    if not mine or row is None:
        return "one already published from this dataset"
    y = check.index.sets[row]
    shown = " and ".join(f"{c} in {list(v)}" for c, v in y.definition) or "all records"
    return f"one you already received ({shown})"


def _refuse(check: _Check, x: RecordSet, row: int | None, whole: bool) -> RefusedError:
    m = check.m
    advice = (
        "differencing the two could reveal those records. Ask for coarser categories or a "
        "universe that differs more"
    )
    if whole and not x.ancestors:
        return RefusedError(
            f"this universe differs by fewer than {m} records from {_earlier(check, row, True)}; "
            "differencing the two tables could reveal those records. Ask for a universe that "
            "differs more, or for the earlier universe itself"
        )
    if whole:  # a merged group of a custom grouping
        return RefusedError(
            f"the group of {x.label.removeprefix('the ')} differs by fewer than {m} records "
            f"from {_earlier(check, row, True)}; {advice}"
        )
    verb = (
        "differ" if x.ancestors else "differs"
    )  # "the records with ..." or "this table's universe"
    return RefusedError(
        f"{x.label} {verb} by fewer than {m} records from a group of records broken down in "
        f"{_earlier(check, row, False)}; {advice}"
    )


def _pairs(
    check: _Check, x: RecordSet, compare: frozenset[str] | set[str], near: npt.NDArray[np.int64]
) -> None:
    """Refuse ``x`` if a published set ``near`` it differs from it by 1 .. m-1 records."""
    index, m = check.index, check.m
    for row in near.tolist():  # (sets of m records or more: SetIndex.near_many)
        y = index.sets[row]
        if check.only is not None and index.keys[row] != check.only:
            continue
        shared = compare & y.columns
        if not shared:
            continue
        if y.fingerprint in x.ancestors or x.fingerprint in y.ancestors:
            continue  # one contains the other in one table: the table publishes the rest
        if y.fingerprint == x.fingerprint and index.same_sketch(row, x):
            diff = 0
        else:
            diff = x.size + y.size - 2 * check.counts.intersection(x.definition, y.definition)
        if diff == 0 and not _near_identical(check, x, y):
            continue
        if diff < m:
            raise _refuse(check, x, row, WHOLE in shared)


def _near_identical(check: _Check, x: RecordSet, y: RecordSet) -> bool:
    """Whether equal record sets count as near: under another definition, not a public one."""
    if not check.identical_is_near or y.text == x.text:
        return False
    return not same_records_publicly(x.definition, y.definition, check.zeros, check.all_codes)


@dataclass
class _Joined:
    """A family a new set joins: its new code sets (with their sizes) and where it is."""

    family: Family
    new: list[frozenset[Code]]
    sized: dict[frozenset[Code], int]
    definition: Definition  # of the set that joins it: the context is the rest of it
    column: str

    def box(self, atom: frozenset[Code]) -> dict[str, frozenset[Code]]:
        """The records of ``atom`` in the family's context, as a box."""
        box = {c: frozenset(v) for c, v in self.definition if c != self.column}
        box[self.column] = atom
        return box


def _joined(
    check: _Check,
    x: RecordSet,
    compare: frozenset[str] | set[str],
    seen: set[tuple[str, str, str]],
) -> list[_Joined]:
    """The published families ``x`` joins that a difference could cut (not yet seen)."""
    text = x.text
    # Per column, the context of the family along it: x's definition without the
    # column, or all of it for a column x is refined along (x is a whole set there).
    contexts = dict(context_texts(x.definition))
    for column in (*check.index.children_columns(text), *check.table.children_columns(text)):
        contexts.setdefault(column, text)
    out = []
    breakdowns = sorted(compare)
    for column in sorted(contexts):
        full = check.all_codes.get(column)
        if full is None:
            continue
        ctx_text = contexts[column]
        ws = [w for w in breakdowns if (ctx_text, column, w) not in seen]
        if not ws:
            continue  # this family was checked for this table already
        if not check.index.publishes(ctx_text, column):
            continue  # nothing published in this context: no family to join (none is made)
        new_all = check.table.members(ctx_text, column, full)
        for w in ws:
            seen.add((ctx_text, column, w))
            sized = {codes: y.size for codes, y in new_all if w in y.columns}
            new = [codes for codes, y in new_all if w in y.columns]
            if not new or check.index.available(ctx_text, column, w) + len(new) < 3:
                continue  # (a family's members are at most the rows it comes from)
            family = check.index.family_state(ctx_text, column, w, check.only, full)
            if family.members + len(new) < 3:
                continue
            out.append(_Joined(family, new, sized, x.definition, column))
    return out


def _families(check: _Check, joined: Sequence[tuple[RecordSet, list[_Joined]]]) -> None:
    """Refuse the first set that completes a parent-minus-children difference of 1 .. m-1 records.

    The atoms of the families are derived together (:func:`derive`), in
    chunks that double (16, 32, 64 families...), and read in the order the
    sets were checked: the refusal is the one a check family by family would
    give, and a refusal early in the table leaves the later chunks undone.
    """
    flat = [(x, j) for x, js in joined for j in js]
    low = 0 if check.identical_is_near else 1
    start, size = 0, _FIRST_CHUNK
    while start < len(flat):
        chunk = flat[start : start + size]
        start, size = start + len(chunk), 2 * size
        found = derive([(j.family, j.new, j.sized) for _, j in chunk])
        for (x, j), (atoms, counts) in zip(chunk, found, strict=True):
            for atom, n in zip(atoms, counts, strict=True):
                if n == 0 and publicly_empty(j.box(atom), check.zeros):
                    continue  # the catalog says it is empty: nothing to tell
                if low <= n < check.m:
                    raise RefusedError(
                        f"{x.label}, with groups of records broken down in tables already "
                        f"published from this dataset, leaves fewer than {check.m} records "
                        "by difference (a group minus its parts); differencing could reveal "
                        "those records. Ask for coarser categories or a universe that differs more"
                    )
