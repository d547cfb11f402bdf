"""Checks and the quality interval shared by the resampling methods (seed 001)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ParameterError

__all__: list[str] = []


def _as_counts(table: npt.ArrayLike) -> np.ndarray:
    try:
        x = np.asarray(table, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError("the table must be an array of counts") from None
    if x.ndim == 0 or x.size == 0:
        raise ParameterError("the table is empty; give at least one cell")
    if not np.all(np.isfinite(x)):
        raise ParameterError("the table has missing or infinite counts")
    if np.any(x < 0):
        raise ParameterError("the table has negative counts; counts must be non-negative")
    if np.any(x != np.round(x)):
        raise ParameterError("the table has non-integer counts; counts must be whole numbers")
    if x.sum() <= 0:
        raise ParameterError("the table is all zeros; there is nothing to resample")
    return x.astype(np.int64)


def _check_s(s: float) -> float:
    if isinstance(s, bool) or not isinstance(s, int | float) or not math.isfinite(s) or s <= 0:
        raise ParameterError(f"S must be a positive number (e.g. 1.5, 2 or 3), not {s!r}")
    return float(s)


def quality_interval(
    x: npt.ArrayLike, n: int, s: float
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The integers allowed by the quality condition (1) of seed 001.

    Condition (1) is strict, ``-S < (x' - x) / sqrt(x (1 - x/n)) < S``, so
    ``l(x)`` is the smallest integer above ``x - S sigma`` and ``u(x)`` the
    largest below ``x + S sigma``, with ``sigma = sqrt(x (1 - x/n))`` (never
    below 0). A zero cell, or a cell holding the whole total (sigma = 0),
    gets the interval ``[x, x]``.

    Args:
        x: Original counts.
        n: The overall total (the slice's total for the margin variant).
        s: The bound S (> 0).

    Returns:
        ``(l, u)``, arrays like ``x``.
    """
    s = _check_s(s)
    xf = np.asarray(x, dtype=np.float64)
    sigma = np.sqrt(np.maximum(xf * (1 - xf / max(int(n), 1)), 0.0))
    half = s * sigma
    low = np.floor(xf - half) + 1
    high = np.ceil(xf + half) - 1
    low = np.where(half > 0, np.minimum(low, xf), xf)
    high = np.where(half > 0, np.maximum(high, xf), xf)
    return np.maximum(low, 0).astype(np.int64), high.astype(np.int64)
