"""The largest privacy loss of any possible record, from published definitions alone.

A published figure is a cell of some table: the records whose code in each
microdata column lies in an allowed set (a *box*). The loss of a record is
the sum, over the distinct figures whose box holds it, of what each figure
spends (its epsilon; or its delta, or 1 to count figures). The ledger needs
the largest loss over **every record that could exist** (every combination
of the catalog's codes), not only the records the microdata hold: that is
the add-one-record bound DP promises, and it depends on the published
definitions alone, so a refusal for budget reveals nothing about the
microdata (docs/attacks.md, "The privacy ledger").

**Families.** The figures of one grouping set of one table, of one kind,
share a box (the table's universe) and split it along the grouping set's
dimensions: a :class:`Family` holds the box, one axis per dimension (each
code of the column maps to the categories holding it) and the number of
new figures at each grid cell. A record is in at most one cell of a family
whose categories do not overlap, so a family adds at most its weight times
its largest count. An axis along which the counts do not change is dropped
(every category holds the same number of figures), so a table published
for the first time is one box per grouping set and kind.

**Search.** :func:`max_loss` is a branch and bound over columns: it picks
the column most families restrict, splits its codes into atoms (codes no
family tells apart), and descends into each atom with the families that
allow it, reduced by that column; the bound of a node is the sum of its
families' largest contributions. A code no family names never does better
than a named one (the families that restrict the column give it nothing,
the others give every code the same), so only named codes are tried. The
search is exact; past ``node_limit`` nodes it returns an upper bound and
says so.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tablesafe.catalog._variables import Code

__all__ = ["QUANTITIES", "Family", "Loss", "make_family", "max_loss"]

#: What a family's weights hold, per figure: epsilon, delta, rho (epsilon^2 / 2, zCDP),
#: 1 (figures), 1 for a figure without an epsilon (uncovered).
QUANTITIES = ("epsilon", "delta", "rho", "figures", "uncovered")

#: Nodes the search visits before it settles for an upper bound.
NODE_LIMIT = 20_000

#: Largest (grid cells x families) evaluated at once rather than searched further.
DENSE_WORK = 1 << 22

#: Two losses closer than this (relative) are equal: sums of 0.1 must meet a budget of 3.
TOLERANCE = 1e-9


@dataclass(frozen=True, eq=False)
class Family:
    """Figures of one kind that split one box along some columns.

    Attributes:
        weights: Per figure, each of :data:`QUANTITIES`.
        box: Per restricted column, the codes a record may have.
        axes: The columns the figures split the box by.
        slots: Per axis, each code of the column and the categories (axis
            positions) that hold it.
        counts: Figures per cell of the axes' grid (a 0-d array without axes).
        new: Whether the figures belong to the table being checked.
        overlap: The most categories of its axes one code is in (their product).
        privacy: What one figure spends, as the accountant composes it
            (:mod:`tablesafe.rules._ledger_pld`'s descriptor); empty for a
            figure without a privacy figure.
    """

    weights: tuple[float, ...]
    box: Mapping[str, frozenset[Code]]
    axes: tuple[str, ...]
    slots: tuple[Mapping[Code, tuple[int, ...]], ...]
    counts: npt.NDArray[np.int64]
    new: bool = False
    overlap: int = field(default=1)
    privacy: str = ""

    def top(self, q: int) -> float:
        """The most quantity ``q`` one record can take from this family."""
        return self.weights[q] * self.top_count()

    def top_count(self) -> float:
        """The most figures of this family one record can be in."""
        return float(self.counts.max()) * self.overlap


@functools.lru_cache(maxsize=4096)
def _slot_map(
    members: tuple[tuple[Code, ...], ...],
) -> tuple[Mapping[Code, tuple[int, ...]], int]:
    """Each code with the categories holding it, and the most categories one code is in.

    Shared by every family over the same categories: never changed.
    """
    out: dict[Code, list[int]] = {}
    for j, codes in enumerate(members):
        for c in codes:
            out.setdefault(c, []).append(j)
    return {c: tuple(v) for c, v in out.items()}, max((len(v) for v in out.values()), default=1)


def make_family(
    weights: tuple[float, ...],
    box: Mapping[str, frozenset[Code]],
    dims: Sequence[tuple[str, Sequence[Iterable[Code]]]],
    counts: npt.NDArray[np.int64],
    *,
    new: bool = False,
    privacy: str = "",
) -> Family | None:
    """A family, its constant axes dropped; ``None`` when it holds no figure.

    Args:
        weights: Per figure, each of :data:`QUANTITIES`.
        box: The table's universe as allowed codes per restricted column
            (a dimension's column included when its categories do not cover
            every code of the catalog).
        dims: Per axis, its column and each category's codes (within ``box``).
        counts: Figures per cell of the dimensions' grid.
        new: Whether the figures belong to the table being checked.
        privacy: What one figure spends (the accountant's descriptor).
    """
    counts = np.asarray(counts, dtype=np.int64)
    if not counts.any():
        return None
    axes: list[str] = []
    slots: list[Mapping[Code, tuple[int, ...]]] = []
    overlap = 1
    keep = []
    for a, (column, members) in enumerate(dims):
        slot, most = _slot_map(tuple(tuple(m) for m in members))
        if most == 1 and np.all(counts == counts.take([0], axis=a)):
            continue  # every category holds as many figures: the box says who gets them
        used = np.atleast_1d(counts.any(axis=tuple(i for i in range(counts.ndim) if i != a)))
        axes.append(column)
        slots.append(
            slot if used.all() else {c: v for c, v in slot.items() if any(used[j] for j in v)}
        )
        overlap *= most
        keep.append(a)
    dropped = tuple(a for a in range(counts.ndim) if a not in keep)
    reduced = counts[tuple(0 if a in dropped else slice(None) for a in range(counts.ndim))]
    return Family(weights, dict(box), tuple(axes), tuple(slots), reduced, new, overlap, privacy)


@dataclass(frozen=True)
class Loss:
    """The largest loss found, and whether the search finished (else an upper bound)."""

    value: float
    exact: bool


@dataclass
class _Fam:
    """A family in the search: one quantity's weight, and what is left of its box and axes."""

    w: float
    box: Mapping[str, frozenset[Code]]  # never changed in place: shared by the search's nodes
    axes: tuple[str, ...]
    slots: tuple[Mapping[Code, tuple[int, ...]], ...]
    counts: npt.NDArray[np.int64]
    new: bool
    overlap: int
    top: float

    def constrains(self, column: str) -> bool:
        return column in self.box or column in self.axes

    def at(self, column: str, code: Code) -> _Fam | None:
        """This family for records with ``code`` in ``column``; None when it gives them nothing."""
        box = self.box
        if column in box:
            if code not in box[column]:
                return None
            box = {c: v for c, v in box.items() if c != column}
        if column not in self.axes:
            return _Fam(
                self.w, box, self.axes, self.slots, self.counts, self.new, self.overlap, self.top
            )
        a = self.axes.index(column)
        held = self.slots[a].get(code, ())
        if not held:
            return None
        counts = np.asarray(self.counts.take(held[0], axis=a))
        for j in held[1:]:
            counts = counts + self.counts.take(j, axis=a)
        if not counts.any():
            return None
        most = max((len(v) for v in self.slots[a].values()), default=1)
        overlap = self.overlap // most
        axes = self.axes[:a] + self.axes[a + 1 :]
        slots = self.slots[:a] + self.slots[a + 1 :]
        top = self.w * float(counts.max()) * overlap
        return _Fam(self.w, box, axes, slots, counts, self.new, overlap, top)


@dataclass
class _Search:
    q: int
    touched_only: bool
    node_limit: int
    best: float = -np.inf
    bound: float = -np.inf
    nodes: int = 0


def max_loss(
    families: Sequence[Family],
    q: int = 0,
    *,
    weight: Callable[[Family], float] | None = None,
    touched_only: bool = False,
    node_limit: int | None = None,
) -> Loss:
    """The largest quantity ``q`` any possible record takes from ``families``.

    Args:
        families: The figures published (and those of a table being checked).
        q: Which of :data:`QUANTITIES` (0: epsilon).
        weight: Instead of ``q``, what one figure of a family weighs (the
            ledger counts the figures of one privacy descriptor with it).
        touched_only: Only records that take something from a ``new`` family
            (the records a table being checked would spend on).
        node_limit: Nodes to visit before settling for an upper bound
            (default: :data:`NODE_LIMIT`).

    Returns:
        The largest loss (0 when no record takes anything), exact or an upper bound.
    """
    weigh = weight if weight is not None else (lambda f: f.weights[q])
    kept = [(w, f) for f in families if (w := weigh(f)) > 0]
    if touched_only:
        # Only records a new family holds count: a family sharing none of them adds nothing.
        new = [f for _, f in kept if f.new]
        kept = [(w, f) for w, f in kept if f.new or any(_meets(f, g) for g in new)]
    fams = [
        _Fam(w, f.box, f.axes, f.slots, f.counts, f.new, f.overlap, w * f.top_count())
        for w, f in kept
    ]
    state = _Search(q, touched_only, NODE_LIMIT if node_limit is None else node_limit)
    _descend(state, fams, 0.0, False)
    value = max(state.best, state.bound)
    return Loss(max(float(value), 0.0), state.bound == -np.inf)


def _allowed(f: Family, column: str) -> Iterable[Code] | None:
    """The codes of ``column`` a record of one of ``f``'s figures may have (None: any)."""
    codes: Iterable[Code] | None = f.box.get(column)
    if column in f.axes:
        held = f.slots[f.axes.index(column)].keys()
        codes = held if codes is None else frozenset(codes) & held
    return codes


def _meets(f: Family, g: Family) -> bool:
    """Whether some record could be in a figure of ``f`` and one of ``g``."""
    for column in {*f.box, *f.axes} & {*g.box, *g.axes}:
        a, b = _allowed(f, column), _allowed(g, column)
        if a is not None and b is not None and frozenset(a).isdisjoint(b):
            return False
    return True


def _fold(fams: list[_Fam], const: float, touched: bool) -> tuple[list[_Fam], float, bool]:
    """Families left with nothing to restrict become a constant; equal boxes are merged.

    Families are shared between sibling nodes, so a merge makes a new one.
    """
    out: list[_Fam] = []
    boxes: dict[tuple[frozenset[tuple[str, frozenset[Code]]], bool], list[_Fam]] = {}
    for f in fams:
        if not f.box and not f.axes:
            const += f.top
            touched = touched or f.new
        elif f.axes:
            out.append(f)
        else:
            boxes.setdefault((frozenset(f.box.items()), f.new), []).append(f)
    for same in boxes.values():
        f = same[0]
        if len(same) > 1:
            top = sum(g.top for g in same)
            f = _Fam(top, f.box, (), (), np.ones((), dtype=np.int64), f.new, 1, top)
        out.append(f)
    return out, const, touched


def _descend(state: _Search, fams: list[_Fam], const: float, touched: bool) -> None:
    fams, const, touched = _fold(fams, const, touched)
    if state.touched_only and not touched and not any(f.new for f in fams):
        return
    ub = const + sum(f.top for f in fams)
    if ub <= state.best + TOLERANCE * max(1.0, abs(state.best)):
        return
    if not fams:
        state.best = const
        return
    state.nodes += 1
    if state.nodes > state.node_limit:
        state.bound = max(state.bound, ub)
        return
    if _grid_cells(fams) * len(fams) <= DENSE_WORK:
        _dense(state, fams, const, touched)
        return
    column = _column(fams)
    inside = [f for f in fams if f.constrains(column)]
    outside = [f for f in fams if not f.constrains(column)]
    children = []
    for code in _atoms(inside, column):
        child = [g for f in inside if (g := f.at(column, code)) is not None]
        children.append((sum(g.top for g in child), child))
    # Most promising first: a good incumbent early prunes the rest.
    for _, child in sorted(children, key=lambda c: -c[0]):
        _descend(state, outside + child, const, touched)


def _grid_cells(fams: list[_Fam]) -> int:
    """At most how many classes of codes the columns the families name make together."""
    named: dict[str, set[Code]] = {}
    for f in fams:
        for c, allowed in f.box.items():
            named.setdefault(c, set()).update(allowed)
        for c, slot in zip(f.axes, f.slots, strict=True):
            named.setdefault(c, set()).update(slot)
    return math.prod(len(v) for v in named.values())


def _dense(state: _Search, fams: list[_Fam], const: float, touched: bool) -> None:
    """Every class of codes at once: the families' sum on the grid of the columns' classes."""
    columns = sorted({c for f in fams for c in (*f.box, *f.axes)})
    reps = {c: _atoms([f for f in fams if f.constrains(c)], c) for c in columns}
    shape = tuple(len(reps[c]) for c in columns)
    total = np.full(shape, const, dtype=np.float64)
    hit = np.full(shape, touched, dtype=bool)
    boxes: dict[tuple[tuple[str, ...], bool], list[_Fam]] = {}
    for f in fams:
        if f.axes:
            part = _on_grid(f, columns, reps)
            total = total + f.w * part
            if f.new:
                hit |= part > 0
        else:
            boxes.setdefault((tuple(sorted(f.box)), f.new), []).append(f)
    for (cols, new), group in boxes.items():
        part = _boxes_on_grid(group, cols, columns, reps)
        total = total + part
        if new:
            hit |= part > 0
    where = hit if state.touched_only else np.ones(shape, dtype=bool)
    if where.any():
        state.best = max(state.best, float(total[where].max()))


def _boxes_on_grid(
    group: list[_Fam], cols: tuple[str, ...], columns: list[str], reps: dict[str, list[Code]]
) -> npt.NDArray[np.float64]:
    """The sum of families with boxes on the same columns (no axes): one tensor contraction."""
    mats = []
    for c in cols:
        pos = {code: i for i, code in enumerate(reps[c])}
        m = np.zeros((len(group), len(pos)))
        for k, f in enumerate(group):
            # Each class lies wholly inside or outside a box: its code decides.
            m[k, [pos[code] for code in f.box[c] if code in pos]] = 1.0
        mats.append(m)
    weights = np.array([f.top for f in group])
    letters = "abcdefghijklmnopqrstuvwxy"[: len(cols)]
    spec = "z," + ",".join(f"z{x}" for x in letters) + "->" + letters
    part = np.einsum(spec, weights, *mats) if cols else np.asarray(weights.sum())
    return np.asarray(part).reshape([len(reps[c]) if c in cols else 1 for c in columns])


def _on_grid(f: _Fam, columns: list[str], reps: dict[str, list[Code]]) -> npt.NDArray[np.float64]:
    """The figures family ``f`` gives each class of the grid (broadcastable to it)."""
    part = np.asarray(f.counts, dtype=np.float64)
    have = list(f.axes)
    for a, c in enumerate(f.axes):
        # Class x of column c is in the categories that hold its code (overlaps add up).
        held = np.zeros((len(reps[c]), part.shape[a]))
        for i, code in enumerate(reps[c]):
            held[i, list(f.slots[a].get(code, ()))] = 1.0
        part = np.moveaxis(np.tensordot(part, held, axes=([a], [1])), -1, a)
    for c, allowed in f.box.items():
        inside = np.array([code in allowed for code in reps[c]], dtype=np.float64)
        if c in have:
            a = have.index(c)
            part = part * inside.reshape([-1 if i == a else 1 for i in range(part.ndim)])
        else:
            part = part[..., None] * inside
            have.append(c)
    order = sorted(range(len(have)), key=lambda i: columns.index(have[i]))
    part = np.transpose(part, order)
    placed = [columns.index(have[i]) for i in order]
    return part.reshape([len(reps[c]) if j in placed else 1 for j, c in enumerate(columns)])


def _column(fams: list[_Fam]) -> str:
    """The column the most weight depends on (ties: the first name)."""
    score: dict[str, float] = {}
    for f in fams:
        for c in (*f.box, *f.axes):
            score[c] = score.get(c, 0.0) + f.top
    return min(score, key=lambda c: (-score[c], c))


def _atoms(inside: list[_Fam], column: str) -> list[Code]:
    """One code per class of the codes of ``column`` that no family in ``inside`` tells apart.

    A code's signature lists the families whose box allows it and the categories
    holding it; it is built from what each family names, so the cost is the size
    of the families' conditions, not codes times families.
    """
    sig: dict[Code, list[object]] = {}
    for i, f in enumerate(inside):
        if column in f.box:
            for code in f.box[column]:
                sig.setdefault(code, []).append(i)
        if column in f.axes:
            for code, held in f.slots[f.axes.index(column)].items():
                sig.setdefault(code, []).append((i, held))
    seen: dict[tuple[object, ...], Code] = {}
    # In a fixed order (sets of text codes iterate in a per-process order), so that a
    # search stopped at its node limit gives the same bound in every process.
    for code in sorted(sig, key=_code_order):
        seen.setdefault(tuple(sig[code]), code)
    return list(seen.values())


def _code_order(code: Code) -> tuple[int, int, str]:
    return (0, code, "") if isinstance(code, int) else (1, 0, str(code))
