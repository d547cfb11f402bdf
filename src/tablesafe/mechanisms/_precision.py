"""Percentages, and the precision of published estimates: sampling and perturbation variance.

A published weighted figure differs from the population value for two
reasons: the sample (measured by the replicate weights) and the protection
(the count's perturbation ``v``, the weight noise, the rounding). As the
ABS does for its relative standard errors, the standard error tablesafe
publishes adds both variances (docs/precision.md)::

    se(W')**2 = c * sum_r (W'_r - W')**2  +  m**2 * (E[v**2] + s**2 / 3)

where ``c`` is the replicate design's coefficient, ``W'_r`` the protected
replicate figures (:mod:`tablesafe.mechanisms._weighted`), ``m = W' / n'``
the cell's mean weight from its *protected* figures, ``E[v**2]`` the mean
square of the count's perturbation (the ptable's row of the protected
count; ``q (q + 1) / 3`` for drop/add-up-to-q) and ``s`` the weight noise
(uniform on ``[-s m, s m]``, variance ``s**2 m**2 / 3``). In a table whose
margins are sums of its cells, a margin's perturbation variance is the sum
of its cells'.

A percentage ``p = N / D`` of two published figures has the sampling
variance of its replicate recomputation ``c * sum_r (N_r / D_r - p)**2`` and
the perturbation variance of the delta method::

    (var(e_N) - 2 p cov(e_N, e_D) + p**2 var(e_D)) / D**2

with ``cov(e_N, e_D) = var(e_N)`` where the denominator adds up the
numerator's cell (an additive table), 0 where each cell was perturbed on
its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tablesafe._request import Percent
from tablesafe._rounding import Rounding
from tablesafe.catalog._catalog import ReplicateDesign
from tablesafe.catalog._magnitudes import MAGNITUDE_SCALE
from tablesafe.mechanisms._additivity import aggregate_margins
from tablesafe.mechanisms._magnitudes import MagnitudeMethod, dp_grid_scale
from tablesafe.mechanisms._records import DropAddRecords
from tablesafe.mechanisms._variance import replicate_se
from tablesafe.ptable._ptable import PTable

if TYPE_CHECKING:
    from tablesafe.mechanisms._magnitudes import MagnitudeProtection

__all__ = [
    "PERCENT_ROUNDING",
    "count_noise_mean_square",
    "denominator_index",
    "magnitude_noise_variance",
    "magnitude_replicates",
    "percent_of",
    "percent_precision",
    "ratio_precision",
    "weighted_noise_variance",
]

#: Percentages, their standard errors and intervals are published to two decimals.
PERCENT_ROUNDING = Rounding.parse("0.01")


def denominator_index(kind: Percent, shape: tuple[int, ...]) -> tuple[npt.NDArray[np.intp], ...]:
    """For every cell of an extended array, the index of its percentage's denominator.

    The denominator of a cell is the cell with the dimensions the percentage
    totals over (:meth:`Percent.over`) set to their total slot; a cell that
    is already such a total is its own denominator (100%).
    """
    idx = list(np.indices(shape))
    for axis in kind.over(len(shape)):
        idx[axis] = np.full(shape, shape[axis] - 1, dtype=idx[axis].dtype)
    return tuple(idx)


def percent_of(values: npt.NDArray[np.float64], kind: Percent) -> npt.NDArray[np.float64]:
    """``100 * value / denominator`` for every cell; NaN where the denominator is not positive."""
    values = np.asarray(values, dtype=np.float64)
    den = values[denominator_index(kind, values.shape)]
    out = np.full(values.shape, np.nan)
    np.divide(100.0 * values, den, out=out, where=den > 0)
    return out


def count_noise_mean_square(
    mechanism: Any, counts: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """``E[v**2]``: the mean square of the count perturbation at each protected count.

    A ptable's row of the protected count (its mean square, bias included);
    for record-level drop/add-up-to-q, ``d`` uniform on ``-q .. q`` with ``q``
    of the protected count: ``q (q + 1) / 3``; 0 without a mechanism.
    """
    c = np.asarray(counts, dtype=np.int64)
    if isinstance(mechanism, DropAddRecords):
        q = mechanism.q(c).astype(np.float64)
        return q * (q + 1.0) / 3.0
    if isinstance(mechanism, PTable):
        rows = list(mechanism.rows) + list(mechanism.residue_rows)
        ms = np.array([float((p * v.astype(np.float64) ** 2).sum()) for v, p in rows])
        return np.asarray(ms[mechanism.row_index(c)], dtype=np.float64)
    return np.zeros(c.shape)


def weighted_noise_variance(
    mechanism: Any,
    counts: npt.NDArray[np.int64],
    weighted: npt.NDArray[np.float64],
    weight_noise: float,
    additive: bool,
    sets: Sequence[tuple[int, ...]],
) -> npt.NDArray[np.float64]:
    """The variance the protection adds to each weighted figure: ``m**2 (E[v**2] + s**2 / 3)``.

    ``m = W' / n'`` from the protected figures (0 where ``n' = 0``: such a
    cell publishes 0 and never a standard error). In an additive table
    (``additive``) the inner cells' variances are added up into the margins
    of ``sets``; otherwise each cell has its own.

    Args:
        mechanism: The protection's mechanism (``None``: nothing added).
        counts: Protected counts, extended shape.
        weighted: Protected weighted figures (unrounded), extended shape.
        weight_noise: ``s``, the weight noise's half-width in mean weights.
        additive: Whether margins are sums of the inner cells.
        sets: The table's grouping sets (for the sums of an additive table).
    """
    if mechanism is None:
        return np.zeros(weighted.shape)
    mean = np.divide(weighted, counts, out=np.zeros(weighted.shape), where=counts > 0)
    var = mean**2 * (count_noise_mean_square(mechanism, counts) + weight_noise**2 / 3.0)
    if additive:
        var = aggregate_margins(var, tuple(sets))
    return np.asarray(var, dtype=np.float64)


def percent_precision(
    kind: Percent,
    values: npt.NDArray[np.float64],
    replicates: npt.NDArray[np.float64],
    noise_variance: npt.NDArray[np.float64],
    design: ReplicateDesign,
    *,
    additive: bool,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Sampling and perturbation variances of a percentage, in percentage points squared.

    Args:
        kind: The percentage.
        values: The protected (unrounded) figures the percentage divides.
        replicates: Their protected replicate figures ``(R, *shape)``.
        noise_variance: The perturbation variance of each figure.
        design: The replicate design.
        additive: Whether a denominator adds up its numerator's cell (then
            the two perturbations share the numerator's part).

    Returns:
        The sampling variance (replicate recomputation of the ratio) and
        the perturbation variance (delta method); NaN where the denominator
        is not positive.
    """
    den_at = denominator_index(kind, values.shape)
    p = percent_of(values, kind) / 100.0
    den = values[den_at]
    # The denominators of every replicate: the same cells, one layer per replicate.
    rep_den = np.stack([r[den_at] for r in replicates])
    p_r = np.full(replicates.shape, np.nan)
    np.divide(replicates, rep_den, out=p_r, where=rep_den > 0)
    ok = ~np.isnan(p) & ~np.isnan(p_r).any(axis=0)
    sampling = np.where(ok, replicate_se(np.nan_to_num(p), np.nan_to_num(p_r), design) ** 2, np.nan)
    var_n, var_d = noise_variance, noise_variance[den_at]
    same = np.all([a == b for a, b in zip(np.indices(values.shape), den_at, strict=True)], axis=0)
    cov = np.where(additive | same, var_n, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        noise = (var_n - 2.0 * p * cov + p**2 * var_d) / den**2
    noise = np.where(ok, np.maximum(noise, 0.0), np.nan)
    return 1e4 * sampling, 1e4 * noise


# -- sums and means -------------------------------------------------------------------


def dp_noise_variance(bound: float, epsilon: float) -> float:
    """The variance of a DP sum's discrete Laplace noise, in the variable's unit squared.

    ``2 q / (1 - q)**2`` grid steps squared with ``q = exp(-s / t)`` (the
    sampler's integers, :func:`~tablesafe.mechanisms._magnitudes.dp_grid_scale`):
    ``2 b**2`` of the continuous Laplace of scale ``b`` within a step.
    """
    s, t = dp_grid_scale(bound, epsilon)
    q = math.exp(-s / t)
    return float(2.0 * q / (1.0 - q) ** 2 / MAGNITUDE_SCALE**2)


def magnitude_noise_variance(
    prot: MagnitudeProtection,
    total: npt.NDArray[np.float64],
    top: npt.NDArray[np.float64],
    bound: float,
) -> npt.NDArray[np.float64]:
    """The variance the protection of magnitudes adds to each sum.

    The cell-key method moves a sum by ``sum_j t_j`` in one direction, with
    ``t_j = m eps_j x_(j) (mu + |v_j|)`` and ``v_j`` from the numeric
    ptable's row of ``|X| / (m eps_j x_(j))``: its mean square is
    ``(sum_j d_j E[mu + |v_j|])**2 + sum_j d_j**2 var(|v_j|)`` with
    ``d_j = m eps_j x_(j)`` (the ``v_j`` are independent draws).
    Differential privacy adds discrete Laplace noise (:func:`dp_noise_variance`).

    Args:
        prot: The site's protection of magnitudes.
        total: The cells' sums.
        top: Their largest absolute contributions ``(K, ...)``.
        bound: The variable's ``max(|lower|, |upper|)`` (differential privacy).
    """
    if prot.method == MagnitudeMethod.NONE:
        return np.zeros(total.shape)
    if prot.method == MagnitudeMethod.DP:
        return np.full(total.shape, dp_noise_variance(bound, prot.epsilon))
    table = prot.ptable()
    first = np.array(
        [float((p * (prot.mu + np.abs(v))).sum()) for v, p in zip(table.v, table.p, strict=True)]
    )
    second = np.array(
        [
            float((p * (prot.mu + np.abs(v)) ** 2).sum())
            for v, p in zip(table.v, table.p, strict=True)
        ]
    )
    mean = np.zeros(total.shape)
    spread = np.zeros(total.shape)
    for j in range(prot.top_k):
        delta = prot.share * prot.eps[j] * top[j]
        live = delta > 0
        a = np.divide(np.abs(total), delta, out=np.full(total.shape, np.inf), where=live)
        row = table.row_for(np.minimum(a, table.D))
        mean += np.where(live, delta * first[row], 0.0)
        spread += np.where(live, delta**2 * (second[row] - first[row] ** 2), 0.0)
    return np.asarray(mean**2 + spread, dtype=np.float64)


def magnitude_replicates(
    protected: npt.NDArray[np.float64],
    total: npt.NDArray[np.float64],
    replicate_totals: npt.NDArray[np.float64],
    n: npt.NDArray[np.int64],
    counts: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """Replicate sums around the protected sum: ``X' + sqrt(n' / n) (X_r - X)``.

    As for weighted counts (:func:`tablesafe.mechanisms._weighted.replicate_figures`):
    the sampling variance is the one of a cell of ``n'`` records with these values.
    """
    scale = np.sqrt(np.divide(counts, n, out=np.zeros(n.shape), where=n > 0))
    return np.asarray(protected + scale * (replicate_totals - total), dtype=np.float64)


def ratio_precision(
    num: npt.NDArray[np.float64],
    num_reps: npt.NDArray[np.float64],
    num_noise: npt.NDArray[np.float64],
    den: npt.NDArray[np.float64],
    den_reps: npt.NDArray[np.float64],
    den_noise: npt.NDArray[np.float64],
    design: ReplicateDesign,
) -> npt.NDArray[np.float64]:
    """The variance of ``num / den`` (a mean) whose two perturbations are independent.

    Sampling: the ratio recomputed on every replicate; perturbation: the
    delta method ``(var(e_N) + r**2 var(e_D)) / D**2``. NaN where a
    denominator is not positive.
    """
    ok = (den > 0) & np.all(den_reps > 0, axis=0)
    ratio = np.divide(num, den, out=np.zeros(num.shape), where=ok)
    rep_ratio = np.divide(num_reps, den_reps, out=np.zeros(num_reps.shape), where=den_reps > 0)
    sampling = replicate_se(ratio, rep_ratio, design) ** 2
    noise = np.divide(num_noise + ratio**2 * den_noise, den**2, out=np.zeros(num.shape), where=ok)
    return np.where(ok, sampling + noise, np.nan)
