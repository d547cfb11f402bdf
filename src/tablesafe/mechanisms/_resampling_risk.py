"""Disclosure risk and expected cost of the resampling methods (seed 001, Sections 2.2 and 4).

**Exact disclosure** (Table 1 of seed 001): the probability that a released
frequency k is the true one, ``P(X = k | X' = k)``. By Bayes,
``P(X = k | X' = k) = pi(k) P(X' = k | X = k) / sum_x pi(x) P(X' = k | X = x)``.
We use a uniform prior ``pi`` on the non-zero originals 1, 2, ..., x_max
(zeros stay zero, so a released k >= 1 never comes from x = 0; x_max = 200
is far beyond any x that can be released as k <= 3) and, per cell, the
release distribution of one cell:

* bootstrap, M = 1, and the cell-oriented method (its perturbation stage,
  the distribution given in Section 3.2): Binomial(n, x/n) restricted to
  the quality interval ``[l(x), u(x)]`` and renormalised;
* bootstrap average of M tables: the sum of M bootstrap counts is
  Binomial(M n, x/n); the released value is its average rounded to the
  nearest integer (M odd: no ties), restricted to ``[l(x), u(x)]``.

This treats the quality condition cell by cell, as if the other cells of the
table did not reject the draw (for the bootstrap they are only weakly
dependent through the fixed total), and leaves out the compensation stage,
which moves a few units in a large table. Simulations of the whole methods
are in ``benchmarks/bench_resampling.py``.

**Expected computation** (Section 4): an attempt of the bootstrap costs M
tables and succeeds when every non-zero cell meets the condition, so the
expected number of tables drawn is ``M / prod_cells p_M(x)``; the
cell-oriented method draws each cell until it lands in its interval,
``sum_cells 1 / p_1(x)`` binomial draws in expectation (the cells are
treated as independent, as in the paper's analysis).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import numpy.typing as npt
from scipy import stats

from tablesafe._errors import ParameterError
from tablesafe.mechanisms._resampling_base import _as_counts, _check_s, quality_interval

__all__ = [
    "PAPER_TABLE_1",
    "bootstrap_acceptance",
    "exact_disclosure_probability",
    "expected_binomial_draws",
    "expected_bootstrap_tables",
    "optimal_m",
    "resampling_disclosure_probability",
]

#: Table 1 of seed 001: ``{(M, S): (P(k=1), P(k=2), P(k=3))}``, as printed.
PAPER_TABLE_1: dict[tuple[int, float], tuple[float, float, float]] = {
    (1, 3.0): (0.40, 0.27, 0.22),
    (1, 2.0): (0.42, 0.28, 0.24),
    (1, 1.5): (0.47, 0.28, 0.27),
    (3, 3.0): (0.65, 0.46, 0.38),
    (3, 2.0): (0.65, 0.46, 0.38),
    (3, 1.5): (0.66, 0.46, 0.39),
    (5, 3.0): (0.76, 0.58, 0.48),
    (5, 2.0): (0.76, 0.58, 0.48),
    (5, 1.5): (0.76, 0.58, 0.48),
}


def _check_m(m: int) -> int:
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1 or m % 2 == 0:
        raise ParameterError(f"M must be a positive odd integer (1, 3, 5, ...), not {m!r}")
    return int(m)


def _release_probabilities(values: np.ndarray, x: int, n: int, s: float, m: int) -> np.ndarray:
    """``P(released = v | original = x)`` for each v in ``values`` (one cell)."""
    low, high = quality_interval(np.array([x]), n, s)
    lo_q, hi_q = int(low[0]), int(high[0])
    half = (m - 1) // 2
    dist = stats.binom(m * n, x / n)

    def mass(v: np.ndarray) -> np.ndarray:
        # The rounded average is v when the sum lies in [M v - (M-1)/2, M v + (M-1)/2].
        return np.asarray(dist.cdf(m * v + half) - dist.cdf(m * v - half - 1))

    inside = np.arange(lo_q, hi_q + 1)
    z = float(mass(inside).sum())
    v = np.asarray(values)
    out = np.where((v >= lo_q) & (v <= hi_q), mass(v), 0.0)
    return np.asarray(out / z if z > 0 else out * 0.0)


def resampling_disclosure_probability(
    k: int,
    s: float,
    m: int = 1,
    *,
    n: int = 10_000,
    x_max: int = 200,
) -> float:
    """``P(X = k | X' = k)``: a released k is the true count (seed 001, Table 1).

    The prior on the original count is uniform on 1..x_max (see the module
    docstring for the model). With M = 1 this is also the figure of the
    cell-oriented method, whose perturbation stage releases the same
    truncated binomial.

    Args:
        k: The released frequency (>= 1).
        s: The quality bound S.
        m: Bootstrap tables averaged (odd); 1 for the cell-oriented method.
        n: The table's total (the paper: the figure hardly changes above 1000).
        x_max: Largest original count in the prior's support.

    Returns:
        The posterior probability that the original count is k.

    Raises:
        ParameterError: for k < 1, S <= 0, even M, n < 1 or x_max < k.
    """
    s = _check_s(s)
    m = _check_m(m)
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ParameterError(f"k must be a positive integer, not {k!r}")
    if n < 1 or x_max < k or x_max >= n:
        raise ParameterError(f"need 1 <= k <= x_max < n, not k={k}, x_max={x_max}, n={n}")
    likelihood = np.array(
        [_release_probabilities(np.array([k]), x, n, s, m)[0] for x in range(1, x_max + 1)]
    )
    return float(likelihood[k - 1] / likelihood.sum())


def _cell_acceptance(x: np.ndarray, n: int, s: float, m: int) -> np.ndarray:
    """Probability that one cell of an attempt meets condition (1)."""
    low, high = quality_interval(x, n, s)
    half = (m - 1) // 2
    p = np.ones(x.shape, dtype=np.float64)
    nz = x > 0
    dist = stats.binom(m * n, x[nz] / n)
    p[nz] = dist.cdf(m * high[nz] + half) - dist.cdf(m * low[nz] - half - 1)
    return p


def bootstrap_acceptance(table: npt.ArrayLike, s: float, m: int = 1) -> float:
    """Probability that one bootstrap attempt (M tables averaged) meets condition (1).

    The product of the cells' probabilities (cells treated as independent).
    """
    x = _as_counts(table).ravel()
    return float(np.prod(_cell_acceptance(x, int(x.sum()), _check_s(s), _check_m(m))))


def expected_bootstrap_tables(table: npt.ArrayLike, s: float, m: int = 1) -> float:
    """Expected number of bootstrap tables drawn until the release meets condition (1).

    Each attempt draws M tables and succeeds with :func:`bootstrap_acceptance`.
    """
    acc = bootstrap_acceptance(table, s, m)
    return math.inf if acc <= 0 else _check_m(m) / acc


def expected_binomial_draws(table: npt.ArrayLike, s: float) -> float:
    """Expected number of binomial draws of the cell-oriented method's perturbation stage."""
    x = _as_counts(table).ravel()
    p = _cell_acceptance(x, int(x.sum()), _check_s(s), 1)
    return float(np.sum(1.0 / p[x > 0]))


def optimal_m(table: npt.ArrayLike, s: float, m_max: int = 21) -> int:
    """The odd M that minimises the expected number of bootstrap tables drawn (Section 4.1)."""
    costs = {m: expected_bootstrap_tables(table, s, m) for m in range(1, m_max + 1, 2)}
    return min(costs, key=lambda m: (costs[m], m))


def exact_disclosure_probability(
    k: int, s: float, m: int = 1, *, n: int = 10_000, x_max: int = 200
) -> float:
    """Deprecated name of :func:`resampling_disclosure_probability` (goes in the next release).

    ``tablesafe.metrics.exact_disclosure_probability`` is another function (of a
    cell-wise ptable); one name for two ideas was renamed here (issue 27).
    """
    warnings.warn(
        "tablesafe.mechanisms.exact_disclosure_probability is now "
        "resampling_disclosure_probability; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    return resampling_disclosure_probability(k, s, m, n=n, x_max=x_max)
