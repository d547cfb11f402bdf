"""Canonical definitions: which records a published figure covers, in one form.

A figure (a cell, a margin, a merged group, a universe total) covers the
records whose code in each microdata column lies in an allowed set: a *box*.
Two requests can name one box in many ways (another dimension order, a
universe condition naming every code, a grouping's members, ``ZONE = N`` for
its regions) and, under the catalog's declared structural zeros, two boxes
can hold the same records (``AGE = 0`` and ``AGE = 0 and ECON = 5`` when
every child is coded ``ECON = 5``). The *canonical definition* is one form for
all of them (DESIGN decisions 2 and 10):

1. each column's codes are narrowed to those whose slice of the box some
   record could hold: a code whose slice the declared zeros cover is dropped
   (until nothing more can be dropped; the result does not depend on the
   order, since dropping a covered slice never uncovers another);
2. a column that allows every code of the catalog restricts nothing and is
   left out; the rest are written sorted by column, codes sorted and typed.

So two definitions differ only when the catalog's public facts do not make
them the same records. Canonical definitions are decided from the request,
the catalog and its declared zeros alone, never from the microdata.

The text (:func:`definition_text`) is JSON, ``[["AGE",[0,1]],["SEX",[2]]]``;
it keys DP noise (:mod:`tablesafe._seeds`), the privacy ledger and the
account of published figures (:mod:`tablesafe.rules._account`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tablesafe.catalog._variables import Code

if TYPE_CHECKING:
    from tablesafe.catalog._catalog import Catalog

__all__ = [
    "Box",
    "Definition",
    "DefinitionSpace",
    "cell_definitions",
    "code_order",
    "condition_digest",
    "definition_digest",
    "definition_text",
    "domain_text",
    "mark_digest",
    "parse_definition",
    "signed64",
]

#: A canonical definition: (column, sorted codes) pairs sorted by column.
Definition = tuple[tuple[str, tuple[Code, ...]], ...]

#: A box of records: per column, the codes allowed (a column not named allows every code).
Box = Mapping[str, frozenset[Code]]


def code_order(code: object) -> tuple[int, str]:
    """The one order of codes: integers (numerically) before text."""
    return (0, f"{code:+021d}") if isinstance(code, int) else (1, str(code))


@functools.lru_cache(maxsize=1 << 16)
def _pair_text(column: str, codes: tuple[Code, ...]) -> str:
    return json.dumps([column, list(codes)], separators=(",", ":"))


@functools.lru_cache(maxsize=1 << 16)
def sorted_codes(codes: frozenset[Code]) -> tuple[Code, ...]:
    """A set of codes in the one order (:func:`code_order`), remembered."""
    return tuple(sorted(codes, key=code_order))


@functools.lru_cache(maxsize=1 << 16)
def definition_text(definition: Definition) -> str:
    """A definition as JSON with typed codes: what is stored, keyed and compared."""
    return "[" + ",".join(_pair_text(c, v) for c, v in definition) + "]"


def parse_definition(text: str) -> Definition:
    """The inverse of :func:`definition_text`."""
    return tuple((str(c), tuple(v)) for c, v in json.loads(text))


#: Digests are sums modulo 2**64 of a digest per condition (and per domain), so the
#: digest of a definition without one of its conditions is a subtraction away.
DIGEST_MODULUS = 2**64


def _hash64(payload: str, person: bytes) -> int:
    raw = hashlib.blake2b(payload.encode(), digest_size=8, person=person).digest()
    return int.from_bytes(raw, "little")


@functools.lru_cache(maxsize=1 << 18)
def condition_digest(column: str, codes: tuple[Code, ...]) -> int:
    """A condition's part of a definition's digest (unsigned, below 2**64)."""
    return _hash64(_pair_text(column, codes), b"tablesafe-cond")


@functools.lru_cache(maxsize=1 << 12)
def mark_digest(label: str) -> int:
    """The part of a domain (what is counted), or of a family's column, in a digest."""
    return _hash64(label, b"tablesafe-mark")


def signed64(value: int) -> int:
    """An unsigned 64-bit digest as a signed one (what SQL's BIGINT keeps)."""
    value %= DIGEST_MODULUS
    return value - DIGEST_MODULUS if value >= 2**63 else value


def definition_digest(domain: str, definition: Definition) -> int:
    """A definition's 64-bit digest (signed): its domain's part plus each condition's.

    The account of published figures and its families key on it
    (:mod:`tablesafe.rules._account`). Two definitions with the same digest are
    taken as one; with 64-bit parts the chance that two of a million
    definitions collide is below 10^-7.
    """
    total = mark_digest("domain:" + domain)
    for column, codes in definition:
        total += condition_digest(column, codes)
    return signed64(total)


def _minus(
    a: Box, b: Box, all_codes: Mapping[str, Sequence[Code]]
) -> list[dict[str, frozenset[Code]]]:
    """``a - b`` as disjoint boxes (the records of ``a`` outside ``b``), column by column."""
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


@dataclass(frozen=True)
class DefinitionSpace:
    """The catalog's columns, their codes and its declared structural zeros.

    Attributes:
        all_codes: Every code of each source column.
        zeros: The declared structural zeros, as boxes of source columns.
        categories: Per source column, the codes of every category the catalog
            declares on it (its variable's and its groupings'): a public, fixed list.
    """

    all_codes: Mapping[str, tuple[Code, ...]]
    zeros: tuple[Box, ...] = ()
    categories: Mapping[str, frozenset[frozenset[Code]]] = field(default_factory=dict)
    _full: dict[str, frozenset[Code]] = field(default_factory=dict, repr=False, compare=False)
    _empty: dict[str, bool] = field(default_factory=dict, repr=False, compare=False)
    _narrowed: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    _index: dict[str, dict[Code, int]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._full.update({c: frozenset(v) for c, v in self.all_codes.items()})

    @classmethod
    def of(cls, catalog: Catalog) -> DefinitionSpace:
        """The space of ``catalog`` (read once per catalog)."""
        zeros = []
        for zero in catalog.structural_zeros:
            box: dict[str, frozenset[Code]] = {}
            for name, codes in zero.codes.items():
                var = catalog.variable(name)
                allowed = frozenset(c for code in codes for c in var.source_codes(code))
                box[var.column] = box[var.column] & allowed if var.column in box else allowed
            zeros.append(box)
        categories: dict[str, set[frozenset[Code]]] = {}
        for var in catalog.variables.values():
            sets = categories.setdefault(var.column, set())
            sets.update(frozenset(var.source_codes(c)) for c in var.codes)
        return cls(
            {v.column: tuple(v.codes) for v in catalog.source_variables},
            tuple(zeros),
            {c: frozenset(v) for c, v in categories.items()},
        )

    def index(self, column: str) -> dict[Code, int]:
        """Each code of ``column`` and its position (a family's coordinates)."""
        found = self._index.get(column)
        if found is None:
            found = self._index[column] = {c: i for i, c in enumerate(self.all_codes[column])}
        return found

    @functools.cached_property
    def zero_columns(self) -> tuple[str, ...]:
        """The columns some declared zero names, sorted."""
        return tuple(sorted({c for z in self.zeros for c in z}))

    def empty(self, box: Box) -> bool:
        """Whether the declared zeros say ``box`` holds no record (together, not one by one)."""
        if any(not codes for codes in box.values()):
            return True
        # Only the columns the zeros name can make a box empty: the memo's key.
        part = {c: v for c, v in box.items() if c in self._zero_set}
        key = self._memo_key(part)
        found = self._empty.get(key)
        if found is None:
            if len(self._empty) > 100_000:
                self._empty.clear()
            found = self._empty[key] = self._covered(part)
        return found

    @staticmethod
    def _memo_key(part: Mapping[str, frozenset[Code]]) -> str:
        """A memo's key for a box's conditions: text, which the garbage collector never visits."""
        return "".join(_pair_text(c, sorted_codes(part[c])) for c in sorted(part))

    @functools.cached_property
    def _zero_set(self) -> frozenset[str]:
        return frozenset(self.zero_columns)

    def _covered(self, box: Box) -> bool:
        rest: list[Box] = [box]
        for zero in self.zeros:
            if any(c in box and not (box[c] & codes) for c, codes in zero.items()):
                continue  # this zero does not meet the box
            rest = [piece for r in rest for piece in _minus(r, zero, self.all_codes)]
            if not rest:
                return True
        return False

    def narrowed(self, box: Box) -> dict[str, frozenset[Code]] | None:
        """``box`` with every code whose slice the declared zeros cover dropped; None if empty.

        Only the columns the zeros name can change, and how depends on them
        alone: the result for those columns is remembered (tables share them).
        """
        if any(not codes for codes in box.values()):
            return None
        zero_part = {c: v for c, v in box.items() if c in self._zero_set}
        key = self._memo_key(zero_part)
        part = self._narrowed.get(key, self._narrowed)
        if part is self._narrowed:
            if len(self._narrowed) > 100_000:
                self._narrowed.clear()
            part = self._narrowed[key] = self._narrow(zero_part)
        if part is None:
            return None
        return {**box, **part}  # type: ignore[dict-item]

    def _narrow(self, box: dict[str, frozenset[Code]]) -> dict[str, frozenset[Code]] | None:
        """:meth:`narrowed` on the zero columns of a box (every zero column in the result)."""
        out = dict(box)
        changed = True
        while changed:
            changed = False
            for column in self.zero_columns:
                allowed = out.get(column, self._full.get(column, frozenset()))
                keep = frozenset(
                    k for k in allowed if not self.empty({**out, column: frozenset({k})})
                )
                if not keep:
                    return None
                if keep != allowed:
                    out[column] = keep
                    changed = True
        return out

    def canonical(self, conditions: Mapping[str, Iterable[Code]]) -> Definition | None:
        """The canonical definition of a conjunction of column conditions; None if publicly empty.

        Args:
            conditions: Per microdata column, the codes allowed.
        """
        box = {c: frozenset(v) for c, v in conditions.items()}
        if self.zeros:
            narrowed = self.narrowed(box)
            if narrowed is None:
                return None
            box = narrowed
        elif any(not codes for codes in box.values()):
            return None
        out = []
        for column, allowed in box.items():
            full = self._full.get(column)
            if full is not None and allowed >= full:
                continue
            out.append((column, sorted_codes(allowed)))
        return tuple(sorted(out))

    def box(self, definition: Definition) -> dict[str, frozenset[Code]]:
        """A definition as a box."""
        return {c: frozenset(v) for c, v in definition}


def cell_definitions(
    space: DefinitionSpace,
    dimensions: Sequence[tuple[str, Sequence[Sequence[Code]]]],
    universe: Sequence[tuple[str, Sequence[Code]]],
    coords: tuple[Sequence[int], ...],
) -> list[Definition | None]:
    """The canonical definition of each cell of a table at ``coords`` (None: publicly empty).

    A cell selects the records whose code in each column lies in the
    universe's codes of that column, intersected with the members of the
    cell's category of each dimension read from it (every member at the
    dimension's total: coordinate ``len(members)``).

    Args:
        space: The catalog's definition space.
        dimensions: Per dimension, its column and each category's member codes.
        universe: The plan's universe: (column, allowed codes) pairs.
        coords: Cell coordinates in the extended arrays, one sequence per dimension.
    """
    base = {col: frozenset(codes) for col, codes in universe}
    slots: list[list[frozenset[Code]]] = []
    for _, members in dimensions:
        row = [frozenset(m) for m in members]
        row.append(frozenset().union(*row) if row else frozenset())
        slots.append(row)
    columns = [col for col, _ in dimensions]
    memo: dict[tuple[int, ...], Definition | None] = {}
    out: list[Definition | None] = []
    for cell in zip(*coords, strict=True):
        key = tuple(int(j) for j in cell)
        found = memo.get(key, memo)
        if found is memo:
            conditions = dict(base)
            for col, row, j in zip(columns, slots, key, strict=True):
                conditions[col] = conditions[col] & row[j] if col in conditions else row[j]
            found = space.canonical(conditions)
            memo[key] = found
        out.append(found)  # type: ignore[arg-type]
    return out


def domain_text(
    unit: tuple[str, tuple[str, ...]] | None, present: Sequence[tuple[str, Sequence[float]]]
) -> str:
    """What a plan's figures count, as a prefix of their definitions ('' for the records).

    A table of another unit (households, by its identifier column) and the
    base of a magnitude with item non-response (the records holding a value)
    count other things than the records under the same box.
    """
    parts = []
    if unit is not None:
        parts.append(f"unit={unit[0]}")
    parts += [f"present={column}" for column, _ in present]
    return "".join(f"{p}|" for p in parts)
