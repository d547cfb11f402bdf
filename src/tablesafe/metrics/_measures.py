"""Risk and utility measures for protected tables.

Sources: Shlomo, Krenzke & Li (2019), seed 000, Section 3.5 (percent
perturbed; RM of Antal, Shlomo & Elliot 2014; Hellinger distance; relative
absolute difference); Langsrud (2019), seed 003, eqs. 4-5 (modified
Hellinger distance and utility; mean absolute deviation); Li & Krenzke
(2016), seed 004 (CI overlap, in :mod:`tablesafe.mechanisms._variance`).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy import stats

from tablesafe._errors import ParameterError
from tablesafe.ptable._ptable import PTable

__all__ = [
    "chi_square_independence",
    "entropy_risk",
    "exact_disclosure_probability",
    "hellinger_distance",
    "hellinger_utility",
    "mean_absolute_deviation",
    "modified_hellinger_distance",
    "percent_perturbed",
    "relative_absolute_difference",
]


def _pair(a: npt.ArrayLike, b: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ParameterError("the original and protected tables must have the same cells")
    return x, y


def percent_perturbed(original: npt.ArrayLike, protected: npt.ArrayLike) -> float:
    """Percent of cells whose protected value differs from the original (seed 000, Table 4)."""
    a, b = _pair(original, protected)
    return float(100.0 * np.mean(a != b)) if a.size else 0.0


def _xlogy(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # x log(y) with 0 log(anything) = 0, as the paper defines log(0) = 0.
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(x > 0, x * np.log(np.where(y > 0, y, 1.0)), 0.0)
    return np.asarray(out, dtype=np.float64)


def entropy_risk(original: npt.ArrayLike, protected: npt.ArrayLike) -> float:
    """RM = 1 - H(a|b) / H(a) (Antal, Shlomo & Elliot 2014), as written in seed 000.

    ``H(a) = -sum_k (a_k/N) log(a_k/N)`` and
    ``H(a|b) = -sum_k m_k/N log(m_k/b_k) - sum_k (a_k-m_k)/N log((a_k-m_k)/(N - sum m))
    - sum_k (b_k-m_k)/N log((b_k-m_k)/b_k)`` with ``m_k = min(a_k, b_k)`` and
    ``log 0 = 0``. When the totals differ (M = sum b != N), a is multiplied
    by M and b by N first, as the paper prescribes.
    """
    a, b = _pair(original, protected)
    if np.any(a < 0) or np.any(b < 0):
        raise ParameterError("RM needs non-negative tables")
    n, m_total = a.sum(), b.sum()
    if n <= 0 or m_total <= 0:
        raise ParameterError("RM needs tables with positive totals")
    if not math.isclose(n, m_total):
        a, b = a * m_total, b * n
        n = a.sum()
    h_a = -float(_xlogy(a / n, a / n).sum())
    if h_a == 0:
        return 0.0
    mn = np.minimum(a, b)
    rest = n - mn.sum()
    h = -(
        _xlogy(mn / n, np.divide(mn, b, out=np.zeros_like(mn), where=b > 0)).sum()
        + _xlogy((a - mn) / n, (a - mn) / rest if rest > 0 else np.zeros_like(a)).sum()
        + _xlogy((b - mn) / n, np.divide(b - mn, b, out=np.zeros_like(mn), where=b > 0)).sum()
    )
    return float(1.0 - h / h_a)


def hellinger_distance(original: npt.ArrayLike, protected: npt.ArrayLike) -> float:
    """HD = sqrt(1/2 sum (sqrt(a_k) - sqrt(b_k))^2), non-negative cells (seed 000, 3.5)."""
    a, b = _pair(original, protected)
    if np.any(a < 0) or np.any(b < 0):
        raise ParameterError(
            "the Hellinger distance needs non-negative cells; use the modified one"
        )
    return float(np.sqrt(0.5 * np.sum((np.sqrt(a) - np.sqrt(b)) ** 2)))


def modified_hellinger_distance(original: npt.ArrayLike, protected: npt.ArrayLike) -> float:
    """Hellinger distance allowing negative values (seed 003, eq. 4).

    ``HD = sqrt(1/2 sum (s(f) - s(g))^2)`` with ``s(x) = sign(x) sqrt(|x|)``.
    """
    a, b = _pair(original, protected)

    def s(x: np.ndarray) -> np.ndarray:
        return np.asarray(np.sign(x) * np.sqrt(np.abs(x)))

    return float(np.sqrt(0.5 * np.sum((s(a) - s(b)) ** 2)))


def hellinger_utility(original: npt.ArrayLike, protected: npt.ArrayLike) -> float:
    """Utility 1 - HD / sqrt(sum f) (seed 003, eq. 5); 1 for identical tables, may go below 0."""
    a, _ = _pair(original, protected)
    total = float(np.abs(a).sum())
    if total <= 0:
        raise ParameterError("utility needs an original table with a positive total")
    return 1.0 - modified_hellinger_distance(original, protected) / math.sqrt(total)


def mean_absolute_deviation(original: npt.ArrayLike, protected: npt.ArrayLike) -> float:
    """MAD = sum |f_i - g_i| / n (seed 003, Tables 11-12)."""
    a, b = _pair(original, protected)
    return float(np.mean(np.abs(a - b))) if a.size else 0.0


def relative_absolute_difference(original: npt.ArrayLike, protected: npt.ArrayLike) -> float:
    """Percent relative absolute difference, 100 * sum |b_k - a_k| / sum a_k (seed 000, Table 5)."""
    a, b = _pair(original, protected)
    total = a.sum()
    if total <= 0:
        raise ParameterError("the original table must have a positive total")
    return float(100.0 * np.abs(b - a).sum() / total)


def chi_square_independence(table: npt.ArrayLike) -> tuple[float, float]:
    """Pearson's chi-square statistic and p-value for independence in a two-way table.

    Note: on a perturbed table the naive test is biased (noise adds variance
    the test does not know about); seed 000 Figures 2-4 show the effect.
    Rows or columns that are all zero are dropped (they carry no
    information and would make expected counts zero).
    """
    t = np.asarray(table, dtype=np.float64)
    if t.ndim != 2:
        raise ParameterError("the chi-square test needs a two-way table")
    t = np.maximum(t, 0.0)
    t = t[t.sum(axis=1) > 0][:, t.sum(axis=0) > 0]
    if min(t.shape) < 2:
        raise ParameterError("the chi-square test needs at least two non-empty rows and columns")
    res = stats.chi2_contingency(t, correction=False)
    return float(res.statistic), float(res.pvalue)


def exact_disclosure_probability(
    ptable: object, k: int, prior: npt.ArrayLike | None = None
) -> float:
    """P(original = k | published = k) for a cell-wise ptable and a prior over counts.

    Args:
        ptable: A :class:`~tablesafe.PTable`.
        k: The small count (1, 2, 3, ...).
        prior: Prior probabilities of original counts 0..len-1 (default:
            uniform over 0..k+20, i.e. no knowledge).
    """
    if not isinstance(ptable, PTable):
        raise ParameterError("exact-disclosure probabilities need a PTable")
    p = np.full(k + 21, 1.0) if prior is None else np.asarray(prior, dtype=np.float64)
    p = p / p.sum()
    joint = np.array([p[i] * ptable.distribution(i).get(k, 0.0) for i in range(p.size)])
    total = joint.sum()
    return float(joint[k] / total) if total > 0 and k < joint.size else 0.0
