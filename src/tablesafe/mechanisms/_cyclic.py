"""Cyclic perturbation (Duncan & Roehrig 2006, seed 002) and its Bayesian posterior.

A *cycle* is an integer table (entries +1, -1 and 0 in the sets built here)
whose sums over every axis are 0, so adding it to a table keeps all the
margins of one dimension less: the row and column totals of a 2-way table,
all three 2-way margins of a 3-way table. The data owner publishes a set of
cycles in a fixed order and the coin probabilities alpha and beta. For each
cycle in turn a three-sided coin is flipped (slides "Cyclic Perturbation:
Details"): A (probability alpha) adds the cycle, B (beta) subtracts it,
C (gamma = 1 - alpha - beta) does nothing.

**The skip rule** ("If A, add the first cycle (unless there is a zero in the
cycle)"). The check is made on the *current* table, the one the operation
would change (the original table with the earlier cycles' operations
applied), never on the original:

* ``skip="zero"`` (default, the slides' wording): the operation is skipped
  when any cell the cycle touches is 0 in the current table;
* ``skip="negative"``: the operation is skipped only when it would make a
  cell negative.

A skipped operation leaves the table as it is, so the realised step is 0.

**The posterior** (slides "Distributions of Cell Values"). Every table
``T = T^P - sum_k s_k C_k`` with ``s_k`` in {-1, 0, +1} is a candidate
original. Its likelihood sums, over the realised sign vectors ``s`` that
lead from ``T`` to ``T^P``, the product of the step probabilities
``P(s_k | current table)``: alpha or beta for an operation that was allowed,
and for a realised 0 the probability of C plus that of any operation the
rule would have skipped. The current table before step k is
``T^P - sum_{j >= k} s_j C_j``, so each step probability depends only on
the signs of the cycles that share a cell with cycle k, and the posterior
factorises (see :mod:`._cyclic_factor`); a 20 x 20 table takes well under a
second. With ``likelihood="slides"`` a realised 0 of a cycle that touches a
current zero counts with probability 1 while operations that add to such a
zero keep their alpha or beta: that is how the slides' printed numbers were
computed (it reproduces all of them), but it is not the likelihood of any
mechanism, because the probabilities of one step then sum to more than 1.

**Cycle sets** (slides "Cyclic Perturbation: Details" and "A Set of
Margin-Preserving Perturbations"): see :func:`cycle_set`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ComputationError, ParameterError, choice
from tablesafe._random import resolve_generator
from tablesafe.mechanisms._cyclic_factor import Factor, assignments, marginal

__all__ = [
    "CyclicPosterior",
    "CyclicResult",
    "cycle_chances",
    "cycle_set",
    "cyclic_perturb",
    "cyclic_posterior",
]


class SkipRule(StrEnum):
    """When an operation is skipped (the module docstring; a member equals its text)."""

    ZERO = "zero"
    NEGATIVE = "negative"


class Likelihood(StrEnum):
    """The posterior's likelihood: the mechanism's own, or the slides' convention."""

    EXACT = "exact"
    SLIDES = "slides"


#: Default limit on the size of an intermediate factor of the posterior (3 ** 14 entries).
MAX_FACTOR_ENTRIES = 3**14
#: Default limit on the number of sign vectors enumerated when tables are listed (3 ** 13).
MAX_ENUMERATION = 3**13


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def _as_table(table: npt.ArrayLike, what: str = "table") -> np.ndarray:
    """Check a table of counts for cyclic perturbation; return it as int64."""
    try:
        x = np.asarray(table, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"the {what} must be an array of counts") from None
    if x.ndim not in (2, 3):
        raise ParameterError(
            f"cyclic perturbation needs a 2-way or 3-way table, not a {x.ndim}-way one"
        )
    if min(x.shape) < 2:
        raise ParameterError(
            f"cyclic perturbation needs at least 2 categories in every dimension "
            f"(a table of at least 2 x 2), not {' x '.join(map(str, x.shape))}"
        )
    if not np.all(np.isfinite(x)):
        raise ParameterError(f"the {what} has missing or infinite counts")
    if np.any(x < 0):
        raise ParameterError(f"the {what} has negative counts; counts must be non-negative")
    if np.any(x != np.round(x)):
        raise ParameterError(f"the {what} has non-integer counts; counts must be whole numbers")
    return x.astype(np.int64)


def _check_coin(alpha: float, beta: float) -> tuple[float, float, float]:
    """Check the coin probabilities; return (alpha, beta, gamma)."""
    for name, p in (("alpha", alpha), ("beta", beta)):
        if not isinstance(p, int | float) or isinstance(p, bool) or not math.isfinite(p):
            raise ParameterError(f"{name} must be a number in [0, 1], not {p!r}")
        if not 0 <= p <= 1:
            raise ParameterError(f"{name} must lie in [0, 1], not {p}")
    if alpha + beta > 1 + 1e-12:
        raise ParameterError(
            f"alpha + beta must be at most 1 (gamma = 1 - alpha - beta is the probability "
            f"of leaving a cycle out), not {alpha} + {beta} = {alpha + beta:g}"
        )
    return float(alpha), float(beta), max(0.0, 1.0 - float(alpha) - float(beta))


def _as_cycles(cycles: Sequence[npt.ArrayLike] | None, shape: tuple[int, ...]) -> tuple:
    """Validate user cycles (or build the default set) for a table of ``shape``."""
    if cycles is None:
        return cycle_set(shape)
    out = []
    for i, c in enumerate(cycles, start=1):
        arr = np.asarray(c, dtype=np.float64)
        if arr.shape != shape:
            raise ParameterError(
                f"cycle {i} has shape {arr.shape}, but the table has shape {shape}"
            )
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ParameterError(f"cycle {i} has non-integer entries; cycles are integer tables")
        ci = arr.astype(np.int64)
        if not ci.any():
            raise ParameterError(f"cycle {i} is all zero; a cycle must move some cells")
        for axis in range(ci.ndim):
            if ci.sum(axis=axis).any():
                raise ParameterError(
                    f"cycle {i} does not keep the margins: its sums over axis {axis} are not "
                    "all 0 (every row, column and layer sum of a cycle must be 0)"
                )
        ci.setflags(write=False)
        out.append(ci)
    if not out:
        raise ParameterError("the cycle set is empty; give at least one cycle")
    return tuple(out)


# ---------------------------------------------------------------------------
# Cycle sets
# ---------------------------------------------------------------------------


def _base_cycle(rows: int, cols: int) -> np.ndarray:
    """One closed cycle through every row (rows <= cols) or every column (rows > cols).

    For ``rows <= cols``: +1 at ``(i, i)``, -1 at ``(i, i + 1)`` for
    ``i < rows - 1`` and -1 at ``(rows - 1, 0)``: a cycle on the first
    ``rows`` columns (the 2 x 2 elementary cycle when ``rows == 2``).
    """
    if rows > cols:
        return _base_cycle(cols, rows).T.copy()
    c = np.zeros((rows, cols), dtype=np.int64)
    for i in range(rows):
        c[i, i] += 1
        c[i, (i + 1) % rows] -= 1
    return c


def _cycles_2d(rows: int, cols: int) -> list[np.ndarray]:
    # Shift the base cycle along the longer dimension: max(rows, cols) cycles,
    # every cell in exactly two of them (once as +1, once as -1).
    base = _base_cycle(rows, cols)
    if rows <= cols:
        return [np.roll(base, k, axis=1) for k in range(cols)]
    return [np.roll(base, k, axis=0) for k in range(rows)]


def _cycles_3d(shape: tuple[int, int, int]) -> list[np.ndarray]:
    # Slides' construction (4 x 4 x 3): two equal dimensions n (axes a, b) and
    # a third m <= n (axis c). With D the n x m base cycle in the (b, c) plane,
    # B_t(i, j, k) = D((j - i - t) mod n, k) for t = 0..n-1: every row i holds D
    # shifted by i, so sums over i, j and k all vanish, and every cell lies in
    # exactly two cycles. The order t = 0, 1, 2, 3 is the slides' M1, M4, M3, M2.
    for a, b in ((0, 1), (0, 2), (1, 2)):
        c = 3 - a - b
        n, m = shape[a], shape[c]
        if shape[a] == shape[b] and m <= n:
            d = _base_cycle(n, m)
            out = []
            for t in range(n):
                cyc = np.zeros((n, n, m), dtype=np.int64)
                for i in range(n):
                    cyc[i] = np.roll(d, i + t, axis=0)
                out.append(np.moveaxis(cyc, (0, 1, 2), (a, b, c)))
            return out
    # General case: an elementary difference along the shortest axis times the
    # 2-D cycles of the other two: (e_a - e_{a+1}) x D_t. Sums over every axis
    # vanish; each cell lies in four cycles (two when the short axis has 2
    # categories, where e_0 - e_1 is the only difference needed).
    short = int(np.argmin(shape))
    rest = [ax for ax in range(3) if ax != short]
    plane = _cycles_2d(shape[rest[0]], shape[rest[1]])
    n = shape[short]
    diffs = range(1) if n == 2 else range(n)
    out = []
    for a in diffs:
        e = np.zeros(n, dtype=np.int64)
        e[a] += 1
        e[(a + 1) % n] -= 1
        for d in plane:
            cyc = np.einsum("i,jk->ijk", e, d)
            out.append(np.moveaxis(cyc, (0, 1, 2), (short, rest[0], rest[1])))
    return out


def cycle_set(shape: Sequence[int]) -> tuple[np.ndarray, ...]:
    """The default cycle set for a table of ``shape`` (seed 002, "Cyclic Perturbation: Details").

    The cycles keep every margin of one dimension less and give every cell
    the same number of chances to move; their order is the order in which
    :func:`cyclic_perturb` applies them.

    * R x C (R, C >= 2): a closed cycle through all rows (R <= C), +1 at
      ``(i, i)`` and -1 at ``(i, i + 1 mod R)``, shifted along the columns:
      C cycles, each cell in two (for C < R the same with rows and columns
      exchanged). For 4 x 4 these are the slides' four cycles, in the
      slides' order; the slides' second cycle, whose last row the OCR gives
      as ``+ - 0 +``, is ``+ - 0 0``, the only one-entry repair that makes
      its rows and columns sum to 0.
    * n x n x m with m <= n (two equal dimensions, in any position): the
      slides' 3-way set, n cycles, each cell in two, all three 2-way
      margins kept; for 4 x 4 x 3 exactly the slides' M1, M4, M3, M2 (the
      slides' M_t shifted by t - 1 columns, in shift order).
    * Other 3-way tables: ``(e_a - e_{a+1}) x D`` for the 2-D cycles D of
      the two longer dimensions and the differences along the shortest one;
      all three 2-way margins kept, each cell in four cycles (two when the
      shortest dimension has 2 categories).

    Args:
        shape: The table's shape, 2 or 3 dimensions of at least 2 categories.

    Returns:
        The cycles, read-only int64 arrays of ``shape``.

    Raises:
        ParameterError: for other shapes.
    """
    shp = tuple(int(s) for s in shape)
    if len(shp) not in (2, 3) or min(shp) < 2:
        raise ParameterError(
            "cycle sets exist for 2-way and 3-way tables with at least 2 categories in "
            f"every dimension, not shape {shp}"
        )
    cycles = _cycles_2d(*shp) if len(shp) == 2 else _cycles_3d(shp)  # type: ignore[arg-type]
    for c in cycles:
        c.setflags(write=False)
    return tuple(cycles)


def cycle_chances(cycles: Sequence[npt.ArrayLike]) -> np.ndarray:
    """How many cycles touch each cell: its number of chances to move.

    A cell touched by k unit cycles can end up at most k away from its
    original value (the slides' feasibility interval, "original value ± 2").
    """
    return np.asarray(sum(np.abs(np.asarray(c, dtype=np.int64)) for c in cycles))


# ---------------------------------------------------------------------------
# The mechanism
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CyclicResult:
    """A cyclically perturbed table and what the data owner publishes with it.

    The coin outcomes are not kept: with them and the published table anyone
    could undo the perturbation.

    Attributes:
        table: The perturbed table (same margins as the original).
        cycles: The cycle set, in the order it was applied.
        alpha: Probability of adding a cycle.
        beta: Probability of subtracting a cycle.
        skip: The skip rule, ``"zero"`` or ``"negative"`` (checked on the
            current table).
    """

    table: np.ndarray
    cycles: tuple[np.ndarray, ...]
    alpha: float
    beta: float
    skip: SkipRule = SkipRule.ZERO

    @property
    def gamma(self) -> float:
        """Probability of leaving a cycle out, ``1 - alpha - beta``."""
        return max(0.0, 1.0 - self.alpha - self.beta)

    def published(self) -> dict[str, Any]:
        """What is published: the table, the cycles in order, alpha, beta and the skip rule."""
        return {
            "method": "cyclic perturbation (Duncan & Roehrig)",
            "table": self.table.tolist(),
            "cycles": [c.tolist() for c in self.cycles],
            "alpha": self.alpha,
            "beta": self.beta,
            "gamma": self.gamma,
            "skip": str(self.skip),
            "skip_rule": _SKIP_TEXT[self.skip],
        }


_SKIP_TEXT = {
    SkipRule.ZERO: (
        "an operation is skipped when a cell the cycle touches is 0 in the current table"
    ),
    SkipRule.NEGATIVE: (
        "an operation is skipped when it would make a cell of the current table negative"
    ),
}


def _allowed(state: np.ndarray, cycle: np.ndarray, sign: int, skip: SkipRule) -> bool:
    """May ``sign * cycle`` be applied to the current table ``state``?"""
    support = cycle != 0
    if skip == SkipRule.ZERO and np.any(state[support] == 0):
        return False
    return bool(np.all(state[support] + sign * cycle[support] >= 0))


def cyclic_perturb(
    table: npt.ArrayLike,
    alpha: float,
    beta: float,
    *,
    cycles: Sequence[npt.ArrayLike] | None = None,
    skip: SkipRule = SkipRule.ZERO,
    rng: np.random.Generator | int | None = None,
) -> CyclicResult:
    """Perturb a table cycle by cycle with the three-sided coin (seed 002).

    For each cycle, in order: with probability alpha add it, with beta
    subtract it, else leave it out; an operation the skip rule forbids on
    the current table is left out too. Every margin kept by the cycles
    (all 2-way margins for the default sets) is exactly preserved, and no
    cell becomes negative. With alpha = beta the perturbation is unbiased
    away from zeros (slides, "Cyclic Perturbation: Advantages").

    Args:
        table: Original counts, a 2-way or 3-way table of at least 2 x 2.
        alpha: Probability of adding a cycle (outcome A).
        beta: Probability of subtracting a cycle (outcome B).
        cycles: The cycle set, in order (default :func:`cycle_set`).
        skip: ``"zero"`` or ``"negative"`` (see the module docstring).
        rng: Generator, integer seed, or None for a secure Generator.

    Returns:
        The perturbed table with the published parameters.

    Raises:
        ParameterError: for negative or non-integer counts, a table smaller
            than 2 x 2, alpha + beta > 1, an unknown skip rule, or cycles
            that do not keep the margins.
    """
    x = _as_table(table)
    a, b, _ = _check_coin(alpha, beta)
    skip = choice(SkipRule, skip, "skip rule")
    cyc = _as_cycles(cycles, x.shape)
    gen = resolve_generator(rng)
    current = x.copy()
    for c in cyc:
        u = gen.random()
        sign = 1 if u < a else (-1 if u < a + b else 0)
        if sign and _allowed(current, c, sign, skip):
            current += sign * c
    current.setflags(write=False)
    return CyclicResult(current, cyc, a, b, skip)


# ---------------------------------------------------------------------------
# The posterior
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CyclicPosterior:
    """Posterior distributions of the original cells given a published table (seed 002).

    Attributes:
        published: The published (perturbed) table ``T^P``.
        offsets: The possible differences ``original - published``, ``-w..w``.
        probabilities: ``probabilities[idx + (i,)]`` is the posterior
            probability that cell ``idx`` was ``published[idx] + offsets[i]``.
        alpha: Probability of adding a cycle.
        beta: Probability of subtracting a cycle.
        skip: The skip rule assumed.
        likelihood: ``"exact"`` or ``"slides"``.
        hypotheses: Number of sign vectors (coin histories, after skips)
            with positive posterior probability; several can give the same
            table when the cycles are linearly dependent.
        tables: The distinct possible original tables, when they were
            enumerated (else None).
        table_probabilities: Their posterior probabilities (else None).
    """

    published: np.ndarray
    offsets: np.ndarray
    probabilities: np.ndarray
    alpha: float
    beta: float
    skip: SkipRule
    likelihood: Likelihood
    hypotheses: int
    tables: tuple[np.ndarray, ...] | None = None
    table_probabilities: np.ndarray | None = None

    def cell(self, index: Sequence[int]) -> dict[int, float]:
        """The posterior distribution of one cell: ``{value: probability}`` (non-zero only)."""
        idx = tuple(int(i) for i in index)
        base = int(self.published[idx])
        probs = self.probabilities[idx]
        return {base + int(d): float(p) for d, p in zip(self.offsets, probs, strict=True) if p > 0}

    def mode(self) -> np.ndarray:
        """The most probable original value of every cell (ties: the smallest value)."""
        return np.asarray(self.published + self.offsets[np.argmax(self.probabilities, axis=-1)])

    def mean(self) -> np.ndarray:
        """The posterior mean of every cell."""
        return np.asarray(self.published + self.probabilities @ self.offsets.astype(np.float64))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: parameters and every cell's distribution."""
        cells = []
        for idx in np.ndindex(*self.published.shape):
            cells.append(
                {
                    "cell": [i + 1 for i in idx],
                    "published": int(self.published[idx]),
                    "distribution": {str(v): p for v, p in self.cell(idx).items()},
                }
            )
        out: dict[str, Any] = {
            "alpha": self.alpha,
            "beta": self.beta,
            "gamma": max(0.0, 1.0 - self.alpha - self.beta),
            "skip": str(self.skip),
            "likelihood": str(self.likelihood),
            "hypotheses": self.hypotheses,
            "cells": cells,
        }
        if self.tables is not None:
            out["possible_originals"] = len(self.tables)
        return out


def _step_factors(
    tp: np.ndarray,
    cyc: tuple[np.ndarray, ...],
    probs: tuple[float, float, float],
    skip: SkipRule,
    likelihood: Likelihood,
    max_entries: int,
) -> list[Factor]:
    """One factor per cycle: the probability of the realised step k given the current table."""
    alpha, beta, gamma = probs
    flat_tp = tp.ravel()
    flat = [c.ravel() for c in cyc]
    out = []
    for k, ck in enumerate(flat):
        support = np.flatnonzero(ck)
        # The current table before step k is T^P - sum_{j >= k} s_j C_j: on the
        # cells of cycle k it depends on the later cycles that share a cell.
        scope = tuple(j for j in range(k, len(flat)) if flat[j][support].any())
        _check_scope(scope, max_entries)
        signs = assignments(len(scope)).astype(np.int64)
        sub = np.stack([flat[j][support] for j in scope])
        state = flat_tp[support] - signs @ sub
        own = signs[:, scope.index(k)]
        c = ck[support]
        zero_in = np.any(state == 0, axis=1)
        plus_ok = np.all(state + c >= 0, axis=1)
        minus_ok = np.all(state - c >= 0, axis=1)
        if likelihood == Likelihood.SLIDES:
            value = np.where(
                own == 1,
                alpha * plus_ok,
                np.where(own == -1, beta * minus_ok, np.where(zero_in, 1.0, gamma)),
            )
        else:
            if skip == SkipRule.ZERO:
                plus_ok &= ~zero_in
                minus_ok &= ~zero_in
            stay = gamma + alpha * ~plus_ok + beta * ~minus_ok
            value = np.where(own == 1, alpha * plus_ok, np.where(own == -1, beta * minus_ok, stay))
        value = value * np.all(state >= 0, axis=1)
        out.append(Factor(scope, value.astype(np.float64).reshape((3,) * len(scope))))
    return out


def _check_scope(scope: tuple[int, ...], max_entries: int) -> None:
    if 3 ** len(scope) > max_entries:
        raise ComputationError(
            f"one step of the posterior depends on {len(scope)} cycles ({3 ** len(scope):,} "
            f"cases, more than {max_entries:,}); the cycles overlap too much to factorise. "
            "Use fewer or less overlapping cycles."
        )


def _cell_factors(
    tp: np.ndarray,
    cyc: tuple[np.ndarray, ...],
    cell_prior: Callable[[tuple[int, ...], np.ndarray], npt.ArrayLike] | None,
    max_entries: int,
) -> tuple[list[Factor], dict[tuple[int, ...], list[int]]]:
    """Non-negativity and prior of every original cell, merged by scope.

    Returns the factors and, for each scope, the flat indices of its cells.
    """
    flat = np.stack([c.ravel() for c in cyc])  # (k, cells)
    flat_tp = tp.ravel()
    groups: dict[tuple[int, ...], list[int]] = {}
    for x in range(flat_tp.size):
        scope = tuple(int(j) for j in np.flatnonzero(flat[:, x]))
        groups.setdefault(scope, []).append(x)
    factors = []
    for scope, cells in groups.items():
        _check_scope(scope, max_entries)
        signs = assignments(len(scope)).astype(np.int64)
        table = np.ones(signs.shape[0])
        for x in cells:
            value = flat_tp[x] - signs @ flat[list(scope), x]
            weight = (value >= 0).astype(np.float64)
            if cell_prior is not None:
                idx = tuple(int(i) for i in np.unravel_index(x, tp.shape))
                prior = np.asarray(cell_prior(idx, np.maximum(value, 0)), dtype=np.float64)
                if prior.shape != value.shape or np.any(~np.isfinite(prior)) or np.any(prior < 0):
                    raise ParameterError(
                        "a cell prior must return one finite non-negative weight per value"
                    )
                weight = weight * prior
            table = table * weight
        factors.append(Factor(scope, table.reshape((3,) * len(scope))))
    return factors, groups


def cyclic_posterior(
    perturbed: npt.ArrayLike,
    alpha: float,
    beta: float,
    *,
    cycles: Sequence[npt.ArrayLike] | None = None,
    skip: SkipRule = SkipRule.ZERO,
    likelihood: Likelihood = Likelihood.EXACT,
    prior: Callable[[np.ndarray], float] | None = None,
    cell_prior: Callable[[tuple[int, ...], np.ndarray], npt.ArrayLike] | None = None,
    enumerate_tables: bool | None = None,
    max_factor_entries: int = MAX_FACTOR_ENTRIES,
    max_enumeration: int = MAX_ENUMERATION,
    progress: Callable[[int, int], None] | None = None,
) -> CyclicPosterior:
    """The posterior of every original cell given the published table (seed 002).

    Bayes over all tables that could have been the original (slides
    "Distributions of Cell Values"): ``Pr(T^k | T^P) ∝ Pr(T^P | T^k) Pr(T^k)``
    and ``Pr(t(i, j) = q) = sum over k with t_k(i, j) = q of Pr(T^k | T^P)``.
    The likelihood is that of :func:`cyclic_perturb` with the same cycles,
    order and skip rule (see the module docstring), or the slides'
    convention with ``likelihood="slides"``.

    Cell distributions are computed by variable elimination over the cycle
    signs, which is exact and fast for the default cycle sets at any size.
    With a table-level ``prior`` (or ``enumerate_tables=True``) every sign
    vector is enumerated instead (3 ** k of them, at most ``max_enumeration``)
    and the distinct possible originals are returned with their probabilities.

    Args:
        perturbed: The published table ``T^P``.
        alpha: Probability of adding a cycle.
        beta: Probability of subtracting a cycle.
        cycles: The published cycles, in order (default :func:`cycle_set`).
        skip: The published skip rule, ``"zero"`` or ``"negative"``.
        likelihood: ``"exact"`` (the mechanism's likelihood) or ``"slides"``.
        prior: Prior weight of a whole candidate table (default uniform).
            Forces enumeration.
        cell_prior: Prior weight of each cell's values, a product prior:
            called as ``cell_prior(index, values)`` with an array of candidate
            values, returns an array of weights. Works at any size.
        enumerate_tables: List the possible originals (default: only when
            ``prior`` is given).
        max_factor_entries: Refuse intermediate factors larger than this.
        max_enumeration: Refuse enumerating more sign vectors than this.
        progress: Called with ``(done, total)`` as the computation advances.

    Returns:
        The posterior distribution of every cell.

    Raises:
        ParameterError: for bad counts, shapes, coin, skip rule, likelihood
            or cycles, or a prior that returns bad weights.
        ComputationError: if the enumeration or the factorisation is too
            large, or no table has positive posterior probability.
    """
    tp = _as_table(perturbed, "published table")
    probs = _check_coin(alpha, beta)
    skip = choice(SkipRule, skip, "skip rule")
    likelihood = choice(Likelihood, likelihood, "likelihood")
    cyc = _as_cycles(cycles, tp.shape)
    width = int(cycle_chances(cyc).max()) * max(int(np.abs(c).max()) for c in cyc)
    offsets = np.arange(-width, width + 1)
    factors = _step_factors(tp, cyc, probs, skip, likelihood, max_factor_entries)
    cell_factors, groups = _cell_factors(tp, cyc, cell_prior, max_factor_entries)
    factors += cell_factors
    enumerate_tables = prior is not None if enumerate_tables is None else enumerate_tables
    if enumerate_tables:
        return _enumerate(
            tp, cyc, factors, offsets, probs, skip, likelihood, prior, max_enumeration, progress
        )
    if prior is not None:
        raise ParameterError("a table-level prior needs enumerate_tables=True")
    hypotheses = _count_hypotheses(factors, max_factor_entries)
    out = _cell_distributions(tp, cyc, factors, groups, width, max_factor_entries, progress)
    probabilities = out.reshape((*tp.shape, offsets.size))
    return CyclicPosterior(
        tp, offsets, probabilities, probs[0], probs[1], skip, likelihood, hypotheses
    )


def _count_hypotheses(factors: list[Factor], max_entries: int) -> int:
    """Step 1 of cyclic_posterior: how many tables could have been the original.

    Raises:
        ComputationError: if none could.
    """
    indicator = [Factor(f.scope, (f.table > 0).astype(np.float64)) for f in factors]
    count, log_count = marginal(indicator, (), max_entries=max_entries)
    hypotheses = round(float(count.sum()) * math.exp(log_count))
    if hypotheses == 0:
        raise ComputationError(
            "no table could have been the original: the published table is inconsistent "
            "with these cycles, skip rule and prior"
        )
    return hypotheses


def _cell_distributions(
    tp: np.ndarray,
    cyc: Sequence[np.ndarray],
    factors: list[Factor],
    groups: dict[tuple[int, ...], list[int]],
    width: int,
    max_entries: int,
    progress: Callable[[int, int], None] | None,
) -> np.ndarray:
    """Step 2 of cyclic_posterior: per cell, its original's distribution by variable elimination.

    Returns:
        Per flat cell, the probability of each offset from ``-width`` to
        ``width`` between the original and the published value.

    Raises:
        ComputationError: if no table has positive posterior probability.
    """
    flat_tp = tp.ravel()
    flat_cyc = np.stack([c.ravel() for c in cyc])
    out = np.zeros((flat_tp.size, 2 * width + 1))
    total = len(groups)
    for done, (scope, cells) in enumerate(groups.items()):
        joint, _ = marginal(factors, scope, max_entries=max_entries)
        joint = joint.ravel()
        z = joint.sum()
        if not z > 0:
            raise ComputationError("no table has positive posterior probability")
        signs = assignments(len(scope)).astype(np.int64)
        for x in cells:
            delta = -(signs @ flat_cyc[list(scope), x]) if scope else np.zeros(1, np.int64)
            np.add.at(out[x], delta + width, joint / z)
        if progress is not None:
            progress(done + 1, total)
    return out


def _enumerate(
    tp: np.ndarray,
    cyc: tuple[np.ndarray, ...],
    factors: list[Factor],
    offsets: np.ndarray,
    probs: tuple[float, float, float],
    skip: SkipRule,
    likelihood: Likelihood,
    prior: Callable[[np.ndarray], float] | None,
    max_enumeration: int,
    progress: Callable[[int, int], None] | None,
) -> CyclicPosterior:
    """Enumerate every sign vector; merge equal tables (cycles may be dependent)."""
    k = len(cyc)
    total = 3**k
    if total > max_enumeration:
        raise ComputationError(
            f"{k} cycles give 3^{k} = {total:,} sign vectors to enumerate, more than "
            f"{max_enumeration:,}; use a cell prior (factorised) instead of a table prior"
        )
    flat_cyc = np.stack([c.ravel() for c in cyc])
    flat_tp = tp.ravel()
    weights: dict[bytes, list[Any]] = {}
    hypotheses = 0
    chunk_vars = min(k, 10)
    inner = assignments(chunk_vars)
    outer = list(itertools.product((-1, 0, 1), repeat=k - chunk_vars))
    for done, head in enumerate(outer):
        signs = np.hstack([np.tile(np.array(head, dtype=np.int8), (inner.shape[0], 1)), inner])
        w = np.ones(signs.shape[0])
        for f in factors:
            if f.scope:
                w *= f.table[tuple((signs[:, list(f.scope)] + 1).T)]
            else:
                w *= float(f.table)
        keep = np.flatnonzero(w > 0)
        originals = flat_tp - signs[keep].astype(np.int64) @ flat_cyc
        for t, wt in zip(originals, w[keep], strict=True):
            if prior is not None:
                p = float(prior(t.reshape(tp.shape)))
                if not math.isfinite(p) or p < 0:
                    raise ParameterError("a table prior must return a finite non-negative weight")
                wt = wt * p
            if wt <= 0:
                continue
            hypotheses += 1
            entry = weights.setdefault(t.tobytes(), [t, 0.0])
            entry[1] += wt
        if progress is not None:
            progress(done + 1, len(outer))
    if not weights:
        raise ComputationError(
            "no table could have been the original: the published table is inconsistent "
            "with these cycles, skip rule and prior"
        )
    tables = tuple(np.asarray(e[0]).reshape(tp.shape) for e in weights.values())
    raw = np.array([e[1] for e in weights.values()], dtype=np.float64)
    p = raw / raw.sum()
    width = int(offsets[-1])
    out = np.zeros((flat_tp.size, offsets.size))
    cells = np.arange(flat_tp.size)
    for t, pt in zip(tables, p, strict=True):
        out[cells, t.ravel() - flat_tp + width] += pt
    for t in tables:
        t.setflags(write=False)
    return CyclicPosterior(
        tp,
        offsets,
        out.reshape((*tp.shape, offsets.size)),
        probs[0],
        probs[1],
        skip,
        likelihood,
        hypotheses,
        tables,
        p,
    )
