"""Log-linear refit and Laplace noise on margins (Langsrud 2019, Sections 1 and 3).

After least-squares estimation the inner cells are re-estimated by
iterative proportional fitting to ``X^T y_hat``, so that the result follows
the log-linear model of the chosen margins (Tables 4-7 of the paper, in
parentheses). The margins of ``y_hat`` are consistent, so IPF converges.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ComputationError, ParameterError
from tablesafe._random import resolve_generator
from tablesafe.mechanisms._additivity import classic_ipf

__all__ = ["laplace_margins", "loglinear_refit"]


def loglinear_refit(
    y_hat: npt.ArrayLike,
    margins: Sequence[Sequence[int]],
    *,
    tol: float = 1e-8,
    max_iter: int = 10_000,
) -> npt.NDArray[np.float64]:
    """Fit the log-linear model of ``margins`` to the margins of ``y_hat`` (IPF).

    Args:
        y_hat: Estimated inner cells (non-negative), any k-way shape.
        margins: The model's margins (kept dimensions), e.g. ``[(0,), (1,)]``
            for independence in a two-way table.
        tol: Largest absolute margin discrepancy at convergence.
        max_iter: Most IPF sweeps.

    Raises:
        ParameterError: for negative values.
        ComputationError: if IPF does not converge.
    """
    y = np.asarray(y_hat, dtype=np.float64)
    if np.any(y < -1e-12):
        raise ParameterError("log-linear refit needs non-negative inner cells (use Method B)")
    y = np.maximum(y, 0.0)
    k = y.ndim
    targets = []
    for m in margins:
        kept = tuple(sorted(set(int(d) for d in m)))
        dropped = tuple(i for i in range(k) if i not in kept)
        targets.append((kept, y.sum(axis=dropped, keepdims=True) if dropped else y))
    # Start from ones where the margins allow mass: the maximum-entropy start.
    start = np.ones_like(y)
    fitted, _, disc = classic_ipf(start, targets, tol, max_iter)
    if disc > tol:
        raise ComputationError(f"log-linear refit did not converge (discrepancy {disc:.3g})")
    return fitted


def laplace_margins(
    z: npt.ArrayLike,
    k: int,
    epsilon: float,
    rng: np.random.Generator | int | None = None,
) -> npt.NDArray[np.float64]:
    """Add Lap(k / epsilon) noise to margins (epsilon-DP with the straightforward budget).

    Each record contributes to ``k`` perturbed margins, so each gets noise of
    scale ``k / epsilon`` (Langsrud 2019, Section 1).
    """
    if not isinstance(k, int) or k < 1:
        raise ParameterError(f"k (the number of perturbed margins) must be >= 1, not {k!r}")
    if not epsilon > 0:
        raise ParameterError(f"epsilon must be > 0, not {epsilon}")
    v = np.asarray(z, dtype=np.float64)
    return v + resolve_generator(rng).laplace(0.0, k / epsilon, size=v.shape)
