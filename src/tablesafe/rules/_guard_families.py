"""The sliver guard's families: which atoms a table makes derivable, and their records.

A family is the published code sets of one context, one column and one
breakdown (:mod:`tablesafe.rules._guard`). Its sets' indicators over the
column's codes span a space; an *atom* (codes that belong to the same sets)
is published by difference when its indicator lies in that span. A new table
brings new sets; the atoms derivable with them and not before, with their
records, are what the guard compares with ``sliver_min_difference``.

A family keeps an orthonormal basis ``B`` of its span and the records of the
basis directions, ``g = B c`` where ``c`` holds each code's records: a set's
size is its indicator times ``c``, so the sizes of the published sets give
``c``'s projection on the span, and any vector ``v`` of the span has
``v . c = (B v) . g``. New sets extend both with the part of them off the
span (:func:`_extend`), a decomposition as small as the new sets are few;
atoms are then tested by the lengths of their projections (:func:`_derive`),
with no factorisation of the whole family and no least-squares solve.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tablesafe.catalog._catalog import Code

__all__ = ["Family", "derivable_atoms", "derive"]

#: A residual shorter than this is in the span (indicators hold 0 and 1).
_SPAN_TOLERANCE = 1e-6
#: The same for squared lengths found by difference (|E|^2 - |B E|^2), whose
#: rounding is about 1e-13 for a column's codes.
_SPAN_TOLERANCE2 = 1e-11

#: Per column's codes: each code's position, and the positions of each code set seen.
_COLUMN_POSITIONS: dict[
    tuple[Code, ...], tuple[dict[Code, int], dict[frozenset[Code], npt.NDArray[np.intp]]]
] = {}

Atoms = list[frozenset[Code]]


@dataclass
class Family:
    """The published code sets of one family (one context, one column, one breakdown).

    Kept up to date as sets are published: an orthonormal basis of the span of
    their indicators and the records along it, the partition of the codes by
    membership (atoms), the codes some set holds, and the distinct code sets.

    Args:
        codes: Every code of the column, the coordinates of the indicators.
    """

    codes: tuple[Code, ...]
    basis: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 0)))
    # The records along each basis row (``basis @ c``); NaN when a set was
    # published without its size (then counts() solves with the sizes known).
    records: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    labels: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    covered: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))
    published: set[frozenset[Code]] = field(default_factory=set)
    sizes: dict[frozenset[Code], int] = field(default_factory=dict)  # records of each set
    members: int = 0
    seen: tuple[int, int] = (0, 0)  # rows of the index read: (family, defined as)

    def __post_init__(self) -> None:
        n = len(self.codes)
        self.basis = np.zeros((0, n))
        self.labels = np.zeros(n, dtype=np.int64)
        self.covered = np.zeros(n, dtype=bool)
        # Families of one column share its code positions and the positions of
        # each code set seen: indicators are built without a loop over codes.
        self._pos, self._positions = _COLUMN_POSITIONS.setdefault(
            self.codes, ({c: j for j, c in enumerate(self.codes)}, {})
        )
        self._unbuilt: list[frozenset[Code]] = []

    def _where(self, codes: frozenset[Code]) -> npt.NDArray[np.intp]:
        where = self._positions.get(codes)
        if where is None:
            where = np.array([self._pos[c] for c in codes if c in self._pos], dtype=np.intp)
            self._positions[codes] = where
        return where

    def indicator(self, codes: frozenset[Code]) -> npt.NDArray[np.float64]:
        """The indicator vector of a code set."""
        out: npt.NDArray[np.float64] = self.indicators([codes])[0]
        return out

    def indicators(
        self, sets: Sequence[frozenset[Code]], out: npt.NDArray[np.float64] | None = None
    ) -> npt.NDArray[np.float64]:
        """The indicator vectors of code sets, one row each (into ``out``'s first rows)."""
        if out is None:
            out = np.zeros((len(sets), len(self.codes)))
        if sets:
            where = [self._where(s) for s in sets]
            rows = np.repeat(np.arange(len(sets)), [len(w) for w in where])
            out[rows, np.concatenate(where)] = 1.0
        return out

    def add(self, codes: frozenset[Code]) -> None:
        """Publish one more code set in the family."""
        self.add_many([codes])

    def add_many(self, sets: Sequence[frozenset[Code]], sizes: Sequence[int] | None = None) -> None:
        """Publish code sets in the family (folded into the basis when next needed).

        Args:
            sets: The code sets on the family's column.
            sizes: Their records (the same code set in one context always has
                the same records), if known.
        """
        self.members += len(sets)
        for s, n in zip(sets, sizes or (), strict=False):
            self.sizes.setdefault(s, n)
        fresh = [s for s in dict.fromkeys(sets) if s not in self.published]
        self.published.update(fresh)
        self._unbuilt.extend(fresh)

    def newly_derivable(self, new: Sequence[frozenset[Code]]) -> Atoms:
        """Atoms that ``new`` code sets make derivable, not published themselves."""
        return derive([(self, new, None)])[0][0]

    def counts(
        self, atoms: Sequence[frozenset[Code]], new: Mapping[frozenset[Code], int]
    ) -> list[int]:
        """The records of derivable ``atoms``, from the sizes of the sets that derive them.

        A set's size is the sum of its codes' records, so an atom's indicator
        written as a combination of sets' indicators gives its records as the
        same combination of their sizes: no query of the microdata.

        Args:
            atoms: Code sets in the span of the published and ``new`` sets.
            new: The new table's code sets with their sizes.
        """
        if not atoms:
            return []
        self._build()
        fresh = [s for s in new if s not in self.published]
        vectors = self.indicators(fresh)
        basis, records, _ = _extend(
            self.basis, self.records, vectors, np.array([new[s] for s in fresh], dtype=float)
        )
        if np.isnan(records).any():
            return self._counts_known(atoms, new)
        along = self.indicators(atoms) @ basis.T
        return [round(float(r)) for r in along @ records]

    def _counts_known(
        self, atoms: Sequence[frozenset[Code]], new: Mapping[frozenset[Code], int]
    ) -> list[int]:
        """:meth:`counts` by least squares over every set of known size (some have none)."""
        known = {**new, **{s: n for s, n in self.sizes.items() if s not in new}}
        sets = list(known)
        matrix = self.indicators(sets).T  # codes x sets
        targets = self.indicators(atoms).T  # codes x atoms
        coef, *_ = np.linalg.lstsq(matrix, targets, rcond=None)
        records = coef.T @ np.array([known[s] for s in sets], dtype=np.float64)
        return [round(float(r)) for r in records]

    def _build(self) -> None:
        """Fold the sets published since into the basis, its records and the atoms."""
        if not self._unbuilt:
            return
        vectors = self.indicators(self._unbuilt)
        values = np.array([self.sizes.get(s, math.nan) for s in self._unbuilt], dtype=float)
        self.basis, self.records, _ = _extend(self.basis, self.records, vectors, values)
        self.labels = _refine(self.labels, vectors)
        self.covered = self.covered | (vectors > 0).any(axis=0)
        self._unbuilt = []


def _extend(
    basis: npt.NDArray[np.float64],
    records: npt.NDArray[np.float64],
    vectors: npt.NDArray[np.float64],
    values: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], int]:
    """An orthonormal basis of the span of ``basis`` and ``vectors``, with its records.

    The part of the vectors off the span (projected out twice: "twice is
    enough" keeps it orthogonal to the basis) is decomposed by one small SVD,
    ``U S V'``; its directions ``V'`` with singular values above the span
    tolerance extend the basis. Along them the records ``h`` solve
    ``values - (vectors B') records = U S h``.

    Args:
        basis: (rank, codes) orthonormal rows.
        records: The records along each basis row (``basis @ c``).
        vectors: (sets, codes) indicators.
        values: The sets' records (NaN where unknown).

    Returns:
        The basis, its records, and how many directions the vectors added.
    """
    if not len(vectors):
        return basis, records, 0
    along = vectors @ basis.T
    residual = vectors - along @ basis
    residual -= (residual @ basis.T) @ basis
    u, singular, vt = np.linalg.svd(residual, full_matrices=False)
    keep = singular > _SPAN_TOLERANCE
    added = int(keep.sum())
    if not added:
        return basis, records, 0
    h = (u[:, :added].T @ (values - along @ records)) / singular[:added]
    return np.vstack([basis, vt[:added]]), np.concatenate([records, h]), added


Task = tuple[Family, Sequence[frozenset[Code]], Mapping[frozenset[Code], int] | None]


def derive(tasks: Sequence[Task]) -> list[tuple[Atoms, list[int]]]:
    """For each (family, new code sets, their sizes): the atoms they make derivable, and records.

    The atoms are derivable with the new sets and not before, and neither
    published nor new themselves. Their records come from the sizes (an
    empty list when ``sizes`` is None).
    """
    return [_derive(family, new, sizes) for family, new, sizes in tasks]


def _derive(
    family: Family, new: Sequence[frozenset[Code]], sizes: Mapping[frozenset[Code], int] | None
) -> tuple[Atoms, list[int]]:
    """:func:`derive` for one family.

    Work is in the atoms of the published and new sets (every vector here is
    constant on them): with ``E`` an atom's indicator, ``B`` the basis before
    and ``Q`` the directions the new sets add (orthogonal to ``B``), the atom
    is off the span before when ``|E|^2 - |B E|^2 > 0`` and on it after when
    ``|E|^2 - |B E|^2 - |Q E|^2 = 0``; its records are ``B E . g + Q E . h``.
    """
    sets = [s for s in dict.fromkeys(new) if s not in family.published]
    if not sets or not family.members:
        return [], []  # nothing new in the family: no linear algebra at all
    family._build()
    vectors = family.indicators(sets)
    if len(sets) == 1 and not vectors[0][family.covered].any():
        # One new set sharing no code with the published ones: the span gains
        # a direction apart from theirs, and the new set is an atom of its own.
        return [], []
    values = np.full(len(sets), math.nan) if sizes is None else np.array([sizes[s] for s in sets])
    basis, records, added = _extend(family.basis, family.records, vectors, values.astype(float))
    if not added:
        return [], []  # the span is the same: whatever is derivable now was before
    covered = family.covered | (vectors > 0).any(axis=0)
    where = np.flatnonzero(covered)
    _, atom_of = np.unique(_refine(family.labels, vectors)[where], return_inverse=True)
    onehot = np.zeros((len(family.codes), int(atom_of.max()) + 1))
    onehot[where, atom_of] = 1.0
    width = onehot.sum(axis=0)  # |E|^2
    on = basis @ onehot  # B E, then Q E
    rank = family.basis.shape[0]
    before = width - (on[:rank] ** 2).sum(axis=0)
    after = before - (on[rank:] ** 2).sum(axis=0)
    found = np.flatnonzero((after < _SPAN_TOLERANCE2) & (before >= _SPAN_TOLERANCE2))
    if not len(found):
        return [], []
    counts = on[:, found].T @ records
    mine = set(sets)
    got: Atoms = []
    tally: list[int] = []
    for a, n in zip(found.tolist(), counts.tolist(), strict=True):
        atom = frozenset(family.codes[k] for k in where[atom_of == a].tolist())
        if atom not in family.published and atom not in mine:
            got.append(atom)
            tally.append(0 if math.isnan(n) else round(n))
    if sizes is None:
        return got, []
    if np.isnan(counts).any():
        return got, family.counts(got, sizes)  # a size unknown: solve with the known ones
    return got, tally


def _refine(
    labels: npt.NDArray[np.int64], vectors: npt.NDArray[np.float64]
) -> npt.NDArray[np.int64]:
    """The partition ``labels`` refined by membership in each of ``vectors``.

    Memberships are packed 40 to an integer beside the label (labels number
    fewer than the codes), so each pass is a one-dimensional ``np.unique``.
    Zero rows (padding) refine nothing.
    """
    refined = labels.astype(np.int64)
    bits = vectors > 0
    for start in range(0, len(bits), 40):
        chunk = bits[start : start + 40]
        weights = np.left_shift(np.int64(1), np.arange(len(chunk), dtype=np.int64))
        keys = (refined << np.int64(len(chunk))) | (weights @ chunk.astype(np.int64))
        _, inverse = np.unique(keys, return_inverse=True)
        refined = inverse.reshape(-1).astype(np.int64)
    return refined


def derivable_atoms(
    full: Sequence[Code], old: Sequence[frozenset[Code]], new: Sequence[frozenset[Code]]
) -> Atoms:
    """Code sets that adding and subtracting ``old`` and ``new`` sets yields, and ``old`` alone not.

    The atoms are the classes of codes that belong to the same sets; an atom
    is derivable when its indicator is a linear combination of the sets'
    indicators. Atoms that are one of the sets are published as they are.

    Args:
        full: Every code of the column.
        old: Code sets already published (in one context).
        new: Code sets the new table publishes in that context.
    """
    family = Family(tuple(full))
    for codes in old:
        family.add(codes)
    return family.newly_derivable(new)
