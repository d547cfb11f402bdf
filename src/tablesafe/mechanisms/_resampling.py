"""Resampling for contingency tables (Domingo-Ferrer & Mateo-Sanz 1999, seed 001).

* :func:`heer_bootstrap`: Heer's bootstrap table (Section 2). The n records
  are drawn anew with replacement, which is one multinomial draw of n over
  the cells with probabilities ``x / n``; the table is released only if
  every non-zero cell meets the quality condition (1),
  ``-S < (x' - x) / sqrt(x (1 - x/n)) < S``, else a new table is drawn
  (Section 2.1). With M > 1 (odd, as Heer recommends) the average of M
  bootstrap tables is released, rounded to whole counts by default; odd M
  means an average of M integers is never exactly halfway, so rounding
  has no ties. The condition is checked on what is released.
* :func:`binomial_resample`: the cell-oriented method (Section 3.1). Each
  non-zero cell is drawn from Binomial(n, x/n) and drawn again until it
  lies in the quality interval ``[l(x), u(x)]``; the compensation stage then
  keeps two counters per cell, ``x' - l(x)`` and ``u(x) - x'``, and removes
  (adds) one unit at a time from a cell chosen with probability
  proportional to its first (second) counter until the total is n again.
  No cell leaves its interval (Section 3.2). With ``preserve_axis`` each
  slice along that axis is treated as its own I x 1 table (Note
  "Preservation of marginal counts"), which keeps that dimension's margins.

**Zeros stay zero** in both methods (Section 2, third feature; Section 3,
feature 4): a zero cell has probability 0 in the multinomial and in its
binomial, the quality condition does not apply to it, and both its
compensation counters are 0. A non-zero cell may be released as 0 when its
quality interval reaches 0 (e.g. x = 1 with S >= 1).

Both functions take an explicit Generator and return the released table with
what is published about the mechanism (method, S, M, preserved margins).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ComputationError, ParameterError
from tablesafe._random import resolve_generator
from tablesafe.mechanisms import _resampling_risk
from tablesafe.mechanisms._resampling_base import _as_counts, _check_s, quality_interval
from tablesafe.mechanisms._resampling_risk import *  # noqa: F403

__all__ = [
    "ResamplingResult",
    "binomial_resample",
    "heer_bootstrap",
    "quality_interval",
    *_resampling_risk.__all__,
]


class Resampling(StrEnum):
    """Which resampling method made a table (a member equals its text)."""

    BOOTSTRAP = "bootstrap"
    BINOMIAL = "binomial"


@dataclass(frozen=True)
class ResamplingResult:
    """A resampled table and what is published about it.

    Attributes:
        table: The released table: integers, or decimals for an unrounded
            average of M > 1 bootstrap tables.
        method: ``"bootstrap"`` or ``"binomial"``.
        s: The quality bound S of condition (1).
        m: Number of bootstrap tables averaged (1 for the binomial method).
        preserved: What is kept exactly: ``"total"``, ``"margins of axis d"``,
            or ``"none"`` (a rounded average of M > 1 tables).
        rounded: Whether an average of M > 1 tables was rounded to integers.
        tables_drawn: Bootstrap tables drawn (M per attempt), the cost of
            Section 4; 0 for the binomial method.
        cell_draws: Binomial draws made in the perturbation stage; 0 for the
            bootstrap.
        compensation_units: Units moved by the compensation stage.
    """

    table: np.ndarray
    method: Resampling
    s: float
    m: int = 1
    preserved: str = "total"
    rounded: bool = True
    tables_drawn: int = 0
    cell_draws: int = 0
    compensation_units: int = 0

    def published(self) -> dict[str, Any]:
        """What is published with the table: the method and its parameters.

        The draw counts are left out: how many tables it took to meet the
        quality condition depends on the original table.
        """
        out: dict[str, Any] = {
            "method": {
                Resampling.BOOTSTRAP: (
                    "Heer's bootstrap table (Domingo-Ferrer & Mateo-Sanz, Section 2)"
                ),
                Resampling.BINOMIAL: (
                    "cell-oriented binomial resampling with compensation "
                    "(Domingo-Ferrer & Mateo-Sanz, Section 3)"
                ),
            }[self.method],
            "S": self.s,
            "quality_condition": "|x' - x| / sqrt(x (1 - x/n)) < S on every non-zero cell",
            "preserved": self.preserved,
            "zeros": "zero cells stay zero",
            "table": self.table.tolist(),
        }
        if self.method == Resampling.BOOTSTRAP:
            out["M"] = self.m
            out["rounded"] = self.rounded
        return out


def _meets(released: np.ndarray, x: np.ndarray, n: int, s: float) -> bool:
    """Condition (1) on every non-zero cell, and zeros still zero."""
    nz = x > 0
    sigma = np.sqrt(x[nz] * (1 - x[nz] / n))
    ok = np.abs(released[nz] - x[nz]) < s * sigma
    # A cell holding the whole total has sigma = 0: it must come back unchanged.
    ok |= (sigma == 0) & (released[nz] == x[nz])
    return bool(np.all(ok)) and bool(np.all(released[~nz] == 0))


def heer_bootstrap(
    table: npt.ArrayLike,
    s: float = 2.0,
    m: int = 1,
    *,
    round_average: bool = True,
    rng: np.random.Generator | int | None = None,
    max_tables: int = 1_000_000,
) -> ResamplingResult:
    """Heer's bootstrap table with the quality condition (seed 001, Section 2).

    Each attempt draws M bootstrap tables (multinomial draws of n over the
    cells with probabilities ``x / n``) and averages them; the attempt is
    kept if the released table meets condition (1), else all M are drawn
    again. With M = 1 the total n is preserved exactly; the (rounded)
    average of M > 1 tables keeps it only in expectation.

    Args:
        table: Original counts, any shape.
        s: The quality bound S (> 0).
        m: Number of bootstrap tables averaged, a positive odd integer.
        round_average: Release the average of M > 1 tables rounded to
            integers (default) or as decimals.
        rng: Generator, integer seed, or None for a secure Generator.
        max_tables: Give up after drawing this many bootstrap tables.

    Returns:
        The released table and its parameters; ``tables_drawn`` is the cost.

    Raises:
        ParameterError: for negative or non-integer counts, an all-zero
            table, S <= 0, or M not a positive odd integer.
        ComputationError: if no attempt meets the condition within ``max_tables``.
    """
    x = _as_counts(table)
    s = _check_s(s)
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1 or m % 2 == 0:
        raise ParameterError(f"M must be a positive odd integer (1, 3, 5, ...), not {m!r}")
    m = int(m)
    n = int(x.sum())
    gen = resolve_generator(rng)
    p = x.ravel() / n
    xf = x.astype(np.float64)
    drawn = 0
    while drawn + m <= max_tables:
        tables = gen.multinomial(n, p, size=m)
        drawn += m
        if m == 1:
            released: np.ndarray = tables[0].reshape(x.shape)
        else:
            total = tables.sum(axis=0).reshape(x.shape)
            # Odd M: total / M is never halfway between integers, so floor(+0.5) is exact.
            released = (2 * total + m) // (2 * m) if round_average else total / m
        if _meets(released.astype(np.float64), xf, n, s):
            out = released.astype(np.int64) if m == 1 or round_average else released
            out.setflags(write=False)
            preserved = "total" if m == 1 else "none"
            return ResamplingResult(
                out,
                Resampling.BOOTSTRAP,
                s,
                m,
                preserved,
                round_average or m == 1,
                tables_drawn=drawn,
            )
    raise ComputationError(
        f"no bootstrap table met the quality condition S = {s:g} within {max_tables:,} tables; "
        "raise S or M, or use the cell-oriented binomial method"
    )


def _binomial_slice(
    x: np.ndarray, s: float, gen: np.random.Generator, max_draws: int
) -> tuple[np.ndarray, int, int]:
    """The cell-oriented method on a flat array of counts that keeps its own total.

    Returns the released counts, the binomial draws and the compensation units.
    """
    n = int(x.sum())
    out = np.zeros_like(x)
    if n == 0:
        return out, 0, 0
    low, high = quality_interval(x, n, s)
    p = x / n
    # Perturbation stage: redraw, all at once, the cells still outside their interval.
    pending = np.flatnonzero(x > 0)
    draws = 0
    while pending.size:
        v = gen.binomial(n, p[pending])
        draws += pending.size
        ok = (v >= low[pending]) & (v <= high[pending])
        out[pending[ok]] = v[ok]
        pending = pending[~ok]
        if draws > max_draws:
            raise ComputationError(
                f"the binomial draws did not meet the quality condition within {max_draws:,} "
                "draws; raise S"
            )
    # Compensation stage with the two counters of Section 3.1.
    first = out - low
    second = high - out
    diff = int(out.sum()) - n
    moved = abs(diff)
    while diff != 0:
        counter = first if diff > 0 else second
        weights = counter.astype(np.float64)
        total = weights.sum()
        if total <= 0:  # pragma: no cover - cannot happen: x itself lies in every interval
            raise ComputationError("the compensation stage has no room left to restore the total")
        j = int(gen.choice(x.size, p=weights / total))
        step = -1 if diff > 0 else 1
        out[j] += step
        counter[j] -= 1
        diff += step
    return out, draws, moved


def binomial_resample(
    table: npt.ArrayLike,
    s: float = 2.0,
    *,
    preserve_axis: int | None = None,
    rng: np.random.Generator | int | None = None,
    max_draws: int = 10_000_000,
) -> ResamplingResult:
    """The cell-oriented binomial method with compensation (seed 001, Section 3).

    Args:
        table: Original counts, any shape.
        s: The quality bound S (> 0).
        preserve_axis: None keeps the overall total n. An axis number keeps
            that dimension's margins: each slice ``table[..., i, ...]`` along
            the axis is treated as its own table with its own total (``0``
            keeps the row totals of a two-way table, the paper's row
            marginals).
        rng: Generator, integer seed, or None for a secure Generator.
        max_draws: Give up after this many binomial draws.

    Returns:
        The released table and its parameters; ``cell_draws`` is the cost.

    Raises:
        ParameterError: for negative or non-integer counts, an all-zero
            table, S <= 0, or an axis outside the table.
        ComputationError: if the draws do not meet the condition within ``max_draws``.
    """
    x = _as_counts(table)
    s = _check_s(s)
    gen = resolve_generator(rng)
    if preserve_axis is None:
        flat, draws, moved = _binomial_slice(x.ravel(), s, gen, max_draws)
        out = flat.reshape(x.shape)
        preserved = "total"
    else:
        if (
            isinstance(preserve_axis, bool)
            or not isinstance(preserve_axis, int | np.integer)
            or not 0 <= preserve_axis < x.ndim
        ):
            raise ParameterError(
                f"preserve_axis must be an axis of the table, 0 to {x.ndim - 1}, "
                f"not {preserve_axis!r}"
            )
        axis = int(preserve_axis)
        moved_x = np.moveaxis(x, axis, 0)
        result = np.zeros_like(moved_x)
        draws = moved = 0
        for i in range(moved_x.shape[0]):
            sl, d, u = _binomial_slice(moved_x[i].ravel(), s, gen, max_draws)
            result[i] = sl.reshape(moved_x[i].shape)
            draws += d
            moved += u
        out = np.moveaxis(result, 0, axis)
        preserved = f"margins of axis {axis}"
    out = np.ascontiguousarray(out)
    out.setflags(write=False)
    return ResamplingResult(
        out, Resampling.BINOMIAL, s, 1, preserved, True, cell_draws=draws, compensation_units=moved
    )
