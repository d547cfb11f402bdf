"""Perturbation tables: one type for every cell-wise mechanism (DESIGN decision 3).

A :class:`PTable` is a family of discrete distributions ``p(v | i)`` of the
perturbation ``v`` given a cell's original sample count ``i``. Rows are
selected by the count:

* **by value** (``selector="value"``): rows ``0 .. L``; the last row stands
  for every larger count (the convention of the Destatis R package
  ``ptable``);
* **by residue** (``"residue"``, PRAM's large cells, seed 000 Table 3):
  counts ``0 .. S-1`` use rows by value, counts from ``S`` on use row
  ``count mod M`` of a second block of ``M`` rows;
* **looped** (``"loop"``, ABS/ONS sampled ptables): rows ``0 .. L``; counts
  above ``L`` reuse the rows ``start .. L`` cyclically (ONS: rows 0-750,
  counts above 750 loop onto rows 501-750).

Each row holds perturbations ``v`` and their probabilities ``p`` *in lookup
order*: the cumulative intervals ``[p_int_lb, p_int_ub)`` follow that order
and a uniform ``u`` in [0, 1) picks the ``v`` whose interval holds it
(inverse-CDF lookup). The order is usually ascending ``v`` (-D .. D), but a
file may rearrange or split intervals (the R package's
``modify_cnt_ptable``), so it is kept as given and a ``v`` may appear twice.

Privacy figures (see ``docs/ptable.md``). For neighbouring counts ``i`` and
``i + 1`` (one record more in the cell) with distributions ``P_i(j)`` of the
published count ``j``:

* the *largest log-ratio* is ``max_j |log P_i(j) / P_{i+1}(j)|`` over the
  outputs ``j`` that both counts can produce;
* the *unbounded mass* is the largest probability, in either order, of the
  outputs that one count can produce and the other cannot (their ratio is
  unbounded);
* ``delta(epsilon)`` is the hockey-stick divergence
  ``max over both orders of sum_j max(0, P_a(j) - e^epsilon P_b(j))``: the
  smallest ``delta`` for which the pair satisfies
  ``P_a(S) <= e^epsilon P_b(S) + delta`` for every set of outputs ``S``.

A ptable's ``epsilon`` is its design epsilon where it has one (DP), else
the largest log-ratio over all neighbouring pairs; its ``delta`` is the
largest ``delta(epsilon)`` over all pairs. For the capped discretised
Laplace mechanism this is the probability at the cap (seed 000,
Section 3.1).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ParameterError, choice

__all__ = ["Layout", "PTable", "PrivacyFigures", "Selector"]


class Selector(StrEnum):
    """How a count selects its row (the module docstring; a member equals its text)."""

    VALUE = "value"
    RESIDUE = "residue"
    LOOP = "loop"


class Layout(StrEnum):
    """CSV layouts: the Destatis probability layout and the ABS/ONS sampled layout."""

    DESTATIS = "destatis"
    ABS = "abs"


#: Rows must sum to 1 within this tolerance (files round to 8 digits).
_TOL = 1e-6
#: Bins of the guide table that resolves most lookups without a search.
_GUIDE_BINS = 4096
#: Counts below this are mapped to rows through a cached table, not arithmetic.
_COUNT_TABLE_MAX = 1 << 20
#: The ONS convention for sampled ptables: rows 0..750, counts above loop onto 501..750.
ONS_LAST_ROW = 750
ONS_LOOP_START = 501


@dataclass(frozen=True)
class PrivacyFigures:
    """Privacy figures of a ptable between neighbouring counts.

    Attributes:
        epsilon: The epsilon at which ``delta`` is given: the design epsilon
            of the mechanism where it has one, else ``max_log_ratio``.
        delta: The smallest delta at that epsilon (hockey-stick divergence),
            over every pair of neighbouring counts, in both orders.
        worst_count: The count ``i`` of the pair ``(i, i + 1)`` that sets ``delta``.
        max_log_ratio: The largest finite ``|log P_i(j) / P_{i+1}(j)|``.
        unbounded_mass: The largest probability of outputs that only one of
            two neighbouring counts can produce (``delta`` at epsilon = inf).
    """

    epsilon: float
    delta: float
    worst_count: int
    max_log_ratio: float = 0.0
    unbounded_mass: float = 0.0


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_row(values: npt.ArrayLike, probs: npt.ArrayLike, where: str) -> tuple[Any, Any]:
    """Validate one row; keep its lookup order, drop zero-probability entries."""
    try:
        v = np.asarray(values, dtype=np.float64)
        p = np.asarray(probs, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"{where}: perturbations and probabilities must be numbers") from None
    if v.shape != p.shape or v.ndim != 1 or v.size == 0:
        raise ParameterError(
            f"{where}: perturbations and probabilities must be non-empty lists of equal length"
        )
    if not np.all(np.isfinite(v)) or np.any(v != np.round(v)):
        raise ParameterError(f"{where}: perturbations must be integers")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ParameterError(f"{where}: probabilities must be finite and non-negative")
    total = float(p.sum())
    if abs(total - 1.0) > _TOL:
        raise ParameterError(f"{where}: probabilities sum to {total:.8f}, not 1 (within {_TOL})")
    keep = p > 0
    vi = v[keep].astype(np.int64)
    pk = p[keep] / p[keep].sum()
    vi.setflags(write=False)
    pk.setflags(write=False)
    return vi, pk


@dataclass(frozen=True, eq=False)
class PTable:
    """A perturbation table ``p(v | i)`` with a row selector.

    Build one with a constructor (:func:`tablesafe.mechanisms.dp_geometric`,
    ``pram_shlomo_young``, ``drop_add_q``, ``destatis``), :meth:`from_rows`
    or :func:`tablesafe.ptable.read_ptable`. Instances are immutable; rows are validated and
    normalised on construction.

    Attributes:
        name: Short name of the mechanism (``dp``, ``pram``, ``q``, ``ckm``, ...).
        rows: Per row, the perturbations ``v`` and their probabilities, in
            lookup order (the order of the cumulative intervals).
        selector: ``"value"``, ``"residue"`` or ``"loop"`` (module docstring).
        residue_rows: For ``"residue"``: the ``modulus`` rows of the residue classes.
        modulus: For ``"residue"``: the modulus M.
        loop_start: For ``"loop"``: the first row of the loop.
        parameters: The constructor's parameters (public; go into table metadata).
        paper: The source of the mechanism.
        sampled: For a sampled (ABS/ONS) ptable, the perturbation for each
            row and integer cell key, shape ``(len(rows), K)`` with K a power
            of two (256 or 4096 in practice); cells are then looked up by
            ``cell_key mod K`` exactly as those tools do.

    Raises:
        ParameterError: for rows that do not sum to 1, negative
            probabilities, non-integer perturbations, a row that would make
            its count negative, or an inconsistent selector.
    """

    name: str
    rows: tuple[tuple[np.ndarray, np.ndarray], ...]
    selector: Selector = Selector.VALUE
    residue_rows: tuple[tuple[np.ndarray, np.ndarray], ...] = ()
    modulus: int = 0
    loop_start: int = 0
    parameters: Mapping[str, Any] = field(default_factory=dict)
    paper: str = ""
    sampled: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not self.rows:
            raise ParameterError("a ptable needs at least one row")
        rows = tuple(_check_row(v, p, f"row {i}") for i, (v, p) in enumerate(self.rows))
        residues = tuple(
            _check_row(v, p, f"residue row {m}") for m, (v, p) in enumerate(self.residue_rows)
        )
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "residue_rows", residues)
        object.__setattr__(self, "parameters", dict(self.parameters))
        # A text is accepted and held as its member from here on.
        object.__setattr__(self, "selector", choice(Selector, self.selector, "selector"))
        if self.selector == Selector.RESIDUE:
            if not _is_int(self.modulus) or self.modulus < 1 or len(residues) != self.modulus:
                raise ParameterError(
                    "a residue selector needs a modulus M >= 1 and exactly M residue rows"
                )
        elif residues:
            raise ParameterError("residue rows need selector='residue'")
        if self.selector == Selector.LOOP and not (
            _is_int(self.loop_start) and 0 <= self.loop_start < len(rows)
        ):
            raise ParameterError(
                f"the loop must start at one of the ptable's rows 0 .. {len(rows) - 1}"
            )
        # No row may make its count negative: a value row i serves counts >= i.
        for i, (v, _) in enumerate(rows):
            if v.min() < -i:
                raise ParameterError(
                    f"row {i}: perturbation {v.min()} would make the count {i} negative"
                )
        for m, (v, _) in enumerate(residues):
            first = len(rows) + (m - len(rows)) % self.modulus
            if v.min() < -first:
                raise ParameterError(
                    f"residue row {m}: perturbation {v.min()} would make the count {first} negative"
                )
        if self.sampled is not None:
            s = np.asarray(self.sampled, dtype=np.int64)
            k = s.shape[1] if s.ndim == 2 else 0
            if s.ndim != 2 or s.shape[0] != len(rows) or k < 1 or k & (k - 1) or k > 2**32:
                raise ParameterError(
                    "sampled must have one row per ptable row and a power-of-two number of "
                    "cell keys (256 or 4096)"
                )
            s.setflags(write=False)
            object.__setattr__(self, "sampled", s)
        self._build_lookup()

    def _build_lookup(self) -> None:
        # Identical rows share one entry of the lookup arrays (drop/add-up-to-q has
        # 602 rows but 8 distinct ones); fewer rows make every search faster.
        all_rows = list(self.rows) + list(self.residue_rows)
        uid: dict[tuple[bytes, bytes], int] = {}
        row_uid = np.empty(len(all_rows), dtype=np.int64)
        distinct: list[tuple[np.ndarray, np.ndarray]] = []
        for r, (v, p) in enumerate(all_rows):
            key = (v.tobytes(), p.tobytes())
            if key not in uid:
                uid[key] = len(distinct)
                distinct.append((v, p))
            row_uid[r] = uid[key]
        width = max(len(v) for v, _ in distinct)
        n = len(distinct)
        values = np.zeros((n, width), dtype=np.int64)
        cum = np.ones((n, width), dtype=np.float64)
        for r, (v, p) in enumerate(distinct):
            values[r, : len(v)] = v
            values[r, len(v) :] = v[-1]
            c = np.cumsum(p)
            c[-1] = 1.0  # the last interval always closes at 1
            cum[r, : len(c)] = c
        object.__setattr__(self, "_row_uid", row_uid)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_cum", cum)
        object.__setattr__(self, "_guide", None)
        object.__setattr__(self, "_count_table", None)
        object.__setattr__(self, "_figures", None)

    # -- construction ---------------------------------------------------------------

    @classmethod
    def from_rows(
        cls,
        name: str,
        rows: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]],
        *,
        residue_rows: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]] = (),
        modulus: int = 0,
        selector: Selector | None = None,
        loop_start: int = 0,
        parameters: Mapping[str, Any] | None = None,
        paper: str = "",
    ) -> PTable:
        """Build a ptable from rows of (perturbations, probabilities) in lookup order.

        Args:
            name: Short name of the mechanism.
            rows: Row ``i``: the perturbations and their probabilities.
            residue_rows: Rows by residue class (PRAM's large cells).
            modulus: The modulus of the residue classes.
            selector: Default: ``"residue"`` with residue rows, else ``"value"``.
            loop_start: For ``selector="loop"``: the first row of the loop.
            parameters: Public parameters of the mechanism.
            paper: The source of the mechanism.

        Raises:
            ParameterError: see :class:`PTable`.
        """
        sel = selector or (Selector.RESIDUE if residue_rows else Selector.VALUE)
        return cls(
            name=name,
            rows=tuple((np.asarray(v), np.asarray(p)) for v, p in rows),
            selector=sel,
            residue_rows=tuple((np.asarray(v), np.asarray(p)) for v, p in residue_rows),
            modulus=modulus,
            loop_start=loop_start,
            parameters=dict(parameters or {}),
            paper=paper,
        )

    # -- row selection --------------------------------------------------------------

    @property
    def n_rows(self) -> int:
        """Number of rows, residue rows included."""
        return len(self.rows) + len(self.residue_rows)

    def row_labels(self) -> list[str]:
        """A label per row: ``"3"`` for a value row, ``"mod 15 = 4"`` for a residue row."""
        last = len(self.rows) - 1
        labels = [str(i) for i in range(len(self.rows))]
        if self.selector == Selector.VALUE:
            labels[last] = f">={last}" if last > 0 else "all"
        labels += [f"mod {self.modulus} = {m}" for m in range(len(self.residue_rows))]
        return labels

    def row_index(self, counts: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The row used for each count (residue rows numbered after the value rows).

        Raises:
            ParameterError: for negative or non-integer counts.
        """
        c = _counts(counts)
        last = len(self.rows) - 1
        if self.selector == Selector.RESIDUE:
            return np.where(c < len(self.rows), c, len(self.rows) + c % self.modulus)
        if self.selector == Selector.LOOP:
            span = last - self.loop_start + 1
            return np.where(c <= last, c, self.loop_start + (c - self.loop_start) % span)
        return np.minimum(c, last)

    def _distinct_rows(self, c: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The distinct-row id of each count (index into the lookup arrays)."""
        if c.size == 0:
            return np.zeros(0, dtype=np.int64)
        row_uid: np.ndarray = self._row_uid  # type: ignore[attr-defined]
        if self.selector == Selector.VALUE:
            return np.asarray(row_uid[np.minimum(c, len(self.rows) - 1)])
        hi = int(c.max())
        if hi < _COUNT_TABLE_MAX:
            # A table indexed by the count beats a modulo over every cell.
            table: np.ndarray | None = self._count_table  # type: ignore[attr-defined]
            if table is None or table.size <= hi:
                size = max(hi + 1, 2 * (table.size if table is not None else 0), 1024)
                size = min(size, _COUNT_TABLE_MAX)
                table = row_uid[self.row_index(np.arange(size))]
                object.__setattr__(self, "_count_table", table)
            return np.asarray(table[c])
        return np.asarray(row_uid[self.row_index(c)])

    # -- application ----------------------------------------------------------------

    def perturbation(
        self,
        counts: npt.ArrayLike,
        u: npt.ArrayLike,
        cell_key: npt.ArrayLike | None = None,
    ) -> npt.NDArray[np.int64]:
        """The perturbation ``v`` of each cell by inverse-CDF lookup of its uniform.

        Args:
            counts: Original sample counts (non-negative integers).
            u: Uniforms in [0, 1), one per cell (for cell keys:
                ``(cell_key + 0.5) / 2**32``).
            cell_key: The cells' integer keys (uint32 sums mod 2**32). A
                sampled ptable looks cells up by ``cell_key mod K`` (exact,
                since K divides 2**32), as the ABS method and the ONS package
                do; without keys (dynamic seeds) it uses column ``floor(u * K)``.
                Ignored by probability ptables, which use ``u``.

        Returns:
            ``v`` with ``counts + v >= 0``, as int64, in the shape of ``counts``.

        Raises:
            ParameterError: for negative counts, uniforms outside [0, 1) or
                arrays of different shapes.
        """
        c = _counts(counts)
        uu = np.asarray(u, dtype=np.float64)
        if uu.shape != c.shape:
            raise ParameterError(
                f"counts and uniforms must have the same shape, not {c.shape} and {uu.shape}"
            )
        if uu.size:
            lo, hi = float(uu.min()), float(uu.max())
            if not (lo >= 0.0 and hi < 1.0):  # also rejects NaN
                raise ParameterError("uniforms must lie in [0, 1)")
        flat_c = c.ravel()
        if self.sampled is not None:
            rows = self.row_index(flat_c)
            k = self.sampled.shape[1]
            if cell_key is not None:
                ck = np.asarray(cell_key)
                if ck.shape != c.shape:
                    raise ParameterError("cell keys must have the same shape as the counts")
                col = (ck.ravel().astype(np.uint64) % np.uint64(k)).astype(np.int64)
            else:
                col = np.minimum((uu.ravel() * k).astype(np.int64), k - 1)
            return np.asarray(self.sampled[rows, col], dtype=np.int64).reshape(c.shape)
        rid = self._distinct_rows(flat_c)
        return self._lookup(rid, uu.ravel()).reshape(c.shape)

    def apply(
        self,
        counts: npt.ArrayLike,
        u: npt.ArrayLike,
        cell_key: npt.ArrayLike | None = None,
    ) -> npt.NDArray[np.int64]:
        """Perturbed counts ``counts + v`` (see :meth:`perturbation`; never negative)."""
        c = _counts(counts)
        return np.asarray(np.maximum(c + self.perturbation(c, u, cell_key), 0), dtype=np.int64)

    def _guide_table(self) -> np.ndarray:
        # Guide table (Chen & Asau): bin b = floor(u * G) of row r holds the answer
        # when no interval bound falls strictly inside [b/G, (b+1)/G), else a
        # sentinel. G is a power of two, so u * G and b / G are exact in floating
        # point and the guide gives exactly what the full search gives.
        guide: np.ndarray | None = self._guide  # type: ignore[attr-defined]
        if guide is not None:
            return guide
        cum: np.ndarray = self._cum  # type: ignore[attr-defined]
        values: np.ndarray = self._values  # type: ignore[attr-defined]
        g = _GUIDE_BINS
        edges = np.arange(g + 1, dtype=np.float64) / g
        out = np.empty((cum.shape[0], g), dtype=np.int64)
        for r in range(cum.shape[0]):
            low = np.searchsorted(cum[r], edges[:-1], side="right")
            high = np.searchsorted(cum[r], edges[1:], side="left")
            out[r] = np.where(low == high, values[r, np.minimum(low, cum.shape[1] - 1)], _SENTINEL)
        guide = out.ravel()
        object.__setattr__(self, "_guide", guide)
        return guide

    def _lookup(self, rid: npt.NDArray[np.int64], u: npt.NDArray[np.float64]) -> np.ndarray:
        guide = self._guide_table()
        key = rid * _GUIDE_BINS
        key += (u * _GUIDE_BINS).astype(np.int64)
        out = guide[key]
        unresolved = np.flatnonzero(out == _SENTINEL)
        if unresolved.size:
            out[unresolved] = self._search(rid[unresolved], u[unresolved])
        return out

    def _search(self, rid: npt.NDArray[np.int64], u: npt.NDArray[np.float64]) -> np.ndarray:
        # Row by row, on the exact cumulative bounds: shifting u by the row number
        # (one flat search) would round u and could flip a lookup next to a bound.
        cum: np.ndarray = self._cum  # type: ignore[attr-defined]
        values: np.ndarray = self._values  # type: ignore[attr-defined]
        width = values.shape[1]
        col = np.empty(rid.size, dtype=np.int64)
        order = np.argsort(rid, kind="stable")
        sorted_rid = rid[order]
        starts = np.flatnonzero(np.r_[True, sorted_rid[1:] != sorted_rid[:-1]])
        for s, e in zip(starts, [*starts[1:], rid.size], strict=True):
            idx = order[s:e]
            col[idx] = np.searchsorted(cum[sorted_rid[s]], u[idx], side="right")
        return np.asarray(values[rid, np.minimum(col, width - 1)], dtype=np.int64)

    # -- distributions and figures ----------------------------------------------------

    def _row(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        return (list(self.rows) + list(self.residue_rows))[r]

    def distribution(self, count: int) -> dict[int, float]:
        """``{published count j: probability}`` for an original count (negatives set to 0).

        Raises:
            ParameterError: for a negative count.
        """
        r = int(self.row_index(np.array([count]))[0])
        v, p = self._row(r)
        out: dict[int, float] = {}
        for vi, pi in zip(v.tolist(), p.tolist(), strict=True):
            j = max(int(count) + vi, 0)
            out[j] = out.get(j, 0.0) + pi
        return out

    def fixing_zero(self) -> PTable:
        """This ptable with a count of 0 always published as 0 (the ABS convention).

        What a mechanism is where empty cells are not perturbed (no secret to
        key their draws to): its privacy figures, computed on this ptable,
        then include what a published non-zero says about a one-record cell.

        Raises:
            ParameterError: for a loop selector whose loop starts at row 0.
        """
        zero = (np.array([0]), np.array([1.0]))
        v0, p0 = self.rows[0]
        if np.array_equal(v0[p0 > 0], [0]):
            return self
        rows = list(self.rows)
        sampled = None if self.sampled is None else self.sampled.copy()
        if self.selector == Selector.VALUE and len(rows) == 1:
            # Row 0 served every count: it keeps serving counts >= 1.
            rows = [zero, rows[0]]
            if sampled is not None:
                sampled = np.vstack([np.zeros_like(sampled[:1]), sampled])
        elif self.selector == Selector.LOOP and self.loop_start == 0:
            raise ParameterError("a ptable whose loop starts at row 0 cannot keep zeros at 0")
        else:
            rows[0] = zero
            if sampled is not None:
                sampled[0] = 0
        params = {**dict(self.parameters), "zeros": "kept at 0"}
        return replace(self, rows=tuple(rows), parameters=params, sampled=sampled)

    def transition_matrix(self, size: int) -> npt.NDArray[np.float64]:
        """The matrix ``M[i, j] = P(published j | original i)`` for counts 0 .. size-1.

        Published counts of ``size - 1`` or more are gathered in the last
        column, so every row sums to 1 (the form :func:`invariant_matrix` needs).

        Raises:
            ParameterError: for size < 1.
        """
        if not _is_int(size) or size < 1:
            raise ParameterError(f"size must be an integer >= 1, not {size!r}")
        m = np.zeros((size, size), dtype=np.float64)
        for i in range(size):
            for j, p in self.distribution(i).items():
                m[i, min(j, size - 1)] += p
        return m

    def _examined_counts(self) -> int:
        # Pairs (i, i+1) for i < hi cover every pair of distinct rows: beyond the
        # value rows, residue classes repeat with period M and loops with their span.
        hi = len(self.rows) + 1
        if self.selector == Selector.RESIDUE:
            hi += self.modulus + 1
        return hi

    def pair_privacy(self, count: int, epsilon: float | None = None) -> PrivacyFigures:
        """Privacy figures of one pair of neighbouring counts ``(count, count + 1)``.

        Args:
            count: The smaller count ``i`` of the pair.
            epsilon: The epsilon for delta (default: the pair's largest log-ratio).

        Raises:
            ParameterError: for a negative count or epsilon.
        """
        a, b = self.distribution(count), self.distribution(count + 1)
        ratio, unbounded = _log_ratio_and_unbounded(a, b)
        eps = ratio if epsilon is None else _nonneg(epsilon)
        return PrivacyFigures(
            epsilon=eps,
            delta=_hockey_stick(a, b, eps),
            worst_count=int(count),
            max_log_ratio=ratio,
            unbounded_mass=unbounded,
        )

    def privacy(
        self, max_count: int | None = None, *, epsilon: float | None = None
    ) -> PrivacyFigures:
        """Epsilon and delta between neighbouring counts (see the module docstring).

        Args:
            max_count: Examine pairs ``(i, i + 1)`` for ``i < max_count``
                (default: enough to cover every pair of rows).
            epsilon: The epsilon at which delta is computed. Default: the
                mechanism's design epsilon where it has one (DP), else the
                largest finite log-ratio over neighbouring counts.
        """
        if max_count is None and epsilon is None:
            cached: PrivacyFigures | None = self._figures  # type: ignore[attr-defined]
            if cached is not None:
                return cached
        hi = self._examined_counts() if max_count is None else int(max_count)
        pairs = [(i, self.distribution(i), self.distribution(i + 1)) for i in range(hi)]
        ratio, unbounded = 0.0, 0.0
        for _, a, b in pairs:
            r, m = _log_ratio_and_unbounded(a, b)
            ratio, unbounded = max(ratio, r), max(unbounded, m)
        if epsilon is None:
            design = self.parameters.get("epsilon")
            eps = float(design) if isinstance(design, int | float) else ratio
        else:
            eps = _nonneg(epsilon)
        delta, worst = 0.0, 0
        for i, a, b in pairs:
            d = _hockey_stick(a, b, eps)
            if d > delta + 1e-15:
                delta, worst = d, i
        fig = PrivacyFigures(eps, delta, worst, ratio, unbounded)
        if max_count is None and epsilon is None:
            object.__setattr__(self, "_figures", fig)
        return fig

    def privacy_profile(self, epsilons: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """``delta(epsilon)`` at each of ``epsilons``: the largest over every pair of neighbours.

        The hockey-stick divergence of each pair ``(i, i + 1)`` in both orders
        (the pairs :meth:`privacy` examines, which cover every pair of distinct
        rows), at every epsilon at once: the privacy profile of the worst
        neighbours, from which the ledger's accountant builds the mechanism's
        privacy loss distribution (:mod:`tablesafe.rules._ledger_pld`).
        """
        factor = np.exp(np.asarray(epsilons, dtype=np.float64))[:, None]
        best = np.zeros(factor.shape[0])
        previous = self.distribution(0)
        for i in range(self._examined_counts()):
            after = self.distribution(i + 1)
            support = sorted(set(previous) | set(after))
            a = np.array([previous.get(j, 0.0) for j in support])
            b = np.array([after.get(j, 0.0) for j in support])
            pair = np.maximum(
                np.maximum(a - factor * b, 0.0).sum(axis=1),
                np.maximum(b - factor * a, 0.0).sum(axis=1),
            )
            best = np.maximum(best, pair)
            previous = after
        return best

    def share_changed(self) -> list[float]:
        """Per row (:meth:`row_labels`), the probability that a count changes (``v != 0``)."""
        return [float(p[v != 0].sum()) for v, p in list(self.rows) + list(self.residue_rows)]

    def variance(self) -> list[float]:
        """Per row (:meth:`row_labels`), the variance of ``v``."""
        out = []
        for v, p in list(self.rows) + list(self.residue_rows):
            mean = float((v * p).sum())
            out.append(float(((v - mean) ** 2 * p).sum()))
        return out

    def describe(self) -> dict[str, Any]:
        """The public description for table metadata: name, parameters, privacy figures."""
        fig = self.privacy()
        return {
            "name": self.name,
            **dict(self.parameters),
            "epsilon": round(fig.epsilon, 6),
            "delta": float(f"{fig.delta:.6g}"),
            **({"paper": self.paper} if self.paper else {}),
        }

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.parameters.items())
        return f"PTable({self.name}: {params}; {len(self.rows)} rows, {self.selector})"

    # -- conversion ---------------------------------------------------------

    def to_sampled(self, keys: int = 256) -> PTable:
        """The sampled (ABS/ONS) form: rows 0..750, an integer perturbation per cell key.

        Column ``k`` of row ``i`` is the perturbation whose interval holds
        ``(k + 0.5) / keys`` (the midpoint of the cell key's share of [0, 1)).
        Counts above 750 loop onto rows 501..750 as in the ONS package.

        Raises:
            ParameterError: for ``keys`` not a power of two, PRAM's residue
                rows, or a ptable whose counts above 750 would not get the
                distribution they have here (rows still changing above 501).
        """
        if not _is_int(keys) or keys < 2 or keys & (keys - 1) or keys > 2**32:
            raise ParameterError(f"keys must be a power of two such as 256 or 4096, not {keys!r}")
        if self.sampled is not None and self.sampled.shape[1] == keys:
            return self
        if self.selector == Selector.RESIDUE:
            raise ParameterError(
                "PRAM's residue rows have no ABS/ONS layout (it loops counts above 750 onto "
                "rows 501-750); write the destatis layout instead"
            )
        if not self._loops_like_ons():
            raise ParameterError(
                "this ptable's rows still change above count 501, so the ABS/ONS rule (counts "
                "above 750 reuse rows 501-750) would give some counts another distribution; "
                "write the destatis layout instead"
            )
        u = (np.arange(keys) + 0.5) / keys
        counts = np.arange(ONS_LAST_ROW + 1)
        table = self.perturbation(np.repeat(counts, keys), np.tile(u, counts.size)).reshape(
            counts.size, keys
        )
        params = dict(self.parameters)
        params["cell_keys"] = keys
        return PTable.from_sampled(self.name, table, parameters=params, paper=self.paper)

    @classmethod
    def from_sampled(
        cls,
        name: str,
        sampled: npt.ArrayLike,
        *,
        parameters: Mapping[str, Any] | None = None,
        paper: str = "",
    ) -> PTable:
        """A looped ptable from a sampled one: ``sampled[i, k]`` perturbs count ``i`` at key ``k``.

        Rows are counts ``0 .. 750`` (counts above 750 loop onto rows
        501-750, the ABS/ONS rule), columns the integer cell keys ``0 ..
        K-1``. Each row's distribution is the share of keys giving each
        perturbation, and the table itself is kept for exact lookups.

        Raises:
            ParameterError: if ``sampled`` is not a 751-row integer table, or
                for rows :meth:`from_rows` refuses.
        """
        table = np.asarray(sampled)
        if table.ndim != 2 or table.shape[0] != ONS_LAST_ROW + 1 or table.dtype.kind not in "iu":
            raise ParameterError(
                f"a sampled ptable is an integer table of {ONS_LAST_ROW + 1} rows (counts "
                f"0-{ONS_LAST_ROW}) by the cell keys; got {table.dtype} of shape {table.shape}"
            )
        base = cls.from_rows(
            name,
            _key_shares(table),
            selector=Selector.LOOP,
            loop_start=ONS_LOOP_START,
            parameters=parameters,
            paper=paper,
        )
        return replace(base, sampled=table)

    def _loops_like_ons(self) -> bool:
        """Whether counts above 750 get the same distribution under the ONS loop."""
        last = len(self.rows) - 1
        if self.selector == Selector.VALUE:
            return last <= ONS_LOOP_START
        # loop: compare the row of each count with the ONS row for it, over one full period.
        span_here = last - self.loop_start + 1
        span_ons = ONS_LAST_ROW - ONS_LOOP_START + 1
        top = ONS_LAST_ROW + 1 + span_here * span_ons
        c = np.arange(ONS_LAST_ROW + 1, top)
        ons = ONS_LOOP_START + (c - ONS_LOOP_START) % span_ons
        uid: np.ndarray = self._row_uid  # type: ignore[attr-defined]
        return bool(np.all(uid[self.row_index(c)] == uid[self.row_index(ons)]))


def _key_shares(sampled: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per row of a sampled table: its distinct perturbations and their shares of the keys."""
    lo = int(sampled.min())
    span = int(sampled.max()) - lo + 1
    n, k = sampled.shape
    counts = np.bincount(
        (sampled - lo + span * np.arange(n)[:, None]).ravel(), minlength=n * span
    ).reshape(n, span)
    out = []
    for row in counts:
        nz = np.flatnonzero(row)
        out.append((nz + lo, row[nz] / k))
    return out


#: Marks a guide-table bin that needs a search.
_SENTINEL = np.iinfo(np.int64).min


def _counts(counts: npt.ArrayLike) -> npt.NDArray[np.int64]:
    c = np.asarray(counts)
    if c.dtype.kind == "f":
        if c.size and not np.all(c == np.floor(c)):
            raise ParameterError("counts must be whole numbers")
    elif c.dtype.kind not in "iub":
        raise ParameterError(f"counts must be integers, not {c.dtype}")
    c = c.astype(np.int64, copy=False)
    if c.size and int(c.min()) < 0:
        raise ParameterError("counts must be non-negative")
    return c


def _nonneg(epsilon: float) -> float:
    if not isinstance(epsilon, int | float) or not epsilon >= 0:
        raise ParameterError(f"epsilon must be a number >= 0, not {epsilon!r}")
    return float(epsilon)


def _log_ratio_and_unbounded(a: Mapping[int, float], b: Mapping[int, float]) -> tuple[float, float]:
    ratio = 0.0
    for j in set(a) & set(b):
        ratio = max(ratio, abs(math.log(a[j] / b[j])))
    only_a = sum(p for j, p in a.items() if j not in b)
    only_b = sum(p for j, p in b.items() if j not in a)
    return ratio, max(only_a, only_b)


def _hockey_stick(a: Mapping[int, float], b: Mapping[int, float], epsilon: float) -> float:
    factor = math.exp(epsilon)
    out = 0.0
    for x, y in ((a, b), (b, a)):
        d = sum(max(0.0, px - factor * y.get(j, 0.0)) for j, px in x.items())
        out = max(out, d)
    return out
