"""Variances and confidence intervals of weighted estimates from replicate weights.

For an estimate ``theta`` (a weighted count) and its replicate estimates
``theta_r`` (the same count with replicate weight r), the replicate variance
is ``v = c * sum_r (theta_r - theta)**2``, with the coefficient ``c`` of the
catalog's replicate design (:class:`~tablesafe.ReplicateDesign`): JK1
``(R-1)/R``, JK2 ``1``, BRR with Fay factor ``rho`` ``1 / (R (1-rho)**2)``,
bootstrap ``1/(R-1)``. The standard error is ``sqrt(v)`` and the normal
confidence interval ``theta ± z_{1-a/2} * se``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy import stats

from tablesafe._catalog import ReplicateDesign
from tablesafe._errors import ParameterError

__all__ = ["confidence_interval", "replicate_se"]


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
    estimate: npt.NDArray[np.float64], se: npt.NDArray[np.float64], level: float = 0.95
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Normal confidence intervals ``estimate ± z * se`` at ``level``."""
    if not 0 < level < 1:
        raise ParameterError(f"confidence level must lie in (0, 1), not {level}")
    z = float(stats.norm.ppf(0.5 + level / 2))
    return estimate - z * se, estimate + z * se
