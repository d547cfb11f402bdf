"""Estimating inner cells from (perturbed) margins: Langsrud (2019), Sections 2-3.

* **Method A** (eq. 2): ``y = (X^T)^+ z``, the minimum-norm least-squares
  solution, by LSQR on the sparse system (no dense pseudo-inverse).
* **Method B**: non-negative least squares with a small ridge penalty,
  ``min ||X^T y - z||^2 + lambda^2 ||y||^2, y >= 0``: the ridge picks, among
  exact solutions, the one closest to minimum norm. Small problems are
  solved exactly by ``scipy.optimize.nnls`` on the stacked system
  ``[X^T; lambda I] y = [z; 0]`` (the trick the paper uses with ``nnls``);
  large ones by ``scipy.optimize.lsq_linear`` (bounded, sparse, trust-region
  reflective) to a documented tolerance.
* **Method C**: as B with weights on the equations: margins known exactly
  are up-weighted (1000 by default) so they are reproduced almost exactly
  while perturbed margins are down-weighted.
* **Least absolute deviation** (the maximum-likelihood fit under Laplace
  noise): ``min sum |X^T y - z|, y >= 0`` as a linear programme (HiGHS).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy import optimize, sparse
from scipy.sparse.linalg import lsqr

from tablesafe._errors import ComputationError, ParameterError
from tablesafe.postprocess._design import DesignMatrix

__all__ = ["least_absolute_deviation", "method_a", "method_b", "method_c"]

#: Size (cells) up to which Method B is solved exactly with dense NNLS.
EXACT_LIMIT = 2000


def _z(design: DesignMatrix, z: npt.ArrayLike) -> np.ndarray:
    v = np.asarray(z, dtype=np.float64)
    if v.shape != (design.x.shape[1],):
        raise ParameterError(
            f"z has {v.size} elements but the design matrix has {design.x.shape[1]} columns"
        )
    if not np.all(np.isfinite(v)):
        raise ParameterError("z must be finite numbers")
    return v


def method_a(design: DesignMatrix, z: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Method A (eq. 2): the minimum-norm least-squares inner cells.

    LSQR started from zero converges to the minimum-norm solution of the
    least-squares problem, which is ``(X^T)^+ z``.

    Returns:
        The inner table (dropped rows are 0).
    """
    v = _z(design, z)
    sol = lsqr(design.x.T.tocsr(), v, atol=1e-14, btol=1e-14, iter_lim=100_000)
    return design.full(sol[0])


def _nonneg(
    a: sparse.spmatrix, b: np.ndarray, ridge: float, tol: float, exact: bool | None
) -> np.ndarray:
    n = a.shape[1]
    stacked = sparse.vstack([a, ridge * sparse.identity(n, format="csr")]).tocsr()
    rhs = np.concatenate([b, np.zeros(n)])
    use_exact = n <= EXACT_LIMIT if exact is None else exact
    if use_exact:
        sol, _ = optimize.nnls(stacked.toarray(), rhs, maxiter=50 * n)
        return np.asarray(sol, dtype=np.float64)
    res = optimize.lsq_linear(
        stacked, rhs, bounds=(0, np.inf), lsmr_tol="auto", tol=tol, max_iter=10_000
    )
    if not res.success and res.status == 0:
        raise ComputationError(f"non-negative estimation did not converge: {res.message}")
    return np.asarray(np.maximum(res.x, 0.0), dtype=np.float64)


def method_b(
    design: DesignMatrix,
    z: npt.ArrayLike,
    *,
    ridge: float = 1e-3,
    tol: float = 1e-10,
    exact: bool | None = None,
) -> npt.NDArray[np.float64]:
    """Method B: non-negative least squares with a small ridge penalty.

    Args:
        design: The design matrix.
        z: The (perturbed) margins.
        ridge: The ridge parameter lambda (small: it only breaks ties).
        tol: Convergence tolerance of the large-problem solver.
        exact: Force the exact (dense NNLS) or the scalable solver;
            default by size (exact up to 2000 cells).
    """
    if ridge <= 0:
        raise ParameterError("ridge must be > 0")
    return design.full(_nonneg(design.x.T.tocsr(), _z(design, z), ridge, tol, exact))


def method_c(
    design: DesignMatrix,
    z: npt.ArrayLike,
    weights: npt.ArrayLike,
    *,
    ridge: float = 1e-3,
    tol: float = 1e-10,
    exact: bool | None = None,
) -> npt.NDArray[np.float64]:
    """Method C: Method B with weighted equations (exact margins up-weighted, e.g. 1000).

    Args:
        design: The design matrix.
        z: The margins, exact and perturbed.
        weights: One weight per element of z (1000 for exact, 1 for perturbed).
        ridge: The ridge parameter.
        tol: Convergence tolerance of the large-problem solver.
        exact: As in :func:`method_b`.
    """
    w = np.asarray(weights, dtype=np.float64)
    v = _z(design, z)
    if w.shape != v.shape or np.any(w <= 0):
        raise ParameterError("weights must be positive, one per element of z")
    root = np.sqrt(w)
    a = sparse.diags(root) @ design.x.T.tocsr()
    return design.full(_nonneg(a, root * v, ridge, tol, exact))


def least_absolute_deviation(
    design: DesignMatrix, z: npt.ArrayLike, *, weights: npt.ArrayLike | None = None
) -> npt.NDArray[np.float64]:
    """Non-negative least absolute deviation fit (Laplace noise), as a linear programme.

    ``min sum_j w_j |(X^T y)_j - z_j|`` over ``y >= 0``, with slack variables
    ``s+ - s- = X^T y - z``, solved by HiGHS.
    """
    v = _z(design, z)
    xt = design.x.T.tocsr()
    m, n = xt.shape
    w = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64)
    eye = sparse.identity(m, format="csr")
    a_eq = sparse.hstack([xt, -eye, eye]).tocsr()
    c = np.concatenate([np.full(n, 1e-9), w, w])  # tiny cost on y: the smallest fit
    res = optimize.linprog(c, A_eq=a_eq, b_eq=v, bounds=[(0, None)] * (n + 2 * m), method="highs")
    if res.x is None:
        raise ComputationError(f"least absolute deviation failed: {res.message}")
    return design.full(res.x[:n])
