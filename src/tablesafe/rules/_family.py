"""One family of published figures: exact linear algebra over the codes of one column.

Figures whose definitions agree on every column but one, ``c``, are a
*family*: each is the records of a common context with ``c`` in a set of
codes, so any combination of them with integer (or rational) coefficients
is a figure too. The account (:mod:`tablesafe.rules._account`) asks two
questions of a family when a new table adds figures to it:

* **What becomes derivable.** The codes of ``c`` split into *blocks*, the
  partition the family's sets generate; a block is *derivable* when its
  indicator is a linear combination of the sets' (a set minus a union of
  published parts, a parent minus its children).
* **What is measured again.** A new set that is already a combination of
  published ones is a fresh noisy measurement of something the published
  figures determine: differences with it measure every derivable block
  inside it once more (the average of many such measurements is exact).

Everything is exact: vectors over blocks with integer coordinates, or
:class:`fractions.Fraction` where a division leaves one, in reduced row
echelon form, each row carrying the combination of sets it stands for (so a
block's count and key sum follow from the sets' by the same combination). No
floating point, no tolerance.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from tablesafe.catalog._variables import Code

__all__ = ["Atoms", "Name", "Span", "Vector", "indicator", "is_published", "new", "partition",
           "position", "proportional", "published"]  # fmt: skip

#: A sparse vector: coordinate -> non-zero coefficient (an int where it is one: exact and fast).
Vector = dict[int, int | Fraction]
#: A set's name in a span: :func:`published` or :func:`new` (an int: a span's dictionaries
#: then hold no object the garbage collector has to visit).
Name = int
#: A combination of the sets a row stands for: set name -> coefficient.
Combination = dict[Name, int | Fraction]


def published(row: int) -> Name:
    """The name of the account's figure at ``row``."""
    return 2 * row


def new(position: int) -> Name:
    """The name of a new table's figure at ``position``."""
    return 2 * position + 1


def is_published(name: Name) -> bool:
    """Whether ``name`` is a published figure's (else a new table's)."""
    return name % 2 == 0


def position(name: Name) -> int:
    """The row (published) or position (new) a name stands for."""
    return name // 2


def partition(sets: Iterable[frozenset[Code]]) -> dict[Code, int]:
    """The blocks the sets generate: each code -> its block's number.

    Two codes share a block when every set holds both or neither. Blocks are
    numbered in the order their first code appears in the sets given.
    """
    signature: dict[Code, list[int]] = {}
    for i, s in enumerate(sets):
        for code in s:
            signature.setdefault(code, []).append(i)
    blocks: dict[tuple[int, ...], int] = {}
    out: dict[Code, int] = {}
    for code, sig in signature.items():
        out[code] = blocks.setdefault(tuple(sig), len(blocks))
    return out


class Atoms:
    """The blocks a growing collection of sets generates, refined one set at a time.

    Two coordinates share a block while every set added holds both or
    neither. A span of the sets' indicators has at most as many dimensions
    as there are blocks, and when it has that many it holds every union of
    blocks: a set that splits no block is then in it, with no arithmetic.
    """

    def __init__(self) -> None:
        self.of: dict[int, int] = {}  # coordinate -> its block
        self.sizes: dict[int, int] = {}  # block -> its number of coordinates
        self._next = 0

    def copy(self) -> Atoms:
        """An independent copy."""
        other = Atoms()
        other.of, other.sizes, other._next = dict(self.of), dict(self.sizes), self._next
        return other

    def __len__(self) -> int:
        return len(self.sizes)

    def add(self, coordinates: Iterable[int]) -> bool:
        """Refine the blocks by a set of coordinates; whether any block split or appeared."""
        inside: dict[int, list[int]] = {}
        fresh = []
        for c in coordinates:
            b = self.of.get(c)
            if b is None:
                fresh.append(c)
            else:
                inside.setdefault(b, []).append(c)
        changed = False
        for b, held in inside.items():
            if len(held) < self.sizes[b]:  # the set holds part of the block: split it
                self.sizes[b] -= len(held)
                self._block(held)
                changed = True
        if fresh:
            self._block(fresh)
            changed = True
        return changed

    def _block(self, coordinates: list[int]) -> None:
        b = self._next
        self._next += 1
        for c in coordinates:
            self.of[c] = b
        self.sizes[b] = len(coordinates)


def _axpy(
    target: dict[Any, int | Fraction], factor: int | Fraction, row: dict[Any, int | Fraction]
) -> None:
    """``target += factor * row``, dropping zeros (for vectors and combinations alike)."""
    for k, v in row.items():
        new = target.get(k, 0) + factor * v
        if not new:
            target.pop(k, None)
        elif type(new) is int:
            target[k] = new
        else:
            target[k] = _tidy(new)


def _tidy(value: int | Fraction) -> int | Fraction:
    """A Fraction that is a whole number as an int (ints keep the arithmetic fast)."""
    if isinstance(value, Fraction) and value.denominator == 1:
        return int(value)
    return value


@dataclass
class Span:
    """The exact span of a set of vectors, in reduced row echelon form.

    ``rows`` maps each pivot coordinate to (row, combination): every row has
    a 1 at its pivot and 0 at every other row's pivot; the combination says
    which of the added vectors (by the names given to :meth:`add`) it is.
    ``holders`` maps each other coordinate to the pivots whose rows hold it,
    so a new pivot is cleared from those rows only. Copies share their rows
    (rows are replaced, never changed in place).
    """

    rows: dict[int, tuple[Vector, Combination]] = field(default_factory=dict)
    # Sets as dicts of None: a dict of ints is one the garbage collector never visits.
    holders: dict[int, dict[int, None]] = field(default_factory=dict)

    def copy(self) -> Span:
        """An independent span with the same rows."""
        return Span(dict(self.rows), {k: dict(v) for k, v in self.holders.items()})

    def __len__(self) -> int:
        return len(self.rows)

    def reduce(self, vector: Vector) -> tuple[Vector, Combination]:
        """``vector`` minus its part in the span, and the combination subtracted (negated)."""
        rest = dict(vector)
        used: Combination = {}
        for pivot in sorted(rest.keys() & self.rows.keys()):
            factor = rest.get(pivot)
            if not factor:
                continue
            row, comb = self.rows[pivot]
            _axpy(rest, -factor, row)
            _axpy(used, factor, comb)
        return rest, used

    def residual(self, vector: Vector) -> Vector:
        """``vector`` minus its part in the span (:meth:`reduce` without the combination)."""
        rest = dict(vector)
        rows = self.rows
        for pivot in sorted(rest.keys() & rows.keys()):
            factor = rest.get(pivot)
            if factor:
                _axpy(rest, -factor, rows[pivot][0])
        return rest

    def derivable(self) -> set[int]:
        """The coordinates whose unit vector is in the span.

        In reduced form a unit vector reduces to nothing exactly when its
        coordinate is a pivot whose row is that unit vector: no reduction needed.
        """
        return {p for p, (row, _) in self.rows.items() if len(row) == 1}

    def contains(self, vector: Vector) -> bool:
        """Whether ``vector`` is a linear combination of the span's vectors."""
        return not self.residual(vector)

    def express(self, vector: Vector) -> Combination | None:
        """The combination of added vectors equal to ``vector`` (None: not in the span)."""
        rest, used = self.reduce(vector)
        return None if rest else used

    def add(self, vector: Vector, name: Name) -> bool:
        """Add ``vector`` (called ``name``); whether the span grew."""
        # Most vectors added to a family's span are in it already: the
        # residual alone (integers, no combination) says so at half the cost.
        if not self.residual(vector):
            return False
        rest, used = self.reduce(vector)
        comb: Combination = {name: 1}
        _axpy(comb, -1, used)
        pivot = min(rest)
        lead = rest[pivot]
        if lead == 1:
            row = rest
        elif lead == -1:
            row = {k: -v for k, v in rest.items()}
            comb = {k: -v for k, v in comb.items()}
        else:
            scale = Fraction(1) / lead
            row = {k: _tidy(v * scale) for k, v in rest.items()}
            comb = {k: _tidy(v * scale) for k, v in comb.items()}
        # Keep the form reduced: clear the new pivot from the rows that hold it.
        for p in sorted(self.holders.pop(pivot, ())):
            other, other_comb = self.rows[p]
            factor = other[pivot]
            new_row, new_comb = dict(other), dict(other_comb)
            _axpy(new_row, -factor, row)
            _axpy(new_comb, -factor, comb)
            self.rows[p] = (new_row, new_comb)
            self._hold(p, other, new_row)
        self.rows[pivot] = (row, comb)
        self._hold(pivot, {}, row)
        return True

    def _hold(self, pivot: int, before: Vector, after: Vector) -> None:
        """Keep ``holders`` for a row of ``pivot`` that went from ``before`` to ``after``."""
        for k in before.keys() - after.keys():
            if k != pivot:
                self.holders.get(k, {}).pop(pivot, None)
        for k in after.keys() - before.keys():
            if k != pivot:
                self.holders.setdefault(k, {})[pivot] = None


def proportional(a: Vector, b: Vector) -> bool:
    """Whether two non-zero vectors are multiples of one another.

    With ``a`` the residual of a new set ``X`` against a span ``K`` and ``b``
    a block's, the block is in ``K + X`` exactly when they are: then
    ``b = alpha * a`` and the block is ``alpha X`` plus what ``K`` gives.
    """
    if len(a) != len(b) or a.keys() != b.keys():
        return False
    k = next(iter(a))
    ratio = Fraction(b[k]) / a[k]
    return all(Fraction(v) == ratio * a[key] for key, v in b.items())


def indicator(blocks: Sequence[int] | frozenset[int]) -> Vector:
    """The 0/1 vector of a set of blocks."""
    return dict.fromkeys(blocks, 1)
