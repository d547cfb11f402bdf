"""Variances and confidence intervals of weighted estimates from replicate weights.

For an estimate ``theta`` (a weighted count) and its replicate estimates
``theta_r`` (the same count with replicate weight r), the replicate variance
is ``v = c * sum_r (theta_r - theta)**2``, with the coefficient ``c`` of the
catalog's replicate design (:class:`~tablesafe.catalog.ReplicateDesign`): JK1
``(R-1)/R``, JK2 ``1``, BRR with Fay factor ``rho`` ``1 / (R (1-rho)**2)``,
bootstrap ``1/(R-1)``. The standard error is ``sqrt(v)`` and the normal
confidence interval ``theta ± z_{1-a/2} * se``, its lower end raised to 0
for a figure that cannot be negative (a count, a weighted count).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ParameterError
from tablesafe.catalog._catalog import ReplicateDesign

__all__ = ["ci_overlap", "confidence_interval", "replicate_se"]


def replicate_se(
    estimate: npt.NDArray[np.float64],
    replicates: npt.NDArray[np.float64],
    design: ReplicateDesign,
) -> npt.NDArray[np.float64]:
    """Standard errors from replicate estimates.

    Args:
        estimate: The full-sample estimates, any shape.
        replicates: Replicate estimates, shape ``(R, *estimate.shape)``.
        design: The replicate design (its coefficient is used).
    """
    if replicates.shape[1:] != estimate.shape or replicates.shape[0] != len(design.columns):
        raise ParameterError(
            f"replicate estimates of shape {replicates.shape} do not match estimates of shape "
            f"{estimate.shape} and {len(design.columns)} replicates"
        )
    dev = replicates - estimate[None, ...]
    return np.asarray(np.sqrt(design.coefficient * np.sum(dev * dev, axis=0)), dtype=np.float64)


def confidence_interval(
    estimate: npt.NDArray[np.float64],
    se: npt.NDArray[np.float64],
    level: float = 0.95,
    *,
    lower_bound: float | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Normal confidence intervals ``estimate ± z * se`` at ``level``.

    Args:
        estimate: The estimates.
        se: Their standard errors.
        level: The confidence level, in (0, 1).
        lower_bound: The smallest value the figure can take (0 for counts and
            weighted counts): lower ends below it are raised to it, so an
            interval never holds impossible values. ``None``: no bound.
    """
    if not 0 < level < 1:
        raise ParameterError(f"confidence level must lie in (0, 1), not {level}")
    from scipy import stats  # imported when needed: a slow import

    z = float(stats.norm.ppf(0.5 + level / 2))
    low = estimate - z * se
    if lower_bound is not None:
        low = np.maximum(low, lower_bound)
    return low, estimate + z * se


def ci_overlap(
    original_low: npt.ArrayLike,
    original_high: npt.ArrayLike,
    perturbed_low: npt.ArrayLike,
    perturbed_high: npt.ArrayLike,
) -> npt.NDArray[np.float64]:
    """Confidence-interval overlap of Karr et al. (2006), as used in seed 004 Section 3.

    ``J = 1/2 (overlap / original length + overlap / perturbed length)``,
    where the overlap is the length of the intersection of the two
    intervals (0 if they are disjoint). 1 means identical intervals; cells
    with an interval of length 0 get 1 if both are the same point, else 0.
    """
    lo1, hi1 = np.asarray(original_low, float), np.asarray(original_high, float)
    lo2, hi2 = np.asarray(perturbed_low, float), np.asarray(perturbed_high, float)
    overlap = np.maximum(np.minimum(hi1, hi2) - np.maximum(lo1, lo2), 0.0)
    len1, len2 = hi1 - lo1, hi2 - lo2
    with np.errstate(divide="ignore", invalid="ignore"):
        j = 0.5 * (overlap / len1 + overlap / len2)
    same_point = (len1 == 0) & (len2 == 0)
    j = np.where(same_point, np.where(lo1 == lo2, 1.0, 0.0), j)
    return np.asarray(np.nan_to_num(j, nan=0.0), dtype=np.float64)
