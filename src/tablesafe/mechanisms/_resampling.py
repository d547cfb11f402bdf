"""Resampling for contingency tables (Domingo-Ferrer & Mateo-Sanz 1999, seed 001).

* :func:`heer_bootstrap` — Heer's bootstrap table (Section 2): draw the n
  records anew with replacement (a multinomial draw over the cells), keep
  the table only if every non-zero cell meets the quality condition (1),
  ``|x' - x| / sqrt(x (1 - x/n)) < S``, else draw again; optionally release
  the average of M tables (M odd), which must meet the condition itself.
* :func:`binomial_resample` — the cell-oriented method (Section 3): each
  non-zero cell is drawn from Binomial(n, x/n), redrawn until it lies in the
  quality interval [l(x), u(x)]; then a compensation stage with two counters
  per cell (x' - l and u - x') removes or adds single units, chosen with
  probability proportional to the counters, until the overall total is n
  again. Applied row by row (any one dimension), it preserves that
  dimension's margins instead.

Zeros stay zero in both: a zero cell has probability 0 in the multinomial
and in the binomial draw (p = 0), and the compensation never touches it
(both its counters are 0). Both functions take an explicit Generator and
return the table with what must be published about the mechanism.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ComputationError, ParameterError
from tablesafe._random import resolve_generator

__all__ = ["ResamplingResult", "binomial_resample", "heer_bootstrap", "quality_interval"]


@dataclass(frozen=True)
class ResamplingResult:
    """A resampled table and what is published about it.

    Attributes:
        table: The released table (integers; decimals for an average of M > 1 tables).
        parameters: The public parameters (method, S, M, preserved margins).
        draws: Tables drawn (bootstrap) or cell draws made (binomial), for the
            computational cost.
    """

    table: np.ndarray
    parameters: dict[str, Any] = field(default_factory=dict)
    draws: int = 0


def _check(table: npt.ArrayLike, s: float) -> np.ndarray:
    x = np.asarray(table)
    if x.size == 0:
        raise ParameterError("the table is empty")
    if not np.all(np.isfinite(x.astype(float))) or np.any(x < 0):
        raise ParameterError("counts must be finite and non-negative")
    if np.any(np.asarray(x, dtype=float) != np.round(x.astype(float))):
        raise ParameterError("counts must be whole numbers")
    if not isinstance(s, int | float) or not math.isfinite(s) or s <= 0:
        raise ParameterError(f"S must be a positive number, not {s!r}")
    return np.asarray(np.round(x.astype(float)), dtype=np.int64)


def quality_interval(
    x: npt.ArrayLike, n: int, s: float
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The integers allowed by the quality condition (1): ``|x' - x| < S sqrt(x (1 - x/n))``.

    Returns ``(l, u)``; for a zero cell both are 0.
    """
    xf = np.asarray(x, dtype=np.float64)
    sigma = np.sqrt(np.maximum(xf * (1 - xf / max(n, 1)), 0.0))
    half = s * sigma
    # Strict inequality: the smallest integer above x - S sigma, the largest below x + S sigma.
    low = np.floor(xf - half) + 1
    high = np.ceil(xf + half) - 1
    low = np.where(half > 0, np.minimum(low, xf), xf)
    high = np.where(half > 0, np.maximum(high, xf), xf)
    return np.maximum(low, 0).astype(np.int64), high.astype(np.int64)


def _meets(xp: np.ndarray, x: np.ndarray, n: int, s: float) -> bool:
    nz = x > 0
    sigma = np.sqrt(x[nz] * (1 - x[nz] / n))
    ok = np.abs(xp[nz] - x[nz]) < s * sigma
    return bool(np.all(ok)) and bool(np.all(xp[~nz] == 0))


def heer_bootstrap(
    table: npt.ArrayLike,
    s: float = 2.0,
    m: int = 1,
    *,
    rng: np.random.Generator | int | None = None,
    max_tables: int = 100_000,
) -> ResamplingResult:
    """Heer's bootstrap table with the quality condition (seed 001, Section 2).

    Args:
        table: Original counts (any shape).
        s: The quality bound S (> 0).
        m: Number of bootstrap tables averaged (odd, >= 1).
        rng: Generator or seed.
        max_tables: Give up after this many tables drawn.

    Raises:
        ParameterError: for bad counts, S <= 0 or an even or non-positive M.
        ComputationError: if no table meets the condition within ``max_tables``.
    """
    x = _check(table, s)
    if not isinstance(m, int) or m < 1 or m % 2 == 0:
        raise ParameterError(f"M must be a positive odd integer, not {m!r}")
    n = int(x.sum())
    gen = resolve_generator(rng)
    p = x.ravel() / n if n else x.ravel().astype(float)
    drawn = 0
    while drawn < max_tables:
        tables = gen.multinomial(n, p, size=m).reshape((m, *x.shape))
        drawn += m
        avg = tables.mean(axis=0)
        if _meets(avg, x.astype(float), n, s):
            out = avg if m > 1 else tables[0].astype(np.int64)
            return ResamplingResult(out, {"method": "Heer bootstrap", "S": s, "M": m}, draws=drawn)
    raise ComputationError(
        f"no bootstrap table met the quality condition S = {s} in {max_tables} tables; raise S or M"
    )


def _binomial_1d(
    x: np.ndarray, s: float, gen: np.random.Generator, n_total: int
) -> tuple[np.ndarray, int]:
    n = int(x.sum())
    low, high = quality_interval(x, n_total, s)
    out = np.zeros_like(x)
    draws = 0
    for i, xi in enumerate(x):
        if xi == 0:
            continue
        while True:
            v = int(gen.binomial(n_total, xi / n_total))
            draws += 1
            if low[i] <= v <= high[i]:
                out[i] = v
                break
            if draws > 10_000_000:
                raise ComputationError("binomial resampling could not meet the quality condition")
    # Compensation: two counters per cell; units move only within [l, u].
    first = out - low
    second = high - out
    diff = int(out.sum()) - n
    while diff != 0:
        counter = first if diff > 0 else second
        weights = np.where(x > 0, counter, 0).astype(float)
        if weights.sum() <= 0:
            raise ComputationError("the compensation stage has no room left to restore the total")
        j = int(gen.choice(x.size, p=weights / weights.sum()))
        step = -1 if diff > 0 else 1
        out[j] += step
        first[j] += step
        second[j] -= step
        diff += step
    return out, draws


def binomial_resample(
    table: npt.ArrayLike,
    s: float = 2.0,
    *,
    preserve_axis: int | None = None,
    rng: np.random.Generator | int | None = None,
) -> ResamplingResult:
    """The cell-oriented binomial method with compensation (seed 001, Section 3).

    Args:
        table: Original counts (any shape).
        s: The quality bound S (> 0).
        preserve_axis: ``None`` preserves the overall total; an axis number
            preserves the margins over the other axes for each index of
            that axis (``0`` for the row margins of a two-way table), by
            applying the method to each slice on its own.
        rng: Generator or seed.

    Raises:
        ParameterError: for bad counts, S <= 0 or an axis outside the table.
    """
    x = _check(table, s)
    gen = resolve_generator(rng)
    n = int(x.sum())
    draws = 0
    if preserve_axis is None:
        flat, d = _binomial_1d(x.ravel(), s, gen, n)
        out = flat.reshape(x.shape)
        draws += d
    else:
        if not isinstance(preserve_axis, int) or not 0 <= preserve_axis < x.ndim:
            raise ParameterError(f"preserve_axis must lie in 0..{x.ndim - 1}")
        out = np.zeros_like(x)
        for i in range(x.shape[preserve_axis]):
            sl = np.take(x, i, axis=preserve_axis).ravel()
            # The binomial of a slice uses the slice's own total, as an I x 1 table.
            res, d = _binomial_1d(sl, s, gen, max(int(sl.sum()), 1))
            draws += d
            idx: list[Any] = [slice(None)] * x.ndim
            idx[preserve_axis] = i
            out[tuple(idx)] = res.reshape(np.take(x, i, axis=preserve_axis).shape)
    return ResamplingResult(
        out,
        {
            "method": "cell-oriented binomial",
            "S": s,
            "preserved": "total" if preserve_axis is None else f"margins of axis {preserve_axis}",
        },
        draws=draws,
    )
