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
``v . c = (B v) . g``. One singular value decomposition of the basis and new
sets, with their sizes beside them, gives the new basis and its records
(:func:`_fold`).

The families a table touches are many (up to 160 in the slowest checks of
``benchmarks/bench_guard.py``) and small (the codes of one column), so the
work is done for all families of the same number of codes at once: stacked
(zero rows pad them, adding nothing to a span), in a few numpy calls instead
of a few dozen per family (:func:`derive`).
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
#: A singular value below this is a dependent direction: indicators hold 0 and 1
#: and basis rows are unit vectors, so never a short independent one.
_RANK_TOLERANCE = 1e-9

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
        _build([self])
        fresh = [s for s in new if s not in self.published]
        if np.isnan(self.records).any():
            return self._counts_known(atoms, new)
        vectors = self.indicators(fresh)
        stacked = np.vstack([self.basis, vectors])
        if not stacked.shape[0]:
            return [0 for _ in atoms]  # nothing published: only empty atoms are "derivable"
        values = np.concatenate([self.records, [float(new[s]) for s in fresh]])
        basis, records = _fold(stacked[None], values[None])
        along = self.indicators(atoms) @ basis[0].T
        return [round(float(r)) for r in along @ records[0]]

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


def _fold(
    stacked: npt.NDArray[np.float64], values: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per stacked family, an orthonormal basis of its rows' span and the records along it.

    Args:
        stacked: (families, rows, codes): a basis and indicators, zero rows padding.
        values: (families, rows): the records along each row (``row @ c``).

    Returns:
        (families, rank, codes) bases, rows past a family's rank zero, and
        (families, rank) records. With ``stacked = U S V'``, ``c``'s least
        squares solution is ``V S^-1 U' values``, so along ``V'`` it is ``S^-1 U' values``.
    """
    u, singular, vt = np.linalg.svd(stacked, full_matrices=False)
    keep = singular > _RANK_TOLERANCE
    rank = int(keep.sum(axis=1).max(initial=0))
    u, singular, vt, keep = u[:, :, :rank], singular[:, :rank], vt[:, :rank], keep[:, :rank]
    basis = vt * keep[:, :, None]
    along = np.einsum("frk,fr->fk", u, values) / np.where(keep, singular, 1.0)
    return basis, np.where(keep, along, 0.0)


def _build(families: Sequence[Family]) -> None:
    """Fold each family's sets published since into its basis, records and atoms, at once."""
    todo = [f for f in families if f._unbuilt]
    for group in _by_width(todo).values():
        vectors = [f.indicators(f._unbuilt) for f in group]
        rows = max(f.basis.shape[0] + len(v) for f, v in zip(group, vectors, strict=True))
        stacked = np.zeros((len(group), rows, len(group[0].codes)))
        values = np.zeros((len(group), rows))
        for i, (f, v) in enumerate(zip(group, vectors, strict=True)):
            r = f.basis.shape[0]
            stacked[i, :r], stacked[i, r : r + len(v)] = f.basis, v
            values[i, :r] = f.records
            values[i, r : r + len(v)] = [f.sizes.get(s, math.nan) for s in f._unbuilt]
        basis, records = _fold(stacked, values)
        for i, (f, v) in enumerate(zip(group, vectors, strict=True)):
            rank = int(np.count_nonzero(basis[i].any(axis=1)))
            f.basis, f.records = basis[i, :rank], records[i, :rank]
            f.labels = _refine(f.labels, v)
            f.covered = f.covered | (v > 0).any(axis=0)
            f._unbuilt = []


def _by_width(families: Sequence[Family]) -> dict[int, list[Family]]:
    groups: dict[int, list[Family]] = {}
    for f in families:
        groups.setdefault(len(f.codes), []).append(f)
    return groups


Task = tuple[Family, Sequence[frozenset[Code]], Mapping[frozenset[Code], int] | None]


def derive(tasks: Sequence[Task]) -> list[tuple[Atoms, list[int]]]:
    """For each (family, new code sets, their sizes): the atoms they make derivable, and records.

    The atoms are derivable with the new sets and not before, and neither
    published nor new themselves. Their records come from the sizes (an
    empty list when ``sizes`` is None). All families are worked together,
    stacked by their number of codes.
    """
    out: list[tuple[Atoms, list[int]]] = [([], []) for _ in tasks]
    live: list[int] = []
    fresh: dict[int, list[frozenset[Code]]] = {}
    for i, (family, new, _) in enumerate(tasks):
        sets = [s for s in dict.fromkeys(new) if s not in family.published]
        if sets and family.members:  # else nothing new in the family: no algebra at all
            fresh[i] = sets
            live.append(i)
    _build([tasks[i][0] for i in live])
    by_width: dict[int, list[int]] = {}
    for i in live:
        family = tasks[i][0]
        if len(fresh[i]) == 1 and not family.indicator(fresh[i][0])[family.covered].any():
            # One new set sharing no code with the published ones: the span gains
            # a direction apart from theirs, and the new set is an atom of its own.
            continue
        by_width.setdefault(len(family.codes), []).append(i)
    for group in by_width.values():
        for i, result in zip(
            group, _derive_width([(tasks[i], fresh[i]) for i in group]), strict=True
        ):
            out[i] = result
    return out


def _stack_bases(
    families: Sequence[Family], extra: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], int]:
    """The families' bases and records stacked, with ``extra`` free rows after the longest."""
    rank = max(f.basis.shape[0] for f in families)
    n = len(families[0].codes)
    stacked = np.zeros((len(families), rank + extra, n))
    values = np.zeros((len(families), rank + extra))
    for i, f in enumerate(families):
        stacked[i, : f.basis.shape[0]] = f.basis
        values[i, : f.basis.shape[0]] = f.records
    return stacked, values, rank


def _derive_width(
    work: Sequence[tuple[Task, list[frozenset[Code]]]],
) -> list[tuple[Atoms, list[int]]]:
    """:func:`derive` for families of one number of codes, built, each with new sets."""
    families = [task[0] for task, _ in work]
    n = len(families[0].codes)
    most = max(len(sets) for _, sets in work)
    stacked, values, rank = _stack_bases(families, most)
    basis = stacked[:, :rank]
    vectors = np.zeros((len(work), most, n))
    for i, ((family, _, sizes), sets) in enumerate(work):
        family.indicators(sets, out=vectors[i])
        stacked[i, rank : rank + len(sets)] = vectors[i, : len(sets)]
        values[i, rank : rank + len(sets)] = [math.nan if sizes is None else sizes[s] for s in sets]
    residual = vectors - (vectors @ basis.transpose(0, 2, 1)) @ basis
    grows = (np.linalg.norm(residual, axis=2) >= _SPAN_TOLERANCE).any(axis=1)
    out: list[tuple[Atoms, list[int]]] = [([], []) for _ in work]
    if not grows.any():
        return out  # the spans are the same: whatever is derivable now was before
    keep = np.flatnonzero(grows)
    after, records = _fold(stacked[keep], values[keep])
    # Each family's atoms with the new sets, one row per label (rows of absent
    # labels are zero: "in the span" before, so never new).
    labels = np.stack([_refine(families[i].labels, vectors[i]) for i in keep])
    covered = np.stack([families[i].covered for i in keep]) | (vectors[keep] > 0).any(axis=1)
    atoms = ((labels[:, None, :] == np.arange(n)[None, :, None]) & covered[:, None, :]).astype(
        np.float64
    )
    before = basis[keep]
    off = atoms - (atoms @ before.transpose(0, 2, 1)) @ before
    was = np.linalg.norm(off, axis=2) < _SPAN_TOLERANCE
    along = atoms @ after.transpose(0, 2, 1)
    now = np.linalg.norm(atoms - along @ after, axis=2) < _SPAN_TOLERANCE
    found = now & ~was
    counts = np.einsum("fak,fk->fa", along, records)
    for j, i in enumerate(keep.tolist()):
        family, sets, sizes = families[i], work[i][1], work[i][0][2]
        mine = set(sets)
        codes = family.codes
        got: Atoms = []
        tally: list[int] = []
        for a in np.flatnonzero(found[j]).tolist():
            atom = frozenset(codes[k] for k in np.flatnonzero(atoms[j, a]).tolist())
            if atom in family.published or atom in mine:
                continue
            got.append(atom)
            if sizes is not None and not math.isnan(counts[j, a]):
                tally.append(round(float(counts[j, a])))
        if got and sizes is not None and len(tally) < len(got):
            tally = family.counts(got, sizes)  # a size unknown: solve with the known ones
        out[i] = (got, tally)
    return out


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
