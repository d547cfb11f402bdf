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
span (:class:`_Extended`), a decomposition as small as the new sets are few;
atoms are then tested by the lengths of their projections (:func:`_derive`),
with no factorisation of the whole family and no least-squares solve. The
families a table touches are many (up to 160 in the slowest checks of
``benchmarks/bench_guard.py``) and small (the codes of one column): those of
one number of codes are worked together, stacked (zero rows pad them, adding
nothing to a span), in a few numpy calls instead of a few dozen per family.
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
        shared = _COLUMN_POSITIONS.get(self.codes)
        if shared is None:
            shared = _COLUMN_POSITIONS[self.codes] = ({c: j for j, c in enumerate(self.codes)}, {})
        self._pos, self._positions = shared
        self._unbuilt: list[frozenset[Code]] = []

    @property
    def full(self) -> bool:
        """Whether the built basis spans every code: each code's records are published."""
        return bool(self.basis.shape[0] == len(self.codes))

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
        grown = _Extended.of([self], [fresh], [[float(new[s]) for s in fresh]])
        basis, records = grown.basis_of(0) if fresh else (self.basis, self.records)
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
        _build([self])

    def _take(self, basis: npt.NDArray[np.float64], records: npt.NDArray[np.float64]) -> None:
        self.basis, self.records = basis, records


def _build(families: Sequence[Family]) -> None:
    """Fold each family's sets published since into its basis, records and atoms, together."""
    todo = [f for f in families if f._unbuilt]
    for stack in _stacks(todo, [0] * len(todo)).values():
        group = [todo[i] for i in stack]
        values = [[f.sizes.get(s, math.nan) for s in f._unbuilt] for f in group]
        grown = _Extended.of(group, [f._unbuilt for f in group], values)
        labels = _refine(np.stack([f.labels for f in group]), grown.vectors)
        for i, f in enumerate(group):
            f._take(*grown.basis_of(i))
            f.labels = labels[i]
            f.covered = f.covered | grown.touched[i]
            f._unbuilt = []


def _stacks(families: Sequence[Family], rows: Sequence[int]) -> dict[tuple[int, int], list[int]]:
    """Families stacked together: of one number of codes and of rows within a factor of 2.

    ``rows`` are the sets each brings; with its basis they set its height, and
    a stack is as high as its highest family (one family folding in thousands
    of sets after a restart must not pad a hundred small ones to its size).
    """
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (f, k) in enumerate(zip(families, rows, strict=True)):
        height = f.basis.shape[0] + len(f._unbuilt) + k
        groups.setdefault((len(f.codes), height.bit_length()), []).append(i)
    return groups


@dataclass
class _Extended:
    """Families of one number of codes, each extended by its sets: stacked, zero rows padding.

    The part of the sets off a family's span (projected out twice: "twice is
    enough" keeps it orthogonal to the basis) is decomposed by a small SVD,
    ``U S V'`` (one per family, in one numpy call); its directions ``V'`` with
    singular values above the span tolerance extend the basis. Along them the
    records ``h`` solve ``values - (sets B') g = U S h``.

    Attributes:
        basis: (families, rank, codes): each basis, zero rows after its rank.
        records: (families, rank): the records along them (``basis @ c``).
        added: (families, sets, codes): the new directions, zero rows after
            ``count``, orthogonal to the basis.
        added_records: (families, sets): the records along them.
        count: (families,): how many directions the sets added.
        ranks: (families,): the rank before.
        vectors: (families, sets, codes): the sets' indicators.
        touched: (families, codes): codes some set holds.
    """

    basis: npt.NDArray[np.float64]
    records: npt.NDArray[np.float64]
    added: npt.NDArray[np.float64]
    added_records: npt.NDArray[np.float64]
    count: npt.NDArray[np.intp]
    ranks: npt.NDArray[np.intp]
    vectors: npt.NDArray[np.float64]
    touched: npt.NDArray[np.bool_]

    @classmethod
    def of(
        cls,
        families: Sequence[Family],
        sets: Sequence[Sequence[frozenset[Code]]],
        values: Sequence[Sequence[float]],
    ) -> _Extended:
        """Extend each family's basis by the indicators of its ``sets``, of records ``values``."""
        ranks = np.array([f.basis.shape[0] for f in families], dtype=np.intp)
        n, rank, most = len(families[0].codes), int(ranks.max()), max(len(v) for v in sets)
        basis = np.zeros((len(families), rank, n))
        records = np.zeros((len(families), rank))
        stacked = np.zeros((len(families), most, n))
        sizes = np.zeros((len(families), most))
        # Every family's indicators in one assignment: (family, set, code) triples.
        where: list[npt.NDArray[np.intp]] = []
        for i, (f, v, y) in enumerate(zip(families, sets, values, strict=True)):
            basis[i, : ranks[i]], records[i, : ranks[i]] = f.basis, f.records
            where.extend(f._where(codes) for codes in v)
            sizes[i, : len(v)] = y
        if where:
            counts = np.array([len(w) for w in where], dtype=np.intp)
            per_family = np.array([len(v) for v in sets], dtype=np.intp)
            family_of = np.repeat(np.arange(len(families)), per_family)
            first = np.cumsum(per_family) - per_family
            set_of = np.arange(len(where)) - np.repeat(first, per_family)
            stacked[
                np.repeat(family_of, counts), np.repeat(set_of, counts), np.concatenate(where)
            ] = 1.0
        along = stacked @ basis.transpose(0, 2, 1)
        residual = stacked - along @ basis
        residual -= (residual @ basis.transpose(0, 2, 1)) @ basis
        u, singular, vt = np.linalg.svd(residual, full_matrices=False)
        keep = singular > _SPAN_TOLERANCE  # a prefix: singular values fall
        left = sizes - np.einsum("fkr,fr->fk", along, records)
        h = np.einsum("fkm,fk->fm", u, left) / np.where(keep, singular, 1.0)
        return cls(
            basis,
            records,
            vt * keep[:, :, None],
            np.where(keep, h, 0.0),
            keep.sum(axis=1),
            ranks,
            stacked,
            np.asarray((stacked > 0).any(axis=1), dtype=bool),
        )

    def basis_of(self, i: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Family ``i``'s extended basis and records, unpadded."""
        r, k = int(self.ranks[i]), int(self.count[i])
        return (
            np.vstack([self.basis[i, :r], self.added[i, :k]]),
            np.concatenate([self.records[i, :r], self.added_records[i, :k]]),
        )


Task = tuple[Family, Sequence[frozenset[Code]], Mapping[frozenset[Code], int] | None]


def derive(tasks: Sequence[Task]) -> list[tuple[Atoms, list[int]]]:
    """For each (family, new code sets, their sizes): the atoms they make derivable, and records.

    The atoms are derivable with the new sets and not before, and neither
    published nor new themselves. Their records come from the sizes (an
    empty list when ``sizes`` is None). The families are worked together,
    stacked by their number of codes and height (:func:`_stacks`).
    """
    out: list[tuple[Atoms, list[int]]] = [([], []) for _ in tasks]
    fresh = {}
    for i, (family, new, _) in enumerate(tasks):
        if family.full:
            continue  # every code is derivable already: nothing can become so
        sets = [s for s in dict.fromkeys(new) if s not in family.published]
        if sets and family.members:  # else nothing new in the family: no algebra at all
            fresh[i] = sets
    _build([tasks[i][0] for i in fresh])
    work = []
    for i, sets in fresh.items():
        family = tasks[i][0]
        if family.full:
            continue
        if len(sets) == 1 and not family.covered[family._where(sets[0])].any():
            # One new set sharing no code with the published ones: the span gains
            # a direction apart from theirs, and the new set is an atom of its own.
            continue
        work.append(i)
    stacks = _stacks([tasks[i][0] for i in work], [len(fresh[i]) for i in work])
    for stack in stacks.values():
        group = [work[k] for k in stack]
        found = _derive([tasks[i] for i in group], [fresh[i] for i in group])
        for i, result in zip(group, found, strict=True):
            out[i] = result
    return out


def _derive(
    tasks: Sequence[Task], news: Sequence[list[frozenset[Code]]]
) -> list[tuple[Atoms, list[int]]]:
    """:func:`derive` for built families of one number of codes, each with new sets.

    Work is in the atoms of the published and new sets (every vector here is
    constant on them): with ``E`` an atom's indicator, ``B`` the basis before
    and ``Q`` the directions the new sets add (orthogonal to ``B``), the atom
    is off the span before when ``|E|^2 - |B E|^2 > 0`` and on it after when
    ``|E|^2 - |B E|^2 - |Q E|^2 = 0``; its records are ``B E . g + Q E . h``.
    ``B E`` sums ``B``'s columns over the atom's codes: one ``reduceat`` over
    the columns of every family, sorted by family and atom.
    """
    families = [t[0] for t in tasks]
    values = [
        [math.nan] * len(sets) if t[2] is None else [float(t[2][s]) for s in sets]
        for t, sets in zip(tasks, news, strict=True)
    ]
    grown = _Extended.of(families, news, values)
    out: list[tuple[Atoms, list[int]]] = [([], []) for _ in tasks]
    live = np.flatnonzero(grown.count > 0)  # else the span is the same: nothing new
    if not len(live):
        return out
    n = len(families[0].codes)
    labels = _refine(np.stack([families[i].labels for i in live]), grown.vectors[live])
    covered = np.stack([families[i].covered for i in live]) | grown.touched[live]
    # One key per code: its family, then its atom (n for codes no set holds).
    keys = (np.arange(len(live))[:, None] * (n + 1) + np.where(covered, labels, n)).ravel()
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    atom_family, atom_label = np.divmod(keys[starts], n + 1)
    rank = grown.basis.shape[1]
    both = np.concatenate([grown.basis[live], grown.added[live]], axis=1)
    on = np.add.reduceat(both.transpose(1, 0, 2).reshape(both.shape[1], -1)[:, order], starts, 1)
    width = np.diff(np.r_[starts, len(keys)])
    before = width - (on[:rank] ** 2).sum(axis=0)
    after = before - (on[rank:] ** 2).sum(axis=0)
    found = (atom_label < n) & (after < _SPAN_TOLERANCE2) & (before >= _SPAN_TOLERANCE2)
    if not found.any():
        return out
    along = np.concatenate([grown.records[live], grown.added_records[live]], axis=1)
    counts = (on * along[atom_family].T).sum(axis=0)
    unknown: set[int] = set()  # families with a size unknown (NaN records)
    for a in np.flatnonzero(found).tolist():
        j = int(live[atom_family[a]])
        family, mine = families[j], news[j]
        positions = order[starts[a] : starts[a] + width[a]] % n
        atom = frozenset(family.codes[k] for k in positions.tolist())
        if atom not in family.published and atom not in mine:
            out[j][0].append(atom)
            if math.isnan(counts[a]):
                unknown.add(j)
            else:
                out[j][1].append(round(float(counts[a])))
    for j, (family, _, sizes) in enumerate(tasks):
        if sizes is None:
            out[j] = (out[j][0], [])
        elif j in unknown:
            out[j] = (out[j][0], family.counts(out[j][0], sizes))  # solve with the known
    return out


def _refine(
    labels: npt.NDArray[np.int64], vectors: npt.NDArray[np.float64]
) -> npt.NDArray[np.int64]:
    """Per family, the partition ``labels`` refined by membership in each of ``vectors``.

    Args:
        labels: (families, codes), or (codes,) for one family.
        vectors: (families, sets, codes), or (sets, codes); zero rows refine nothing.

    Memberships are packed 40 to an integer beside the label (labels number
    fewer than the codes); each pass numbers the distinct keys of each family
    in their sorted order.
    """
    if labels.ndim == 1:
        one: npt.NDArray[np.int64] = _refine(labels[None], vectors[None])[0]
        return one
    refined = labels.astype(np.int64)
    bits = (vectors > 0).astype(np.int64)
    for start in range(0, bits.shape[1], 40):
        chunk = bits[:, start : start + 40]
        weights = np.left_shift(np.int64(1), np.arange(chunk.shape[1], dtype=np.int64))
        keys = (refined << np.int64(chunk.shape[1])) | np.einsum("c,fcn->fn", weights, chunk)
        order = np.argsort(keys, axis=1, kind="stable")
        ranked = np.take_along_axis(keys, order, axis=1)
        step = np.ones(ranked.shape, dtype=np.int64)
        step[:, 0] = 0
        step[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
        refined = np.empty_like(refined)
        np.put_along_axis(refined, order, np.cumsum(step, axis=1), axis=1)
    out: npt.NDArray[np.int64] = refined
    return out


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
