"""Whole numbers and synthetic microdata from fitted inner cells (Langsrud 2019, Section 5).

* :func:`stochastic_round`: round up when the decimal part beats a uniform
  draw (unbiased: ``E[round(y)] = y``).
* :func:`multinomial_round`: keep the overall (rounded) total exactly: the
  floors plus a multinomial draw of the missing units with probabilities
  proportional to the decimal parts.
* :func:`synthetic_microdata`: one record per unit of whole-number inner
  cells, with the categories' codes.
* :func:`multinomial_sample`: the synthpop-style synthetic sample, n records
  drawn from fitted cell probabilities.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from tablesafe._errors import ParameterError
from tablesafe._random import resolve_generator
from tablesafe.catalog._catalog import Code

__all__ = ["multinomial_round", "multinomial_sample", "stochastic_round", "synthetic_microdata"]


def _check(y: npt.ArrayLike) -> np.ndarray:
    v = np.asarray(y, dtype=np.float64)
    if np.any(v < 0) or not np.all(np.isfinite(v)):
        raise ParameterError("cells to round must be finite and non-negative")
    return v


def stochastic_round(
    y: npt.ArrayLike, rng: np.random.Generator | int | None = None
) -> npt.NDArray[np.int64]:
    """Round each cell up with probability equal to its decimal part."""
    v = _check(y)
    low = np.floor(v)
    up = resolve_generator(rng).random(v.shape) < (v - low)
    return np.asarray(low + up, dtype=np.int64)


def multinomial_round(
    y: npt.ArrayLike, rng: np.random.Generator | int | None = None
) -> npt.NDArray[np.int64]:
    """Round to whole numbers whose sum is the rounded total of ``y``."""
    v = _check(y)
    low = np.floor(v)
    frac = (v - low).ravel()
    missing = round(float(v.sum())) - int(low.sum())
    out = low.ravel().astype(np.int64)
    if missing > 0:
        # Each cell gains at most one unit: draw the cells without replacement,
        # with probability proportional to the decimal parts.
        gen = resolve_generator(rng)
        chosen = gen.choice(frac.size, size=missing, replace=False, p=frac / frac.sum())
        out[chosen] += 1
    return np.asarray(out.reshape(v.shape), dtype=np.int64)


def synthetic_microdata(
    counts: npt.ArrayLike,
    dimensions: Mapping[str, Sequence[Code]],
    rng: np.random.Generator | int | None = None,
) -> pd.DataFrame:
    """One record per unit of whole-number inner cells, rows in random order.

    Args:
        counts: Whole-number inner cells, shape = lengths of ``dimensions``.
        dimensions: Variable name -> category codes, in the table's order.
        rng: Generator for the order of the records.
    """
    c = np.asarray(counts)
    if not np.issubdtype(c.dtype, np.integer) or np.any(c < 0):
        raise ParameterError("synthetic microdata need whole, non-negative counts")
    names = list(dimensions)
    if tuple(len(v) for v in dimensions.values()) != c.shape:
        raise ParameterError("the dimensions' category lists must match the table's shape")
    flat = np.repeat(np.arange(c.size), c.ravel())
    flat = resolve_generator(rng).permutation(flat)
    idx = np.unravel_index(flat, c.shape)
    return pd.DataFrame(
        {
            name: np.asarray(list(dimensions[name]), dtype=object)[i]
            for name, i in zip(names, idx, strict=True)
        }
    )


def multinomial_sample(
    fitted: npt.ArrayLike, n: int, rng: np.random.Generator | int | None = None
) -> npt.NDArray[np.int64]:
    """A multinomial sample of ``n`` units from cell probabilities ``fitted / sum``."""
    v = _check(fitted)
    if n < 0:
        raise ParameterError("n must be >= 0")
    total = v.sum()
    if total <= 0:
        raise ParameterError("fitted cells must have a positive total")
    draw = resolve_generator(rng).multinomial(n, (v / total).ravel())
    return np.asarray(draw, dtype=np.int64).reshape(v.shape)
