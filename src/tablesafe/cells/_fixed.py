"""Exact, order-free sums of weights: binary fixed point (DESIGN decision 4).

Floating-point sums depend on the order of the terms, so a weighted count
summed by two DuckDB threads, by Spark or over a shuffled file differs in
its last digits. tablesafe therefore sums weights as integers: every weight
``w`` (and every replicate weight) becomes the integer
``round(w * 2**16)``, i.e. ``w`` rounded to the nearest multiple of
``2**-16`` (about 1.5e-5), halves away from zero. Scaling by a power of two
is exact in binary floating point, and DuckDB's and Spark's ``ROUND`` of a
double and the numpy expression below round the exact product the same
way, so numpy, DuckDB and Spark produce the same integer for every record.
(``floor(x + 0.5)`` would not do: the addition itself rounds, so
0.49999999999999994 becomes 1; and it was measured 10% slower in DuckDB.) Sums of
integers are exact in any order; DuckDB adds these integer values as
doubles, which is exact (and faster than 128-bit integers) as long as every
partial sum stays below 2**53, which the range below guarantees. Results
are converted back to floats once (``sum / 2**16``, correctly rounded),
after all summation.

Range: each ``|w|`` must be below :data:`MAX_WEIGHT` (2**32, about 4.3e9)
and the sum of ``|w|`` over the whole microdata file below
:data:`MAX_TOTAL` (2**36, about 6.9e10: a population of 69 billion), so
that every partial sum of fixed-point units stays below 2**52. Validation
refuses files outside this range with a :class:`DataError`; nothing ever
wraps or rounds silently.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = [
    "FIXED_BITS",
    "FIXED_SCALE",
    "MAX_TOTAL",
    "MAX_WEIGHT",
    "fixed_sql",
    "from_fixed",
    "range_error",
    "to_fixed",
]

#: Fractional bits of the fixed-point representation.
FIXED_BITS = 16
#: Units per weight unit: a weight w is held as round(w * FIXED_SCALE).
FIXED_SCALE = 2**FIXED_BITS
#: Largest absolute weight (or replicate weight) of one record.
MAX_WEIGHT = 2.0**32
#: Largest sum of absolute weights over a microdata file.
MAX_TOTAL = 2.0**36


def to_fixed(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Weights as fixed-point integers: ``round(w * 2**16)``, halves away from zero."""
    w = np.asarray(values, dtype=np.float64)
    x = w * float(FIXED_SCALE)
    whole = np.trunc(x)
    # x - whole is exact, so the comparison with 0.5 decides the rounding exactly.
    return (whole + np.copysign(np.abs(x - whole) >= 0.5, x)).astype(np.int64)


def from_fixed(values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Fixed-point sums back to floats (one correctly rounded division)."""
    return np.asarray(values, dtype=np.int64).astype(np.float64) / float(FIXED_SCALE)


def fixed_sql(expr: str) -> str:
    """The same conversion as an SQL expression (DuckDB and Spark SQL).

    An integer-valued DOUBLE; sums of it are
    exact within the range checked at validation, and are cast to BIGINT.
    """
    return f"ROUND(CAST({expr} AS DOUBLE) * CAST({FIXED_SCALE} AS DOUBLE))"


def range_error(column: str, largest: float, total: float) -> str | None:
    """The message for a weight column outside the fixed-point range, or ``None``."""
    if largest >= MAX_WEIGHT:
        return (
            f"weight column {column} holds a value of absolute size {largest:.6g}; weights are "
            f"summed exactly in fixed point and must be below {MAX_WEIGHT:.0f} (2**32)"
        )
    if total >= MAX_TOTAL:
        return (
            f"weight column {column} sums to {total:.6g} in absolute value; exact fixed-point "
            f"sums hold totals below {MAX_TOTAL:.0f} (2**36)"
        )
    return None
